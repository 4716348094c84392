#!/usr/bin/env python3
"""Every simulator test (label 'sim') fixes each DEVICEKIT_SIM_* variable the simulator reads,
so that a user's shell cannot change its answer: the test sets it (ENVIRONMENT) or CTest unsets it
(ENVIRONMENT_MODIFICATION `VAR=unset:`), and never unsets one it sets. The variables passed through
on purpose (--passed) are left alone. The variables come from the simulator's sources (a string
literal "DEVICEKIT_SIM_..."; "DEVICEKIT_SIM_GPU", read with the device's number after it, stands
for DEVICEKIT_SIM_GPU0 to DEVICEKIT_SIM_GPU<max_devices - 1>), the tests from
`ctest --show-only=json-v1` in the build directory.

  check_environment_pinned.py --ctest CTEST --build BUILD_DIR --src SIM_SRC --passed VAR...
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys


def variables_read(src):
    names = set()
    for path in sorted(src.glob("*.cpp")) + sorted(src.glob("*.hpp")):
        names.update(re.findall(r'"(DEVICEKIT_SIM_[A-Z0-9_]*)"', path.read_text()))
    if "DEVICEKIT_SIM_GPU" in names:
        names.remove("DEVICEKIT_SIM_GPU")
        most = re.search(r"max_devices = (\d+);", (src / "config_parse.hpp").read_text())
        if most is None:
            sys.exit("config_parse.hpp no longer says max_devices = N;: read the device count elsewhere")
        names.update(f"DEVICEKIT_SIM_GPU{i}" for i in range(int(most.group(1))))
    return names


def properties(test):
    return {p["name"]: p["value"] for p in test.get("properties", [])}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ctest", required=True)
    parser.add_argument("--build", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--passed", nargs="*", default=[])
    args = parser.parse_args()
    read = variables_read(pathlib.Path(args.src))
    unknown = set(args.passed) - read
    if unknown or len(read) < 8:
        sys.exit(f"the simulator reads {sorted(read)}; passed through but not read: {sorted(unknown)}")
    wanted = read - set(args.passed)
    shown = subprocess.run([args.ctest, "--show-only=json-v1"], cwd=args.build, capture_output=True, text=True,
                           check=True)
    problems = []
    checked = 0
    for test in json.loads(shown.stdout)["tests"]:
        props = properties(test)
        if "sim" not in props.get("LABELS", []):
            continue
        checked += 1
        own = {entry.split("=", 1)[0] for entry in props.get("ENVIRONMENT", [])}
        unset = set()
        for entry in props.get("ENVIRONMENT_MODIFICATION", []):
            var, _, op = entry.partition("=")
            if op.startswith("unset:"):
                unset.add(var)
        free = sorted(wanted - own - unset)
        if free:
            problems.append(f"{test['name']}: a user's shell still reaches it through {', '.join(free[:6])}"
                            + (f" and {len(free) - 6} more" if len(free) > 6 else ""))
        lost = sorted(own & unset)
        if lost:
            problems.append(f"{test['name']}: unsets what it sets itself: {', '.join(lost)}")
    if checked == 0:
        sys.exit("no test labelled 'sim' in " + args.build)
    if problems:
        print("simulator tests whose environment is not pinned (tests/CMakeLists.txt, "
              "DEVICEKIT_SIM_PINNED_VARIABLES):")
        print("\n".join("  " + p for p in problems))
        return 1
    print(f"{checked} simulator tests fix {len(wanted)} variables; passed through: {' '.join(args.passed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
