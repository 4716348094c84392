#!/usr/bin/env python3
"""Holds docs/environment.md's table of environment variables to the code.

  check_environment_table.py ROOT PROBE

1. Coverage. Scans include/, tools/ and src/ for the environment variables the library reads: a
   name passed as a literal to getenv or getenv_string; a literal "DEVICEKIT_..." that is a whole
   name; in a file that passes getenv a name it computed, each all-caps literal of that file and
   of its header (the tables of launcher variables); in a file that walks `environ`, a prefix it
   matches ("CUDA_" makes `CUDA_*`). Each must be a row of the table (the first table of the
   page), and each row must be read somewhere.
2. Each row, through PROBE (devicekit_env_probe, tests/environment/probe.cpp), which reads one
   variable as the library does and prints "value: ...", "config_error: ..." or "error: ...",
   run in a process of its own with every variable of the table unset but the one tried:
   - the default: unset, it reads the default column's first value in code font (or "none");
   - every value in code font in the accepted-values column is read without an error;
   - the error column: where it starts with "none", an odd value is read without an error;
     otherwise its first code span is the exception (`config_error`), its second the bad value,
     and the message contains the first quoted text ("..." stands for any text). In a row of
     several variables the quoted text names the first; it is checked with the one tried.
Prints each failure and exits 1 if there is any.
"""
import os
import pathlib
import re
import subprocess
import sys

