#!/bin/bash
# ctest umbrella_header_complete: include/lockstep/lockstep.h includes every public header, so that a new
# header (a new layer's folder too) cannot be forgotten there. Left out on purpose: lockstep/detail/ and
# lockstep/launch/detail/ (internals) and comm/process_group_mpi.h (MPI-only builds); see lockstep.h.
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}/include"
missing=0
while IFS= read -r header; do
  case "$header" in
    lockstep/lockstep.h | lockstep/detail/* | */detail/* | lockstep/comm/process_group_mpi.h) continue ;;
  esac
  if ! grep -qF "#include \"$header\"" lockstep/lockstep.h; then
    echo "umbrella: include/lockstep/lockstep.h does not include $header" >&2
    missing=1
  fi
done < <(find lockstep -name '*.h' | sort)
[ "$missing" = 0 ] && echo "umbrella: include/lockstep/lockstep.h includes every public header"
exit "$missing"
