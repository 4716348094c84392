#!/usr/bin/env python3
"""No header of the library includes, directly or through others, a header that includes it back.

  check_include_cycles.py INCLUDE_DIR

Follows every `#include <devicekit/...>` (or "devicekit/...") in the .hpp, .ipp, .cuh and .h files
under INCLUDE_DIR/devicekit. A header's .ipp (its definitions, which it includes at its end) counts
as part of it: the .ipp's includes are the header's, and the header and its own .ipp do not form a
cycle. A cycle is what makes the order of two includes matter (a header that includes another at
its bottom, so that the second finds the first's declarations): the one that comes first sees the
other half-read. Prints every cycle as a chain of headers, and exits 1 if there is any.
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](devicekit/[^>"]+)[>"]')
SUFFIXES = {".hpp", ".ipp", ".cuh", ".h"}


def node(name):
    """The header a file belongs to: x.ipp is part of x.hpp."""
    return name[: -len(".ipp")] + ".hpp" if name.endswith(".ipp") else name


def include_graph(include_dir):
    graph = {}
    base = include_dir / "devicekit"
    for path in sorted(base.rglob("*")):
        if not path.is_file() or path.suffix not in SUFFIXES:
            continue
        name = node(str(path.relative_to(include_dir)))
        edges = graph.setdefault(name, [])
        for line in path.read_text().splitlines():
            match = INCLUDE.match(line)
            if match:
                target = node(match.group(1))
                if target != name and target not in edges:
                    edges.append(target)
    return graph


def find_cycles(graph):
    """Every cycle met by a depth-first search, each as a list of headers from its first back to it,
    rotated to start at its smallest name so that one cycle is reported once."""
    cycles = []
    seen = set()
    state = {}  # absent: not visited; 1: on the current path; 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path = [start]
        stack = [iter(graph.get(start, []))]
        state[start] = 1
        while stack:
            target = next(stack[-1], None)
            if target is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if target not in graph:
                continue  # a header outside the tree (a generated one): no edges to follow
            if state.get(target) == 1:
                cycle = path[path.index(target):]
                low = cycle.index(min(cycle))
                cycle = cycle[low:] + cycle[:low]
                if tuple(cycle) not in seen:
                    seen.add(tuple(cycle))
                    cycles.append(cycle + [cycle[0]])
            elif target not in state:
                state[target] = 1
                path.append(target)
                stack.append(iter(graph.get(target, [])))
    return cycles


def main():
    if len(sys.argv) != 2:
        print("usage: check_include_cycles.py INCLUDE_DIR", file=sys.stderr)
        return 2
    include_dir = pathlib.Path(sys.argv[1]).resolve()
    if not (include_dir / "devicekit").is_dir():
        print(f"{include_dir} has no devicekit/ folder", file=sys.stderr)
        return 2
    graph = include_graph(include_dir)
    cycles = find_cycles(graph)
    for cycle in cycles:
        print("include cycle: " + " -> ".join(cycle) + "; move what the first needs into a header both include")
    print(f"include cycles: {len(cycles)} in {len(graph)} headers")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
