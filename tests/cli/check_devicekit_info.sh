#!/usr/bin/env bash
# devicekit-info behaves as documented: JSON fields, CPU fallback with a reason, a bad
# DEVICEKIT_PREFER refused with the allowed values, CUDA_VISIBLE_DEVICES="" honoured, unknown
# flags refused with usage; the routing, recommendations and engines sections; DEVICEKIT_PLATFORMS;
# GPUs that only a (fake) NVML sees. Usage: check_devicekit_info.sh path/to/devicekit-info [fake-nvml.so]
set -u
info=$1
fake_nvml=${2:-}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
json_get() { python3 -c 'import json,sys; d=json.load(sys.stdin); v=d
for k in sys.argv[1].split("."): v=v[int(k)] if isinstance(v,list) else v[k]
print("null" if v is None else v)' "$1"; }

out=$("$info" --json) || fail "--json exited $?"
for key in backend device_type device_count gpu_count default_device cuda_runtime_version driver_version \
           fallback_reason memory_strategy memory_fraction devices.0.id devices.0.kind devices.0.name \
           devices.0.total_memory_bytes devices.0.memory.total_bytes devices.0.memory.headroom_bytes \
           devices.0.memory.fraction devices.0.memory.budget_bytes devices.0.memory.pool.reserved_bytes \
           devices.0.memory.pool.fragmentation; do
  echo "$out" | json_get "$key" >/dev/null 2>&1 || fail "JSON lacks '$key'"
done
for key in routing.mode routing.detector routing.preference routing.default_device_choice \
           recommendations.batch_size.hardware recommendations.batch_size.optimal recommendations.memory_strategy \
           recommendations.precision engines.nccl.status engines.nccl.built engines.mpi.status engines.mpi.built \
           devices.0.usable; do
  echo "$out" | json_get "$key" >/dev/null 2>&1 || fail "JSON lacks '$key'"
done
[ "$(echo "$out" | json_get routing.detector)" = "first_available<cuda, nvml, cpu>" ] || fail "routing.detector is not the tool's chain"
[ "$(echo "$out" | json_get routing.platforms_source)" = "null" ] || fail "no DEVICEKIT_PLATFORMS, but a platform source is reported"
[ "$(echo "$out" | json_get routing.default_device_choice)" = "the first device found" ] || fail "default device choice not reported"
for engine in nccl mpi; do
  if [ "$(echo "$out" | json_get engines.$engine.built)" = "False" ]; then
    echo "$out" | json_get engines.$engine.status | grep -q "^not built" || fail "$engine not built, but its status does not say so"
  else
    [ "$(echo "$out" | json_get engines.$engine.header_version)" != "null" ] || fail "$engine built without a header version"
  fi
done
if [ "$(echo "$out" | json_get device_type)" = "cpu" ]; then
  [ "$(echo "$out" | json_get recommendations.batch_size.hardware)" = "cpu" ] || fail "CPU, but the batch recommendation is not for the CPU"
  [ "$(echo "$out" | json_get recommendations.batch_size.optimal)" = "$(echo "$out" | json_get batch_size.optimal)" ] ||
    fail "recommended batch size differs from the CPU table row"
  [ "$(echo "$out" | json_get recommendations.precision)" = "fp32" ] || fail "CPU, but a reduced precision is recommended"
fi
gpus=$(echo "$out" | json_get gpu_count)
if [ "$gpus" = "0" ]; then
  [ "$(echo "$out" | json_get device_type)" = "cpu" ] || fail "no GPU but device_type is not cpu"
  reason=$(echo "$out" | json_get fallback_reason)
  [ "$reason" != "null" ] || fail "no GPU but no fallback_reason"
  if [ "$(echo "$out" | json_get driver_version)" = "null" ]; then
    echo "$reason" | grep -qi "driver" || fail "no driver, but the fallback reason does not name it: $reason"
  fi
else
  [ "$(echo "$out" | json_get fallback_reason)" = "null" ] || fail "GPU in use but fallback_reason is set"
fi

err=$(DEVICEKIT_PREFER=tpu "$info" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "DEVICEKIT_PREFER=tpu exited $rc, not 2 (docs/environment.md)"
for word in auto cuda cpu tpu; do echo "$err" | grep -q "$word" || fail "DEVICEKIT_PREFER=tpu message lacks '$word': $err"; done

out=$(CUDA_VISIBLE_DEVICES= "$info" --json) || fail "CUDA_VISIBLE_DEVICES= exited $?"
[ "$(echo "$out" | json_get device_type)" = "cpu" ] || fail "CUDA_VISIBLE_DEVICES= did not fall back to the CPU"
echo "$out" | json_get fallback_reason | grep -q "CUDA_VISIBLE_DEVICES" || fail "CUDA_VISIBLE_DEVICES= reason missing"

out=$(DEVICEKIT_PREFER=cpu "$info" --json) || fail "DEVICEKIT_PREFER=cpu exited $?"
[ "$(echo "$out" | json_get default_device)" = "cpu:0" ] || fail "DEVICEKIT_PREFER=cpu did not choose cpu:0"

err=$(DEVICEKIT_PLATFORMS=tpu,cpu "$info" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "DEVICEKIT_PLATFORMS=tpu,cpu exited $rc, not 2"
for word in DEVICEKIT_PLATFORMS tpu cuda cpu; do echo "$err" | grep -q "$word" || fail "DEVICEKIT_PLATFORMS=tpu,cpu message lacks '$word': $err"; done

out=$(DEVICEKIT_PLATFORMS=cpu,cuda "$info" --json) || fail "DEVICEKIT_PLATFORMS=cpu,cuda exited $?"
[ "$(echo "$out" | json_get device_type)" = "cpu" ] || fail "DEVICEKIT_PLATFORMS=cpu,cuda did not choose the CPU"
[ "$(echo "$out" | json_get routing.platforms.0)" = "cpu" ] || fail "routing.platforms does not start with cpu"
[ "$(echo "$out" | json_get routing.platforms_source)" = "DEVICEKIT_PLATFORMS" ] || fail "platform source not DEVICEKIT_PLATFORMS"
echo "$out" | json_get routing.mode | grep -q "platform list cpu,cuda" || fail "routing.mode does not show the platform list"

err=$(CUDA_VISIBLE_DEVICES= DEVICEKIT_PLATFORMS=cuda "$info" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "a platform list that excludes every platform found exited $rc, not 2"
echo "$err" | grep -q "DEVICEKIT_PLATFORMS=cuda" || fail "excluded-everything message does not name the list: $err"

if [ -n "$fake_nvml" ] && [ "$gpus" = "0" ]; then
  # GPUs that NVML lists but the CUDA runtime cannot use: reported, marked unusable, exit 0.
  out=$(DEVICEKIT_NVML_LIBRARY=$fake_nvml DEVICEKIT_FAKE_NVML_GPUS=2 "$info" --json 2>/dev/null) || fail "fake NVML exited $?"
  [ "$(echo "$out" | json_get detector)" = "nvml" ] || fail "fake NVML: detector is not nvml"
  [ "$(echo "$out" | json_get device_count)" = "2" ] || fail "fake NVML: device_count is not 2"
  [ "$(echo "$out" | json_get gpu_count)" = "0" ] || fail "fake NVML: unusable GPUs counted in gpu_count"
  [ "$(echo "$out" | json_get devices.1.usable)" = "False" ] || fail "fake NVML: device 1 not marked unusable"
  echo "$out" | json_get devices.0.unusable_reason | grep -q "CUDA runtime cannot use it" || fail "fake NVML: no unusable reason"
  text=$(DEVICEKIT_NVML_LIBRARY=$fake_nvml DEVICEKIT_FAKE_NVML_GPUS=2 "$info" 2>&1) || fail "fake NVML text exited $?"
  echo "$text" | grep -q "Unusable: found by NVML" || fail "fake NVML: text report does not mark the GPUs unusable"
  echo "$text" | grep -q "cannot use cuda:0" || fail "fake NVML: no message that the pool on cuda:0 was refused"
fi

text=$("$info") || fail "text report exited $?"
for word in "Backend:" "Device Count:" "Memory Strategy: balanced" "Memory Fraction: 0.75" "Default Device:" \
            "Routing: detector order first_available<cuda, nvml, cpu>" "Default Device Choice:" "Recommendations:" \
            "  Batch Size: " "  Memory Strategy: " "  Precision: " "Engines:" "  NCCL: " "  MPI: "; do
  echo "$text" | grep -q "$word" || fail "text report lacks '$word'"
done
echo "$text" | grep -q "Memory: budget" || fail "text report lacks the memory budget line"
[ "$(echo "$out" | json_get devices.0.memory.fraction)" = "0.75" ] || fail "memory fraction in the device's budget is not 0.75"
"$info" --verbose >/dev/null || fail "--verbose exited $?"
"$info" --strategy aggressive | grep -q "Memory Fraction: 0.90" || fail "--strategy aggressive not reported"
"$info" --help | grep -q -- "--json" || fail "--help does not list --json"

err=$("$info" --no-such-flag 2>&1); rc=$?
[ $rc -ne 0 ] || fail "an unknown flag exited 0"
echo "$err" | grep -q "no-such-flag" || fail "unknown flag not named in the error"
echo "$err" | grep -qi "usage" || fail "unknown flag: no usage printed"

if [ $failures -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "devicekit-info: all checks passed"
