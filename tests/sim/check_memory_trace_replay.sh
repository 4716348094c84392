#!/usr/bin/env bash
# "Will it fit?" end to end, for one example on the simulated GPUs DEVICEKIT_SIM_GPUS sets up:
#  1. the example runs with DEVICEKIT_TRACE set;
#  2. devicekit-replay on its trace at the recorded device size exits 0 and prints every pool's
#     peaks as the run reported them (--json: equal, byte for byte);
#  3. with each GPU at a quarter of the largest GPU pool's peak it exits 1 and names the
#     allocation that failed and its source;
#  4. the trace with its last record cut exits 2 and says so;
#  5. --perfetto writes Chrome trace JSON; --min-memory finds a size that fits, and 1 MiB less
#     does not;
#  6. with FAITHFUL=1: the example itself, on simulated GPUs of that smallest size, runs; on GPUs
#     1 MiB smaller (where the simulator allows it, from 1 MiB) it fails at the allocation the
#     replay named, the same request of the same size in the same pool. Under the simulator's
#     random delays the device may progress otherwise in that second run, and pools then hold other
#     blocks when memory runs out: the run may fail at another request, and its own trace, replayed
#     at its size, must then be refused exactly what the run was refused.
# Usage: check_memory_trace_replay.sh EXAMPLE DEVICEKIT_REPLAY FAITHFUL [EXAMPLE ARGS...]
set -u
example=$1
replay=$2
faithful=$3
shift 3
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
trace=$dir/run.dkt

DEVICEKIT_TRACE=$trace "$example" "$@" >"$dir/run.txt" 2>&1 || fail "the example exited $?: $(tail -5 "$dir/run.txt")"
[ -s "$trace" ] || { fail "no trace was written"; exit 1; }

# 2. At the recorded size.
"$replay" "$trace" >"$dir/same.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "the replay at the recorded size exited $rc: $(cat "$dir/same.txt")"
grep -q "^fits:" "$dir/same.txt" || fail "the replay at the recorded size does not say it fits"
"$replay" "$trace" --json >"$dir/same.json" || fail "--json exited $?"
peak=$(python3 - "$dir/same.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["fits"] is True, "fits is not true"
gpu = [p for p in r["pools"] if p["device"].startswith("cuda:")]
assert gpu, "no GPU pool in the trace"
for p in r["pools"]:
    assert "recorded_peak_allocated_bytes" in p, "pool %d has no recorded peak" % p["pool"]
    assert p["peak_allocated_bytes"] == p["recorded_peak_allocated_bytes"], p
    assert p["peak_reserved_bytes"] == p["recorded_peak_reserved_bytes"], p
print(max(p["peak_allocated_bytes"] for p in gpu))
PY
) || fail "the replayed peaks are not the run's: $(cat "$dir/same.json")"
peak=${peak:-0}
grep -q "the run reported: peak allocated $peak bytes" "$dir/same.txt" ||
  fail "the text output does not print the run's GPU peak ($peak): $(cat "$dir/same.txt")"

# 3. A quarter of that peak per GPU.
quarter=$((peak / 4))
"$replay" "$trace" --memory "$quarter" >"$dir/quarter.txt" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "the replay at a quarter of the peak ($quarter bytes) exited $rc, not 1: $(cat "$dir/quarter.txt")"
grep -Eq "^does not fit: cuda:[0-9]+ \(pool [0-9]+\) cannot allocate .*, its request [0-9]+, at .+:[0-9]+" \
  "$dir/quarter.txt" || fail "the failure does not name the allocation and its source: $(cat "$dir/quarter.txt")"

# 4. The last record cut.
size=$(stat -c %s "$trace")
head -c $((size - 5)) "$trace" >"$dir/cut.dkt"
"$replay" "$dir/cut.dkt" >"$dir/cut.txt" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "a cut trace exited $rc, not 2"
grep -q "at byte [0-9]*: the file ends inside a record: it was cut short" "$dir/cut.txt" ||
  fail "a cut trace is not reported as such: $(cat "$dir/cut.txt")"

