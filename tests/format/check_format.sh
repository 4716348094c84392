#!/usr/bin/env bash
# Every C++/CUDA source in the repository is formatted as .clang-format says (120 columns).
# The layout is clang-format 14's (Debian 12's, what CI installs): other versions lay out some
# constructs differently, so with another version, or none, the check is skipped (exit 77), never
# passed. To fix a failure: clang-format -i <file> (version 14), or scripts/format.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
fmt=${CLANG_FORMAT:-}
if [ -z "$fmt" ]; then
  for c in clang-format-14 clang-format; do
    if command -v "$c" >/dev/null 2>&1; then fmt=$c; break; fi
  done
fi
if [ -z "$fmt" ]; then echo "format check skipped: no clang-format"; exit 77; fi
major=$("$fmt" --version | sed -nE 's/.*version ([0-9]+)\..*/\1/p')
if [ "$major" != 14 ]; then echo "format check skipped: $fmt is version $major, the layout is version 14's"; exit 77; fi
cd "$root" || exit 1
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # third_party/ is other projects' code, as they wrote it.
  mapfile -t files < <(git ls-files '*.hpp' '*.ipp' '*.cpp' '*.cu' '*.cuh' '*.h' ':!third_party/**')
else
  mapfile -t files < <(find include sim tests examples benchmarks tools \( -name '*.hpp' -o -name '*.ipp' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.h' \) -not -path '*/build*')
fi
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "not formatted as .clang-format says (${#bad[@]} of ${#files[@]} files); run scripts/format, or clang-format-14 -i on:"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "all ${#files[@]} sources formatted"
