#!/bin/bash
# ctest doc_paths: every file that README.md, docs/*.md and examples/README.md cite exists, so that a
# renamed or deleted file cannot stay cited. A citation is a path or file name ending in .h, .hpp, .cpp,
# .sh, .py or .cmake (with a folder: also .md): `src/train/fit.cpp`, `lockstep/train/trainer.h`,
# `bucket.h`. It resolves when a file git tracks is that path or ends with it (so `train/trainer.h` finds
# include/lockstep/train/trainer.h, and a bare `bucket.h` any bucket.h). Markdown links to files
# ([text](sharding.md)) resolve relative to the document. Not checked: names with an upper-case
# placeholder folder or prefix (`RUN_DIR/report.h`, `PATH.step-S.sh`), paths outside the repository
# (`../shared/...`, `.device-carry/...`), and the files listed in `external` below.
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
# Files that are not the repository's (a regex on the whole citation): other projects' (LibTorch, gloo,
# NCCL, MPI, Accelerate), the installed tree's (share/lockstep/...), and the seed's own training script
# (src/train_accelerate.py, run unchanged under `lockstep launch`).
external='^(ATen/.*|c10/.*|c10d/.*|torch/.*|gloo/.*|nccl\.h|mpi\.h|TorchConfig\.cmake|ProcessGroup[A-Za-z]*\.hpp?|reducer\.hpp|accelerate/.*|elastic/.*|share/lockstep/.*|src/train_accelerate\.py)$'
tracked=$(git ls-files)
status=0
checked=0
for doc in README.md docs/*.md examples/README.md; do
  # Citations: runs of path characters ending in a checked extension, not inside a URL.
  while IFS= read -r cite; do
    path=${cite#./}
    [[ "$path" =~ $external ]] && continue
    # Placeholders: a folder or prefix in capitals (RUN_DIR/, PATH.), the shared/ workspace beside the repo.
    [[ "$path" =~ (^|/)[A-Z][A-Z0-9_]*[./] ]] && continue
    [[ "$path" == ../* ]] && continue
    checked=$((checked + 1))
    if [ -e "$path" ] || grep -qxF "$path" <<<"$tracked" || grep -qE "(^|/)${path//./\\.}$" <<<"$tracked"; then
      continue
    fi
    echo "doc_paths: $doc cites $cite, which is not in the repository" >&2
    status=1
  done < <(grep -v 'https\?://' "$doc" | grep -oE '[A-Za-z0-9_./-]*[A-Za-z0-9_]\.(hpp|h|cpp|sh|py|cmake)\b|[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]*\.md\b' |
    grep -vE '^\.[a-z]' | sort -u)
  # Markdown links to files, relative to the document: [text](sharding.md), [x](../examples/trainer.cpp).
  while IFS= read -r link; do
    checked=$((checked + 1))
    [ -e "$(dirname "$doc")/$link" ] && continue
    echo "doc_paths: $doc links to $link, which is not in the repository" >&2
    status=1
  done < <(grep -oE '\]\([^)#[:space:]]+' "$doc" | sed 's/^](//' | grep -vE '^[a-z]+:' | grep -E '[./]' | sort -u)
done
[ "$status" = 0 ] && echo "doc_paths: the $checked file citations of README.md, docs/*.md and examples/README.md all exist"
exit "$status"
