#!/bin/sh
# Two `lockstep run` launchers on this host act as two nodes (--nnodes 2 --node-rank 0|1) sharing one
# master address and port; their 4 workers must form one job (ranks 0-3, world size 4).
set -u
export LOCKSTEP_JOB_SECRET=e2e-secret-of-the-emulated-nodes-0123  # a job that spans nodes needs one (issue 42)
lockstep=$1
worker=$2
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
pid0=""
pid1=""
# On any exit (including ctest killing us), stop both launchers; they stop their workers.
trap 'for p in $pid0 $pid1; do kill "$p" 2>/dev/null; done; rm -rf "$dir"' EXIT
for node in 0 1; do
  "$lockstep" run --nnodes 2 --node-rank $node --nproc-per-node 2 --master-addr 127.0.0.1 \
    --master-port "$port" --rdzv-id two-nodes-test -- "$worker" >"$dir/node$node.log" 2>&1 &
  eval "pid$node=\$!"
done
# Bounded wait: both launchers must finish within 90 s.
deadline=$(( $(date +%s) + 90 ))
while kill -0 "$pid0" 2>/dev/null || kill -0 "$pid1" 2>/dev/null; do
  if [ "$(date +%s)" -ge $deadline ]; then
    echo "two_nodes: launchers still running after 90 s" >&2
    cat "$dir/node0.log" "$dir/node1.log"
    exit 1
  fi
  sleep 0.1
done
status=0
wait "$pid0" || status=1
wait "$pid1" || status=1
cat "$dir/node0.log" "$dir/node1.log"
[ $status -eq 0 ] || { echo "two_nodes: a launcher failed" >&2; exit 1; }
for r in 0 1 2 3; do
  grep -q "rank $r/4 ok (run two-nodes-test, backend hier)" "$dir"/node*.log || { echo "two_nodes: rank $r missing" >&2; exit 1; }
done
echo "two_nodes: ok"
