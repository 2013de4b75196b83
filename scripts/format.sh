#!/usr/bin/env bash
# The tree's C, CUDA and header files laid out as .clang-format says.
#   scripts/format.sh           rewrite the files that differ
#   scripts/format.sh --check   name each file that differs and exit 1
# The layout is clang-format 14's (Debian 12); another major version lays
# some lines out differently, so --check skips (exit 77) under one.
set -euo pipefail
cd "$(dirname "$0")/.."

tool=${CLANG_FORMAT:-clang-format}
if ! command -v "$tool" >/dev/null; then
  echo "format: $tool not found (scripts/setup.sh installs clang-format)" >&2
  exit 77
fi
major=$("$tool" --version | sed -nE 's/.*version ([0-9]+).*/\1/p')
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' | grep -v '^tests/data/')

if [[ "${1:-}" != "--check" ]]; then
  "$tool" -i "${files[@]}"
  exit 0
fi
if [[ "$major" != 14 ]]; then
  echo "format: $tool is version $major; the layout is clang-format 14's, skipping" >&2
  exit 77
fi
bad=0
for f in "${files[@]}"; do
  if ! "$tool" "$f" | cmp -s "$f" -; then
    echo "format: $f differs from .clang-format's layout (scripts/format.sh rewrites it)" >&2
    bad=1
  fi
done
exit "$bad"
