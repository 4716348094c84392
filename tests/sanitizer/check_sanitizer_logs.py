#!/usr/bin/env python3
"""scripts/check-sanitizer-log against compute-sanitizer logs of a real GPU run (logs/: memcheck,
racecheck and synccheck of the gpu-labelled tests on an H200, CUDA 13.0, the host backtraces
left out of the larger ones) and against those logs altered to hold what must fail: a race, a
memory error, an undeclared or missing API error, a run that did not finish."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "check-sanitizer-log")
failures = []


def log_text(name):
    with open(os.path.join(HERE, "logs", name), encoding="utf-8") as f:
        return f.read()


def run(test, tool, text, expect=None):
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        args = [sys.executable, SCRIPT, "--test", test, "--tool", tool]
        for item in expect or []:
            args += ["--expect", item]
        p = subprocess.run(args + [path], capture_output=True, text=True)
        return p.returncode, (p.stdout + p.stderr).strip()
    finally:
        os.unlink(path)


def check(what, result, rc, says):
    got_rc, out = result
    if got_rc != rc or says not in out:
        failures.append(f"{what}: expected exit {rc} saying '{says}', got exit {got_rc}: {out}")


def replace_once(text, old, new):
    assert old in text, old
    return text.replace(old, new, 1)


sim_rules = log_text("memcheck_gpu_sim_rules.log")
graph = log_text("memcheck_gpu_graph_gpu_cu.log")
race = log_text("racecheck_gpu_graph_gpu_cu.log")
sync = log_text("synccheck_gpu_graph_gpu_cu.log")
nccl = log_text("memcheck_gpu_nccl.log")

# The real run passes: racecheck's own summary line, API errors read back by cudaGetLastError,
# the deliberate errors declared per test, NCCL's probes of any number.
check("racecheck, no hazards", run("gpu.gpu_graph_gpu_cu", "racecheck", race), 0, "ok")
check("synccheck, no errors", run("gpu.gpu_graph_gpu_cu", "synccheck", sync), 0, "ok")
check("memcheck, graph cases", run("gpu.gpu_graph_gpu_cu", "memcheck", graph), 0, "ok")
check("memcheck, the simulator's rules", run("gpu.gpu_sim_rules", "memcheck", sim_rules), 0, "ok")
check("memcheck, NCCL's probes", run("gpu.gpu_nccl", "memcheck", nccl), 0, "ok")

# Racecheck's findings fail, errors and warnings alike.
check("racecheck, a race", run("gpu.gpu_graph_gpu_cu", "racecheck",
                               race.replace("0 hazards displayed (0 errors, 0 warnings)",
                                            "1 hazards displayed (1 errors, 0 warnings)")), 1, "1 race(s)")
check("racecheck, a possible race", run("gpu.gpu_graph_gpu_cu", "racecheck",
                                        race.replace("0 hazards displayed (0 errors, 0 warnings)",
                                                     "2 hazards displayed (0 errors, 2 warnings)")), 1,
      "2 possible race(s)")
check("synccheck, an error", run("gpu.gpu_graph_gpu_cu", "synccheck",
                                 sync.replace("ERROR SUMMARY: 0 errors", "ERROR SUMMARY: 1 error")), 1, "1 error(s)")

# A run that did not finish (no summary line) fails under every tool.
for tool, text, marker in [("memcheck", graph, "========= ERROR SUMMARY"),
                           ("synccheck", sync, "========= ERROR SUMMARY"),
                           ("racecheck", race, "========= RACECHECK SUMMARY")]:
    cut = text[:text.index(marker)]
    check(f"{tool}, cut short", run("gpu.gpu_graph_gpu_cu", tool, cut), 1, "did not finish")

# Deliberate errors pass only where declared, and in the declared number.
check("memcheck, the graph cases' log under a test with no declarations", run("gpu.gpu_place_gpu", "memcheck", graph),
      1, "4 undeclared API error(s): cudaErrorStreamCaptureInvalidated from cudaGetLastError")
missing = run("gpu.gpu_sim_rules", "memcheck",
              replace_once(sim_rules, "on CUDA API call to cudaMallocHost.", "on CUDA API call to cudaHostAlloc."))
check("memcheck, a declared error missing", missing, 1,
      "expected 1 cudaErrorStreamCaptureUnsupported from cudaMallocHost, got 0")
check("memcheck, an undeclared error in its place", missing, 1,
      "1 undeclared API error(s): cudaErrorStreamCaptureUnsupported from cudaHostAlloc")
extra = replace_once(graph, "========= ERROR SUMMARY: 4 errors",
                     "========= Program hit cudaErrorInvalidValue (error 1) due to \"invalid argument\" on CUDA "
                     "API call to cudaMemcpyAsync.\n========= ERROR SUMMARY: 5 errors")
check("memcheck, one undeclared API error more", run("gpu.gpu_graph_gpu_cu", "memcheck", extra), 1,
      "1 undeclared API error(s): cudaErrorInvalidValue from cudaMemcpyAsync")
# A read-back passes only for an error that is declared.
echo = replace_once(graph, "========= ERROR SUMMARY: 4 errors",
                    "========= Program hit cudaErrorInvalidValue (error 1) due to \"invalid argument\" on CUDA "
                    "API call to cudaGetLastError.\n========= ERROR SUMMARY: 5 errors")
check("memcheck, an undeclared error read back", run("gpu.gpu_graph_gpu_cu", "memcheck", echo), 1,
      "cudaErrorInvalidValue from cudaGetLastError")

# Memory errors are never declarable: counted in the summary, they fail the run.
memory_error = replace_once(graph, "========= ERROR SUMMARY: 4 errors",
                            "========= Invalid __global__ read of size 4 bytes\n"
                            "=========     at tree_transform_args_kernel+0x1b0\n"
                            "========= ERROR SUMMARY: 5 errors")
check("memcheck, a memory error", run("gpu.gpu_graph_gpu_cu", "memcheck", memory_error), 1,
      "1 error(s) that are not API errors")

# A malformed declaration is the caller's mistake: exit 2, saying what the form is.
check("a malformed declaration", run("gpu.gpu_graph_gpu_cu", "memcheck", graph, expect=["cudaErrorX=1"]), 2,
      "is not <error>@<call>=<count or *>")

for f in failures:
    print("FAILED:", f)
print(f"check_sanitizer_logs: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
