#!/bin/bash
# The format check of CI (ctest: format_check): every C++ file git tracks is as clang-format 14 (Debian
# 12's, scripts/install-deps.sh) formats it with .clang-format. Other versions format differently, so
# they are refused rather than trusted. Fix a failure with:
#   git ls-files '*.cpp' '*.h' | xargs clang-format-14 -i
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
tool=""
for candidate in clang-format-14 clang-format; do
  if command -v "$candidate" >/dev/null && "$candidate" --version | grep -q "version 14\."; then
    tool=$candidate
    break
  fi
done
if [ -z "$tool" ]; then
  echo "check-format: clang-format 14 not found (install Debian's clang-format: scripts/install-deps.sh)" >&2
  exit 1
fi
files=$(git ls-files '*.cpp' '*.h')
[ -n "$files" ] || { echo "check-format: no C++ files found under $PWD (not a git checkout?)" >&2; exit 1; }
# shellcheck disable=SC2086
if ! "$tool" --dry-run -Werror $files; then
  echo "check-format: the files above are not formatted; run: git ls-files '*.cpp' '*.h' | xargs $tool -i" >&2
  exit 1
fi
echo "check-format: $(echo "$files" | wc -l) files formatted as $tool formats them"