# 5. The timeline, and the smallest memory that fits.
"$replay" "$trace" --perfetto "$dir/timeline.json" >/dev/null || fail "--perfetto exited $?"
python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); assert any(e["ph"]=="C" for e in t["traceEvents"])' \
  "$dir/timeline.json" || fail "the Perfetto timeline is not Chrome trace JSON with counters"
"$replay" "$trace" --min-memory >"$dir/min.txt" 2>&1 || fail "--min-memory exited $?: $(cat "$dir/min.txt")"
min=$(sed -n 's/^smallest GPU memory that fits: .* (\([0-9]*\) bytes)$/\1/p' "$dir/min.txt")
if [ -z "$min" ] || [ "$min" -le "$quarter" ]; then
  fail "--min-memory found '$min', not above a quarter of the peak: $(cat "$dir/min.txt")"
  min=""
fi
below=$((${min:-0} - (1 << 20)))
if [ -n "$min" ]; then
  "$replay" "$trace" --memory "$min" >/dev/null || fail "the replay at --min-memory's answer ($min) does not fit"
  if [ $below -gt 0 ]; then
    "$replay" "$trace" --memory "$below" --json >"$dir/below.json"
    [ $? -eq 1 ] || fail "1 MiB below --min-memory's answer ($below) still fits"
  fi
fi

# 6. The run itself at those sizes.
if [ "$faithful" = 1 ] && [ -n "$min" ]; then
  DEVICEKIT_SIM_GPU0=memory=$min DEVICEKIT_SIM_GPU1=memory=$min DEVICEKIT_SIM_GPU2=memory=$min \
    DEVICEKIT_SIM_GPU3=memory=$min "$example" "$@" >"$dir/min_run.txt" 2>&1 ||
    fail "the example on GPUs of $min bytes, which the replay says fit, exited $?: $(tail -5 "$dir/min_run.txt")"
  if [ $below -ge $((1 << 20)) ]; then
    DEVICEKIT_SIM_GPU0=memory=$below DEVICEKIT_SIM_GPU1=memory=$below DEVICEKIT_SIM_GPU2=memory=$below \
      DEVICEKIT_SIM_GPU3=memory=$below DEVICEKIT_TRACE=$dir/below.dkt "$example" "$@" >"$dir/below_run.txt" 2>&1 &&
      fail "the example on GPUs of $below bytes, which the replay says do not fit, succeeded"
    "$replay" "$dir/below.dkt" --partial --dump >"$dir/below_run.jsonl" 2>&1 || fail "the short run's trace: $(cat "$dir/below_run.jsonl")"
    "$replay" "$dir/below.dkt" --partial --json >"$dir/below_self.json" 2>&1
    python3 - "$dir/below.json" "$dir/below_run.jsonl" "$dir/below_self.json" <<'PY' || fail "the short run failed elsewhere than the replay said"
import json, sys
replayed = json.load(open(sys.argv[1]))["failure"]
refused = [json.loads(l) for l in open(sys.argv[2]) if '"op":"out_of_memory"' in l]
assert refused, "the short run was refused nothing its pools recorded"
first = refused[0]
if (first["pool"], first["seq"], first["bytes"]) != (replayed["pool"], replayed["seq"], replayed["bytes"]):
    # Another run: where the simulator's delays (DEVICEKIT_SIM_MAX_DELAY_US, real time under load) let
    # the device progress differently, pools may hold other blocks when the memory runs out. What must
    # hold then is that the short run's own trace, replayed at its size, is refused what it was refused.
    own = json.load(open(sys.argv[3]))
    pool = next(p for p in own["pools"] if p["pool"] == first["pool"])
    assert pool["recorded_out_of_memory"] >= 1 and pool["reproduced_out_of_memory"] == pool["recorded_out_of_memory"], (first, replayed, pool)
    print("note: the short run's device progressed otherwise (failed at request %d of pool %d, the replay at %d); "
          "its own trace replays its refusals" % (first["seq"], first["pool"], replayed["seq"]))
PY
  else
    echo "note: 1 MiB below the smallest size that fits is below the simulator's smallest GPU (1 MiB): not run"
  fi
fi

echo "memory trace replay: $failures failure(s)"
[ $failures -eq 0 ]
