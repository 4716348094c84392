#!/usr/bin/env bash
# devicekit-info behaves as documented: JSON fields, CPU fallback with a reason, a bad
# DEVICEKIT_PREFER refused with the allowed values, CUDA_VISIBLE_DEVICES="" honoured, unknown
# flags refused with usage. Usage: check_devicekit_info.sh path/to/devicekit-info
set -u
info=$1
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
[ $rc -ne 0 ] || fail "DEVICEKIT_PREFER=tpu exited 0"
for word in auto cuda cpu tpu; do echo "$err" | grep -q "$word" || fail "DEVICEKIT_PREFER=tpu message lacks '$word': $err"; done

out=$(CUDA_VISIBLE_DEVICES= "$info" --json) || fail "CUDA_VISIBLE_DEVICES= exited $?"
[ "$(echo "$out" | json_get device_type)" = "cpu" ] || fail "CUDA_VISIBLE_DEVICES= did not fall back to the CPU"
echo "$out" | json_get fallback_reason | grep -q "CUDA_VISIBLE_DEVICES" || fail "CUDA_VISIBLE_DEVICES= reason missing"

out=$(DEVICEKIT_PREFER=cpu "$info" --json) || fail "DEVICEKIT_PREFER=cpu exited $?"
[ "$(echo "$out" | json_get default_device)" = "cpu:0" ] || fail "DEVICEKIT_PREFER=cpu did not choose cpu:0"

text=$("$info") || fail "text report exited $?"
for word in "Backend:" "Device Count:" "Memory Strategy: balanced" "Memory Fraction: 0.75" "Default Device:"; do
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
