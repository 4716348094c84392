#!/usr/bin/env python3
"""Checks scripts/draw on small inputs whose pictures are known: which bars meet their goals,
that bars grow with the ratio, one chart per facility, the trace's nesting and counter steps,
and a clear refusal of input without figures."""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRAW = os.path.join(ROOT, "scripts", "draw")
NS = "{http://www.w3.org/2000/svg}"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED:", what)


def draw(*args):
    return subprocess.run([sys.executable, DRAW, *args], capture_output=True, text=True)


def row(name, ratio, note=""):
    return {"name": name, "device": "cuda", "metric": "time", "value": 1.0, "unit": "us",
            "baseline": "b", "baseline_value": ratio, "ratio": ratio, "note": note}


with tempfile.TemporaryDirectory() as tmp:
    summary = os.path.join(tmp, "summary.json")
    rows = [row("pool.met", 2.0, "goal >= 1.5"), row("pool.missed", 0.5, "goal ratio >= 1"),
            row("pool.plain", 3.0, "informational"), row("place.strict", 10.0, "goal: ratio > 1 (no detour)"),
            row("place.zero", 0.0, "goal: 0 per replay")]
    with open(summary, "w") as f:
        json.dump({"meta": {"date": "2026-01-01", "gpu": "Test GPU"}, "entries": rows}, f)
    out = os.path.join(tmp, "charts")
    r = draw("bench", summary, out)
    check(r.returncode == 0, f"draw bench exits 0 (stderr: {r.stderr})")
    check(sorted(os.listdir(out)) == ["place.svg", "pool.svg"], f"one chart per facility: {os.listdir(out)}")
    pool = ET.parse(os.path.join(out, "pool.svg")).getroot()
    bars = {r.find(NS + "title").text.split(" ")[0]: r for r in pool.iter(NS + "rect") if "bar" in r.get("class", "")}
    check(bars["pool.met"].get("class") == "bar met", "2.0 against goal 1.5 is met")
    check(bars["pool.missed"].get("class") == "bar missed", "0.5 against goal 1 is missed")
    check(bars["pool.plain"].get("class") == "bar none", "a row without a goal has none")
    width = {k: float(v.get("width")) for k, v in bars.items()}
    check(width["pool.missed"] < width["pool.met"] < width["pool.plain"], f"bars grow with the ratio: {width}")
    check(len([g for g in pool.iter(NS + "line") if g.get("class") == "goal"]) == 2, "two goal markers in pool")
    check("Test GPU" in ET.tostring(pool, encoding="unicode"), "the machine is named")
    place = ET.parse(os.path.join(out, "place.svg")).getroot()
    classes = sorted(r.get("class") for r in place.iter(NS + "rect") if "bar" in r.get("class", ""))
    check(classes == ["bar met", "bar none"], f"'ratio > 1' is a goal, '0 per replay' is not: {classes}")
    # A plain list (what scripts/bench writes) draws the same.
    with open(summary, "w") as f:
        json.dump(rows, f)
    check(draw("bench", summary, os.path.join(tmp, "list")).returncode == 0, "a list of rows is accepted")
    with open(summary, "w") as f:
        json.dump([], f)
    r = draw("bench", summary, os.path.join(tmp, "empty"))
    check(r.returncode != 0 and "no rows" in r.stderr, f"no rows: a clear error ({r.stderr.strip()})")

    trace = os.path.join(tmp, "t.json")
    events = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "devicekit memory cuda:0"}},
              {"name": "step", "ph": "B", "pid": 1, "tid": 1, "ts": 0.0},
              {"name": "layer", "ph": "B", "pid": 1, "tid": 1, "ts": 10.0},
              {"name": "mem", "ph": "C", "pid": 1, "ts": 12.0, "args": {"allocated": 100, "reserved": 400}},
              {"name": "mem", "ph": "C", "pid": 1, "ts": 20.0, "args": {"allocated": 300, "reserved": 400}},
              {"name": "mem", "ph": "C", "pid": 1, "ts": 30.0, "args": {"allocated": 0, "reserved": 400}},
              {"name": "layer", "ph": "E", "pid": 1, "tid": 1, "ts": 40.0},
              {"name": "step", "ph": "E", "pid": 1, "tid": 1, "ts": 50.0}]
    with open(trace, "w") as f:
        json.dump({"traceEvents": events}, f)
    svg = os.path.join(tmp, "t.svg")
    r = draw("trace", trace, svg)
    check(r.returncode == 0, f"draw trace exits 0 (stderr: {r.stderr})")
    root = ET.parse(svg).getroot()
    slices = {s.find(NS + "title").text.split(":")[0]: s for s in root.iter(NS + "rect") if s.get("class") == "slice"}
    check(sorted(slices) == ["layer", "step"], f"two scope slices: {sorted(slices)}")
    check(float(slices["layer"].get("y")) > float(slices["step"].get("y")), "the inner scope is drawn below")
    check(float(slices["layer"].get("width")) < float(slices["step"].get("width")), "the inner scope is shorter")
    lines = [p for p in root.iter(NS + "polyline") if p.get("class") == "counter"]
    check(len(lines) == 2, f"allocated and reserved are two lines: {len(lines)}")
    # Three samples drawn as steps: each later sample adds a corner, so 3 + 2 points.
    check(all(len(p.get("points").split()) == 5 for p in lines), "counters are steps")
    with open(trace, "w") as f:
        json.dump({"traceEvents": []}, f)
    r = draw("trace", trace, svg)
    check(r.returncode != 0 and "no slices or counters" in r.stderr, "an empty trace: a clear error")

print("draw: all checks passed" if not failures else f"draw: {len(failures)} check(s) failed")
sys.exit(1 if failures else 0)
