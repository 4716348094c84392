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
#  6. with FAITHFUL=1: the example itself on simulated GPUs of that smallest size and of 1 MiB less
#     (where the simulator allows it, from 1 MiB); each run's own trace, replayed at its size, must
#     agree with the run (see the step below); whether the run did what the first run's replay
#     said is printed.
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

# 6. The run itself at those sizes. A second run's device need not progress as the first's did (the
# simulator's streams run on threads of their own, with random delays in the sweep), so its pools
# may hold other blocks when memory runs short. What must hold for each such run is that its own
# trace, replayed at its size, agrees with it: refused exactly what the run was refused, or
# fitting with the run's peaks. Whether it also did what the first run's replay said at that size
# (the usual case) is printed, not required.
check_run_at() {  # size in bytes, and what the first run's replay said there: fits / fails
  local size=$1 predicted=$2
  shift 2
  DEVICEKIT_SIM_GPU0=memory=$size DEVICEKIT_SIM_GPU1=memory=$size DEVICEKIT_SIM_GPU2=memory=$size \
    DEVICEKIT_SIM_GPU3=memory=$size DEVICEKIT_TRACE=$dir/at_$size.dkt "$example" "$@" >"$dir/at_$size.txt" 2>&1
  local rc=$?
  "$replay" "$dir/at_$size.dkt" --partial --json >"$dir/at_$size.json" 2>&1
  "$replay" "$dir/at_$size.dkt" --partial --dump >"$dir/at_$size.jsonl" 2>&1
  python3 - "$rc" "$predicted" "$dir/at_$size.json" "$dir/at_$size.jsonl" "$dir/predicted_$size.json" "$size" <<'PY' ||
import json, sys
rc, predicted, own_path, dump_path, first_path, size = sys.argv[1:]
own = json.load(open(own_path))
refused = [json.loads(l) for l in open(dump_path) if '"op":"out_of_memory"' in l]
if rc == "0":
    assert not refused or all(p["reproduced_out_of_memory"] == p["recorded_out_of_memory"] for p in own["pools"]), own
    for p in own["pools"]:
        if "recorded_peak_allocated_bytes" in p:
            assert p["peak_allocated_bytes"] == p["recorded_peak_allocated_bytes"], p
            assert p["peak_reserved_bytes"] == p["recorded_peak_reserved_bytes"], p
    did = "fits"
else:
    assert refused, "the run on GPUs of %s bytes failed, but its pools were refused nothing" % size
    assert any(p["recorded_out_of_memory"] for p in own["pools"]), own
    assert all(p["reproduced_out_of_memory"] == p["recorded_out_of_memory"] for p in own["pools"]), own
    did = "fails"
same = did == predicted
if did == "fails" and predicted == "fails":
    first = json.load(open(first_path))["failure"]
    same = (refused[0]["pool"], refused[0]["seq"], refused[0]["bytes"]) == (first["pool"], first["seq"], first["bytes"])
note = "" if same else " (its device progressed otherwise than the first run's, whose replay said: %s)" % predicted
print("GPUs of %s bytes: the run %s, and its own trace replays it%s" % (size, did, note))
PY
    fail "the run on GPUs of $size bytes (exit $rc) and the replay of its own trace disagree: $(cat "$dir/at_$size.json")"
}
if [ "$faithful" = 1 ] && [ -n "$min" ]; then
  "$replay" "$trace" --memory "$min" --json >"$dir/predicted_$min.json"
  check_run_at "$min" fits "$@"
  if [ $below -ge $((1 << 20)) ]; then
    "$replay" "$trace" --memory "$below" --json >"$dir/predicted_$below.json"
    check_run_at "$below" fails "$@"
  else
    echo "note: 1 MiB below the smallest size that fits is below the simulator's smallest GPU (1 MiB): not run"
  fi
fi

echo "memory trace replay: $failures failure(s)"
[ $failures -eq 0 ]