# The launchers' world rank and size come in pairs (process_context::from_environment reads a pair
# only when both are set); a variable of a pair is tried with its partner at this value.
PAIRS = [("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
         ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"), ("RANK", "WORLD_SIZE")]
PARTNER_VALUE = {"rank": "0", "size": "4"}  # a rank is tried with its size at 4, a size with its rank at 0
# Defaults that depend on the machine, as the default column says them in words.
COMPUTED_DEFAULTS = {
    # "half the CPUs the process may run on, at least 1 and at most 8"
    "DEVICEKIT_COPY_THREADS": lambda: str(min(8, max(1, len(os.sched_getaffinity(0)) // 2))),
}
# For a wildcard row (`CUDA_*`), the variable a probe sets.
WILDCARD_SAMPLE = {"CUDA_*": "CUDA_DEVICE_ORDER"}
ODD_VALUE = "odd value, 42"

CODE = re.compile(r"`([^`]*)`")
QUOTED = re.compile(r'"([^"]*)"')


def split_row(line):
    cells = line.strip().strip("|").split(" | ")
    return [c.strip() for c in cells]


def read_table(page):
    """The first table after the page title whose header starts with 'variable': its rows."""
    rows, in_table = [], False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith("| variable |"):
            in_table = True
            continue
        if in_table and line.startswith("|---"):
            continue
        if in_table and line.startswith("|"):
            rows.append((number, split_row(line)))
        elif in_table:
            break
    return rows


def without_comments(text):
    """C++ `text` without its // comments (a // inside a string literal stays)."""
    out = []
    for line in text.splitlines():
        at = line.find("//")
        while at >= 0 and line[:at].count('"') % 2 == 1:
            at = line.find("//", at + 2)
        out.append(line if at < 0 else line[:at])
    return "\n".join(out)


def scan_sources(root):
    """Every environment variable read under include/, tools/ and src/, with where it is read."""
    found = {}
    literal = re.compile(r'"([^"\\]*)"')
    getenv_literal = re.compile(r'getenv(?:_string)?\(\s*"([A-Za-z_][A-Za-z0-9_]*)"')
    getenv_computed = re.compile(r'getenv(?:_string)?\(\s*[^")\s]')
    caps = re.compile(r"^[A-Z][A-Z0-9_]{2,}$")
    files = [p for folder in ("include", "tools", "src") for p in sorted((root / folder).rglob("*"))
             if p.is_file() and p.suffix in {".hpp", ".ipp", ".cpp", ".cuh", ".h"}]
    for path in files:
        text = path.read_text()
        rel = str(path.relative_to(root))
        code = without_comments(text)
        for name in getenv_literal.findall(code):
            found.setdefault(name, rel)
        for name in literal.findall(code):
            if re.fullmatch(r"DEVICEKIT_[A-Z0-9_]+", name):
                found.setdefault(name, rel)
        if getenv_computed.search(code):
            sources = [code]
            header = path.with_suffix(".hpp")
            if path.suffix == ".ipp" and header.exists():
                sources.append(without_comments(header.read_text()))
            for source in sources:
                for name in literal.findall(source):
                    if caps.match(name):
                        found.setdefault(name, rel)
        if re.search(r"\benviron\b", code):
            for prefix in re.findall(r'starts_with\("([A-Z][A-Z0-9_]*_)"\)', code):
                found.setdefault(prefix + "*", rel)
    return found


def run_probe(probe, variable, settings):
    """The probe's answer for `variable` with only `settings` of the table's variables set."""
    env = {k: v for k, v in os.environ.items() if not (k in ALL_VARIABLES or k.startswith("CUDA_"))}
    env.update(settings)
    out = subprocess.run([probe, variable], env=env, capture_output=True, text=True, timeout=60)
    line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    return out.returncode, line, out.stderr.strip()


def gist_matches(gist, message):
    pos = 0
    for piece in (p.strip() for p in gist.split("...")):
        if not piece:
            continue
        at = message.find(piece, pos)
        if at < 0:
            return False
        pos = at + len(piece)
    return True


def pair_of(variable):
    for rank, size in PAIRS:
        if variable in (rank, size):
            return rank, size
    return None


def settings_for(variable, value):
    """The variables to set to try `value` for `variable` (its partner too, for a rank or size)."""
    if variable in WILDCARD_SAMPLE:
        if "=" in value:
            name, _, val = value.partition("=")
            return {name: val}
        return {WILDCARD_SAMPLE[variable]: value}
    pair = pair_of(variable)
    if pair is None:
        return {variable: value}
    rank, size = pair
    return {rank: value, size: PARTNER_VALUE["size"]} if variable == rank else {rank: PARTNER_VALUE["rank"],
                                                                                size: value}


def rename(text, first, variable):
    """`text`, which names `first` (a row's first variable), as it reads for `variable`."""
    pairs = [(first, variable)]
    if pair_of(first) and pair_of(variable):
        pairs = list(zip(pair_of(first), pair_of(variable)))
    for old, new in pairs:
        text = re.sub(r"\b%s\b" % re.escape(old), new, text)
    return text


def check_row(probe, number, cells, problems):
    if len(cells) != 5:
        problems.append(f"docs/environment.md:{number}: {len(cells)} columns, not 5 (variable, accepted values, "
                        f"default, error for a bad value, where it is read)")
        return
    variables = CODE.findall(cells[0])
    accepted = CODE.findall(cells[1])
    default_cell, error_cell = cells[2], cells[3]
    for variable in variables:
        where = f"docs/environment.md:{number}: {variable}"
        # The default.
        if variable in COMPUTED_DEFAULTS:
            want = COMPUTED_DEFAULTS[variable]()
        elif default_cell.lower().startswith("none"):
            want = "none"
        elif CODE.search(default_cell):
            want = CODE.search(default_cell).group(1)
        else:
            problems.append(f"{where}: the default column gives no value in code font and does not start with 'none'")
            continue
        rc, line, err = run_probe(probe, variable, {})
        if rc == 3:
            problems.append(f"{where}: devicekit_env_probe has no reader for it ({err}); add one to probe.cpp")
            continue
        if line != f"value: {want}":
            problems.append(f"{where}: unset, it reads '{line}', the table says the default is '{want}'")
        # The accepted values.
        for value in accepted:
            rc, line, err = run_probe(probe, variable, settings_for(variable, value))
            if rc != 0:
                problems.append(f"{where}={value}: documented as accepted, but: {line or err}")
            elif variable in WILDCARD_SAMPLE and "=" in value and value not in line:
                problems.append(f"{where}: {value} is not what was recorded: '{line}'")
        # The error.
        if error_cell.lower().startswith("none"):
            rc, line, err = run_probe(probe, variable, settings_for(variable, ODD_VALUE))
            if rc != 0:
                problems.append(f"{where}='{ODD_VALUE}': the table says no error, but: {line or err}")
            continue
        spans = CODE.findall(error_cell)
        quoted = QUOTED.search(error_cell)
        if len(spans) < 2 or not quoted:
            problems.append(f"{where}: the error column needs the exception and the bad value in code font, and "
                            f"the message's gist in double quotes")
            continue
        kind, bad = spans[0], spans[1]
        gist = rename(quoted.group(1), variables[0], variable)
        rc, line, err = run_probe(probe, variable, settings_for(variable, bad))
        if not line.startswith(f"{kind}: "):
            problems.append(f"{where}={bad}: the table says {kind}, the reader gave '{line or err}'")
        elif not gist_matches(gist, line[len(kind) + 2:]):
            problems.append(f"{where}={bad}: the message '{line[len(kind) + 2:]}' does not say \"{gist}\"")


ALL_VARIABLES = set()


def main():
    if len(sys.argv) != 3:
        print("usage: check_environment_table.py ROOT PROBE", file=sys.stderr)
        return 2
    root, probe = pathlib.Path(sys.argv[1]).resolve(), sys.argv[2]
    rows = read_table(root / "docs" / "environment.md")
    problems = []
    documented = {}
    for number, cells in rows:
        for variable in CODE.findall(cells[0]):
            documented[variable] = number
    ALL_VARIABLES.update(v for v in documented if "*" not in v)
    for pair in PAIRS:
        ALL_VARIABLES.update(pair)
    read = scan_sources(root)
    for variable, where in sorted(read.items()):
        if variable not in documented:
            problems.append(f"{where}: reads {variable}, which docs/environment.md's table does not list")
    for variable, number in sorted(documented.items()):
        if variable not in read:
            problems.append(f"docs/environment.md:{number}: {variable} is listed, but nothing under include/, "
                            f"tools/ or src/ reads it")
    for number, cells in rows:
        check_row(probe, number, cells, problems)
    for problem in problems:
        print(problem)
    print(f"environment table: {len(documented)} variables in {len(rows)} rows, {len(read)} read by the code, "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
