#!/usr/bin/env python3
"""The layout check finds what it is there to find: a small tree with one include that climbs a
layer, one file over the limit, one history reference, one forwarding header and two headers outside
detail/ that declare only detail code (one per way of writing the namespace), checked by
check_layout.py, must give exactly these six problems. A header that declares public names beside
its detail code, and a detail-only header under detail/, pass.

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
        # Only detail code, in both spellings of the namespace; the public-looking words sit in a
        # comment, a macro and a string, which do not count.
        write(root, "include/devicekit/memory/slab.hpp",
              "#pragma once\n// namespace devicekit { struct slab; }\n#include <cstddef>\n"
              "#define DEVICEKIT_SLAB_BYTES 4096\nnamespace devicekit::detail {\n"
              "inline const char* slab_name = \"} struct slab {\";\nstruct slab_cache { int n = 1'000; };\n}\n")
        write(root, "include/devicekit/tree/walk_helpers.hpp",
              "#pragma once\nnamespace devicekit {\nnamespace detail {\n"
              "template <class T> void walk_leaf(T&) {}\n}\n}\n")
        # Passes: a public name beside the detail code, and detail code under detail/.
        write(root, "include/devicekit/tree/leaf.hpp",
              "#pragma once\nnamespace devicekit {\nnamespace detail {\nint leaf_count();\n}\nstruct leaf {};\n}\n")
        write(root, "include/devicekit/tree/detail/check.hpp",
              "#pragma once\nnamespace devicekit::detail {\nint check();\n}\n")
        # A comment that cites a ticket instead of saying what it guards (spelled in parts here, so
        # that this file itself cites nothing).
        write(root, "tests/test_x.cpp", "// Guards the fix for " + "issue" + " 7.\n")
        result = subprocess.run([sys.executable, str(HERE / "check_layout.py"), str(root)], capture_output=True,
                                text=True)
        out = result.stdout
        expected = ["tree/walk.hpp:2: tree/ includes place/", "memory/pool.hpp: 522 lines, over 520",
                    "tests/test_x.cpp:1: names project history", "tree/algorithms.hpp: only forwards",
                    "memory/slab.hpp: declares nothing outside namespace detail",
                    "tree/walk_helpers.hpp: declares nothing outside namespace detail"]
        missing = [e for e in expected if e not in out]
        if result.returncode != 1 or missing or "layout: 6 problem(s)" not in out:
            print(out)
            print(f"check_layout.py exit {result.returncode}; missing: {missing}")
            return 1
    print("check_layout.py finds a climbing include, a long file, a history reference, a forwarder and detail-only "
          "headers outside detail/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
