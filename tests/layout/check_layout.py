#!/usr/bin/env python3
"""Checks the shape of the source tree: includes go down the layers, files stay short, and the code
says what it guards rather than where it came from.

  check_layout.py ROOT

1. Layers. include/devicekit/<layer>/ may include only its own layer and the layers below it, in
   the order of docs/layout.md's layer table. No header in a layer is a forwarder (nothing but
   includes, saying it moved): every public path is the header that holds the code, so a user and
   the docs name one path for it.
2. Size. No file under include/ or sim/ is longer than 520 lines; the manager's facade
   (manager.hpp and manager/device_manager.hpp) no longer than 400.
3. No history. Code, tests, examples, tools and scripts name no issue or finding numbers and no
   origin documents: a comment says what the code guards, which stays true when the history is
   forgotten.
4. Detail headers. A header under include/devicekit/ outside any detail/ folder declares something
   outside `detail` namespaces: one that holds only detail code (`namespace devicekit::detail`,
   `namespace devicekit { namespace detail`, ...) lives under its folder's detail/, so that every
   path outside detail/ is one a user may include and the docs list. Comments, preprocessor lines
   and includes do not count; a header that declares nothing (an umbrella) passes. The `.ipp` files
   go where their header goes. DETAIL_ONLY_PUBLIC lists the exceptions, each with its reason.

Prints every violation with file and line, and exits 1 if there is any.
"""
import pathlib
import re
import sys

# Bottom to top. Layers on one rank do not include each other (detect and tree are independent).
LAYER_RANK = {
    "core": 0,
    "detect": 1,
    "tree": 1,
    "memory": 2,
    "transfer": 3,
    "place": 4,
    "compute": 5,
    "distribute": 6,
    "report": 7,
    "manager": 8,
}
MAX_LINES = 520
MAX_LINES_BY_PATH = {"include/devicekit/manager.hpp": 400, "include/devicekit/manager/device_manager.hpp": 400}
SOURCE_SUFFIXES = {".hpp", ".ipp", ".cuh", ".h", ".cpp", ".cu", ".cmake", ".py", ".sh", ".txt", ".in"}
HISTORY = [
    re.compile(r"\b(issue|finding)s?\s*#?\d+", re.IGNORECASE),
    re.compile(r"\bissue\s+\"", re.IGNORECASE),
    re.compile(r"\bseed (table|document)s?\b", re.IGNORECASE),
    re.compile(r"\b(placement|hardware|memory|daena) seeds?\b", re.IGNORECASE),
]
INCLUDE = re.compile(r"^\s*#\s*include\s*<devicekit/([a-z_]+)/")
# Headers that hold only detail code but are a path users include on purpose.
DETAIL_ONLY_PUBLIC = {
    # A .cu file includes it to turn on compute's kernels: its overloads outrank the fallbacks of
    # compute/detail/dispatch.hpp wherever they are visible, so what it declares needs no public name.
    "include/devicekit/compute/kernels.cuh",
}
# C++ as far as the detail-header rule needs it: comments, literals (digit separators included) and
# preprocessor lines are single tokens, so that braces and words inside them are not read as code.
CPP_TOKEN = re.compile(
    r"""(?P<skip>//[^\n]*|/\*.*?\*/|\#(?:\\\n|[^\n])*)
      |(?P<literal>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|\.?\d(?:[eEpP][+-]|[\w.'])*)
      |(?P<code>[A-Za-z_]\w*|::|\S)""", re.DOTALL | re.VERBOSE)


def is_forwarding_header(lines):
    """True when the file holds only #pragma once, includes and comments, and says it moved."""
    if not any("moved to" in line.lower() for line in lines if line.lstrip().startswith(("//", "/*", "*"))):
        return False
    in_block = False
    for raw in lines:
        line = raw.strip()
        if in_block:
            in_block = "*/" not in line
            continue
        if not line or line.startswith("//") or line == "#pragma once" or line.startswith("#include"):
            continue
        if line.startswith("/*"):
            in_block = "*/" not in line
            continue
        return False
    return True


