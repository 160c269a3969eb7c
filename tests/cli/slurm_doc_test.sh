#!/bin/bash
# docs/slurm.md shows scripts written by `lockstep slurm`; each ```bash block there follows a line
# `<!-- written by: lockstep slurm ARGS... -->`. This test runs each such command with the built CLI and
# fails, showing the difference, when its output is not exactly the block: the page must stay what the
# generator writes (and a block without its command line is an error too).
# Usage: slurm_doc_test.sh LOCKSTEP DOC
set -u
lockstep=$1 doc=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Split the page: $work/cmd_N holds block N's command line, $work/block_N the block itself.
awk -v dir="$work" '
  /^<!-- written by: lockstep slurm .* -->$/ { cmd = $0; sub(/^<!-- written by: lockstep /, "", cmd); sub(/ -->$/, "", cmd); next }
  /^```bash$/ { n++; inside = 1; print (cmd == "" ? "MISSING" : cmd) > (dir "/cmd_" n)
                printf "" > (dir "/block_" n); cmd = ""; next }
  /^```/ { inside = 0; next }
  inside { print > (dir "/block_" n) }
' "$doc"
blocks=$(ls "$work" | grep -c '^cmd_')
if [ "$blocks" -eq 0 ]; then
  echo "slurm_doc_test: no \`\`\`bash block in $doc" >&2
  exit 1
fi
status=0
for ((n = 1; n <= blocks; n++)); do
  cmd=$(cat "$work/cmd_$n")
  if [ "$cmd" = MISSING ]; then
    echo "slurm_doc_test: bash block $n of $doc has no '<!-- written by: lockstep slurm ... -->' line before it" >&2
    status=1
    continue
  fi
  # Split at whitespace only (no quotes, globs or variables): the page's command lines use none.
  read -r -a args <<<"$cmd"
  if ! "$lockstep" "${args[@]}" >"$work/out_$n" 2>"$work/err_$n"; then
    echo "slurm_doc_test: block $n: lockstep $cmd failed:" >&2
    cat "$work/err_$n" >&2
    status=1
  elif ! diff -u "$work/block_$n" "$work/out_$n" >&2; then
    echo "slurm_doc_test: block $n of $doc differs from what \`lockstep $cmd\` writes (diff above: - page, + generator); paste the generator's output into the page" >&2
    status=1
  else
    echo "slurm_doc_test: block $n matches lockstep $cmd"
  fi
done
exit $status
