#!/usr/bin/env python3
"""The layout check finds what it is there to find: a small tree with one include that climbs a
layer, one file over the limit, one history reference and one forwarding header, checked by
check_layout.py, must give exactly these four problems.

  check_layout_catches.py
"""
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent


def write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        write(root, "CMakeLists.txt", "project(x)\n")
        write(root, "include/devicekit/tree/walk.hpp", "#pragma once\n#include <devicekit/place/place.hpp>\n")
        write(root, "include/devicekit/tree/algorithms.hpp",
              "#pragma once\n// Moved to compute/; kept so existing includes work.\n#include <devicekit/compute.hpp>\n")
        write(root, "include/devicekit/place/place.hpp", "#pragma once\n#include <devicekit/tree/walk.hpp>\n")
        write(root, "include/devicekit/memory/pool.hpp", "#pragma once\n" + "int x;\n" * 521)
        # A comment that cites a ticket instead of saying what it guards (spelled in parts here, so
        # that this file itself cites nothing).
        write(root, "tests/test_x.cpp", "// Guards the fix for " + "issue" + " 7.\n")
        result = subprocess.run([sys.executable, str(HERE / "check_layout.py"), str(root)], capture_output=True,
                                text=True)
        out = result.stdout
        expected = ["tree/walk.hpp:2: tree/ includes place/", "memory/pool.hpp: 522 lines, over 520",
                    "tests/test_x.cpp:1: names project history", "tree/algorithms.hpp: only forwards"]
        missing = [e for e in expected if e not in out]
        if result.returncode != 1 or missing or "layout: 4 problem(s)" not in out:
            print(out)
            print(f"check_layout.py exit {result.returncode}; missing: {missing}")
            return 1
    print("check_layout.py finds a climbing include, a long file, a history reference and a forwarder")
    return 0


if __name__ == "__main__":
    sys.exit(main())