def check_layers(root, problems):
    base = root / "include" / "devicekit"
    for path in sorted(base.rglob("*")):
        if not path.is_file() or path.suffix not in {".hpp", ".ipp", ".cuh", ".h"}:
            continue
        rel = path.relative_to(base)
        if len(rel.parts) < 2 or rel.parts[0] not in LAYER_RANK:
            continue  # umbrellas and the top-level public headers
        layer = rel.parts[0]
        lines = path.read_text().splitlines()
        if is_forwarding_header(lines):
            problems.append(f"{path.relative_to(root)}: only forwards to another header; include that header where "
                            f"this one is included, and remove this one")
            continue
        for number, line in enumerate(lines, 1):
            match = INCLUDE.match(line)
            if not match or match.group(1) == layer:
                continue
            target = match.group(1)
            if target not in LAYER_RANK:
                continue
            if LAYER_RANK[target] >= LAYER_RANK[layer]:
                problems.append(f"{path.relative_to(root)}:{number}: {layer}/ includes {target}/, a layer above or "
                                f"beside it; move the code it needs down, or this code up")


def declares_only_detail(text):
    """True when the code declares something and all of it sits in a namespace named detail (at any
    depth: devicekit::detail, devicekit::cuda_sim::detail, ...). Reads only the namespace scopes: a
    word there, other than `namespace ... {`, `}` and `;`, belongs to a declaration of the innermost
    namespace (a linkage block, `extern "C" {`, counts as the namespace around it)."""
    tokens = [m.group() for m in CPP_TOKEN.finditer(text) if m.lastgroup != "skip"]
    scopes = []  # per open brace: True/False for a namespace inside/outside detail, None for any other
    declares = False
    i = 0
    while i < len(tokens):
        token = tokens[i]
        in_namespace_scope = None not in scopes
        if token == "{":
            scopes.append(None)
        elif token == "}":
            if scopes:
                scopes.pop()
        elif in_namespace_scope and token != ";":
            opening = i + 1 if token == "inline" and tokens[i + 1:i + 2] == ["namespace"] else i
            end = opening + 1
            while end < len(tokens) and tokens[end] not in ("{", ";", "="):
                end += 1
            names = tokens[opening + 1:end]
            in_detail = any(scopes)
            if tokens[opening] == "namespace" and tokens[end:end + 1] == ["{"]:
                scopes.append(in_detail or "detail" in names)
                i = end + 1
                continue
            if token == "extern" and tokens[i + 2:i + 3] == ["{"] and tokens[i + 1].startswith('"'):
                scopes.append(in_detail)
                i += 3
                continue
            if not in_detail:
                return False
            declares = True
        i += 1
    return declares


def check_detail_headers(root, problems):
    base = root / "include" / "devicekit"
    for path in sorted(base.rglob("*")):
        if not path.is_file() or path.suffix not in {".hpp", ".cuh", ".h"}:
            continue
        rel = path.relative_to(base)
        if "detail" in rel.parts[:-1] or str(path.relative_to(root)) in DETAIL_ONLY_PUBLIC:
            continue
        if declares_only_detail(path.read_text()):
            problems.append(f"{path.relative_to(root)}: declares nothing outside namespace detail, but its path is "
                            f"public; move it (and its .ipp) under {(path.parent / 'detail').relative_to(root)}/ "
                            f"and include it from there")


def check_sizes(root, problems):
    for folder in ("include", "sim"):
        for path in sorted((root / folder).rglob("*")):
            if not path.is_file() or path.suffix not in SOURCE_SUFFIXES | {".md"}:
                continue
            rel = str(path.relative_to(root))
            limit = MAX_LINES_BY_PATH.get(rel, MAX_LINES)
            count = len(path.read_text().splitlines())
            if count > limit:
                problems.append(f"{rel}: {count} lines, over {limit}; split it where its jobs part")


def check_history(root, problems):
    folders = ("include", "src", "sim", "tests", "examples", "tools", "scripts", "benchmarks", "cmake")
    files = [root / "CMakeLists.txt"]
    for folder in folders:
        for path in sorted((root / folder).rglob("*")):
            if not path.is_file() or "results" in path.relative_to(root).parts:
                continue
            if path.suffix in SOURCE_SUFFIXES or (path.suffix == "" and folder == "scripts") or path.suffix == ".md":
                files.append(path)
    for path in files:
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for pattern in HISTORY:
                if pattern.search(line):
                    problems.append(f"{path.relative_to(root)}:{number}: names project history "
                                    f"('{pattern.search(line).group(0)}'); say what the code guards instead")
                    break


def main():
    if len(sys.argv) != 2:
        print("usage: check_layout.py ROOT", file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1]).resolve()
    problems = []
    check_layers(root, problems)
    check_detail_headers(root, problems)
    check_sizes(root, problems)
    check_history(root, problems)
    for problem in problems:
        print(problem)
    print(f"layout: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
