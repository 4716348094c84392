#!/usr/bin/env python3
"""The include-cycle check finds what it is there to find: in a small tree with a two-header cycle,
a three-header cycle through an .ipp, a header with its own .ipp (which includes the header back)
and a chain without a cycle, check_include_cycles.py must report exactly the two cycles.

  check_include_cycles_catches.py
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
        # Two headers that include each other, one of them at its bottom.
        write(root, "devicekit/core/error.hpp", "#pragma once\nclass error {};\n#include <devicekit/core/device.hpp>\n")
        write(root, "devicekit/core/device.hpp", "#pragma once\n#include <devicekit/core/error.hpp>\n")
        # Three headers around, closed by one's definitions.
        write(root, "devicekit/memory/a.hpp", "#pragma once\n#include <devicekit/memory/b.hpp>\n"
              "#include <devicekit/memory/a.ipp>\n")
        write(root, "devicekit/memory/a.ipp", "#pragma once\n#include <devicekit/memory/a.hpp>\n")
        write(root, "devicekit/memory/b.hpp", "#pragma once\n#include \"devicekit/memory/c.hpp\"\n")
        write(root, "devicekit/memory/c.hpp", "#pragma once\n#include <devicekit/memory/a.hpp>\n")
        # Not cycles: a header and its own definitions, and a chain down to core.
        write(root, "devicekit/tree/leaf.hpp", "#pragma once\n#include <devicekit/core/error.hpp>\n"
              "#include <devicekit/tree/leaf.ipp>\n")
        write(root, "devicekit/tree/leaf.ipp", "#pragma once\n#include <devicekit/tree/leaf.hpp>\n")
        write(root, "devicekit/tree.hpp", "#pragma once\n#include <devicekit/tree/leaf.hpp>\n")
        result = subprocess.run([sys.executable, str(HERE / "check_include_cycles.py"), str(root)],
                                capture_output=True, text=True)
        out = result.stdout
        expected = ["include cycle: devicekit/core/device.hpp -> devicekit/core/error.hpp -> devicekit/core/device.hpp",
                    "include cycle: devicekit/memory/a.hpp -> devicekit/memory/b.hpp -> devicekit/memory/c.hpp -> "
                    "devicekit/memory/a.hpp"]
        missing = [e for e in expected if e not in out]
        if result.returncode != 1 or missing or "include cycles: 2 in" not in out or "leaf" in out:
            print(out + result.stderr)
            print(f"check_include_cycles.py exit {result.returncode}; missing: {missing}")
            return 1
    print("check_include_cycles.py finds a two-header and a three-header cycle, and passes a header's own .ipp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
