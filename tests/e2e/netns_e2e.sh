#!/bin/bash
# lockstep across two emulated hosts: scripts/netns-hosts.sh puts each host in its own network namespace,
# joined to the other by a veth pair (10.231.0.1 and 10.231.0.2), so nothing crosses between the hosts but
# what goes over that link. Each host runs its own `lockstep run --nnodes 2 --node-rank N`.
# Usage: netns_e2e.sh CASE LOCKSTEP PYTHON3
#   hier     2 hosts x 2 ranks, the default backend (hier: shm within a host, Gloo between hosts):
#            the same final metrics as `lockstep fit --devices 4` on one host, and the gradients crossed
#            the link (its byte counters grew by at least one gradient per step)
#   gloo     2 hosts x 1 rank, --backend gloo: the same final metrics as `lockstep fit --devices 2
#            --backend gloo`
#   missing  only host 0 starts (2 of 4 ranks): within the rendezvous timeout it fails naming ranks 2 and
#            3 as never arrived, and leaves no process behind
# Exit status 77 (ctest: skipped) with the reason where the machine cannot create namespaces (not root,
# no CAP_NET_ADMIN).
set -u
export LOCKSTEP_JOB_SECRET=e2e-secret-of-the-emulated-nodes-0123  # a job that spans nodes needs one (issue 42)
case_name=$1 lockstep=$(realpath "$2") python=$3
here=$(cd "$(dirname "$0")" && pwd)
hosts="$here/../../scripts/netns-hosts.sh"
export LOCKSTEP_NETNS="lsnt-$case_name"
work=$(mktemp -d /tmp/lockstep-netns-e2e.XXXXXX)
cleanup() {
  "$hosts" stop >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "netns_e2e[$case_name]: $*" >&2
  for f in "$work"/host*.log; do [ -f "$f" ] && { echo "---- $f"; tail -n 30 "$f"; }; done >&2
  exit 1
}
. "$here/e2e_lib.sh"

start_or_skip "netns_e2e[$case_name]" "the emulated hosts" "$hosts" start

# Small and fast: 32 images per rank and step, 1024 training images.
fit_flags=(--data synthetic --synthetic-size 1024 --batch-size 32 --model mlp --progress off --limit-val-batches 2
  --threads 1 --num-workers 0 --max-epochs 2)

# on_host N CMD...: runs CMD on emulated host N.
on_host() {
  local n=$1
  shift
  ip netns exec "${LOCKSTEP_NETNS}$n" "$@"
}

# link_bytes N: bytes host N has sent over the link.
link_bytes() { on_host "$1" cat "/sys/class/net/ls$1/statistics/tx_bytes"; }

# node N NPROC FLAGS...: host N's launcher of the 2-host job, in the background (output in host$N.log).
node() {
  local n=$1 nproc=$2
  shift 2
  on_host "$n" timeout 120 "$lockstep" run --nnodes 2 --node-rank "$n" --nproc-per-node "$nproc" \
    --master-addr 10.231.0.1 --master-port 29500 --rdzv-id "netns-$case_name" -- \
    "$lockstep" fit "${fit_flags[@]}" "$@" >"$work/host$n.log" 2>&1 &
}

# reference WORLD FLAGS...: `lockstep fit --devices WORLD` on one host (outside the namespaces).
reference() {
  local world=$1
  shift
  "$lockstep" fit --devices "$world" "${fit_flags[@]}" "$@" --metrics-file "$work/ref.jsonl" >"$work/ref.out" 2>&1 ||
    { cat "$work/ref.out"; fail "the reference run failed"; }
}

# two_hosts NPROC FLAGS...: the 2-host job; both launchers must exit 0.
two_hosts() {
  local nproc=$1
  shift
  node 0 "$nproc" "$@" --metrics-file "$work/m.jsonl"
  local pid0=$!
  node 1 "$nproc" "$@"
  local pid1=$!
  wait "$pid0" || fail "host 0's launcher exited $?"
  wait "$pid1" || fail "host 1's launcher exited $?"
  cat "$work/host0.log"
}

case $case_name in
hier)
  reference 4
  sent0=$(link_bytes 0) sent1=$(link_bytes 1)
  two_hosts 2
  same_final "$python" 4 "$work/ref.jsonl" "$work/m.jsonl"
  # 2 epochs x 8 steps, each an all-reduce of the MLP's 235146 float gradients between the two hosts'
  # leaders: a ring of two sends half the buffer each way twice, 0.94 MB per step each way.
  steps=$(grep -v '"batch"' "$work/m.jsonl" | tail -n 1 | sed 's/.*"step":\([0-9]*\).*/\1/')
  for n in 0 1; do
    eval "before=\$sent$n"
    moved=$(($(link_bytes "$n") - before))
    need=$((steps * 235146 * 4))
    echo "host $n sent $moved bytes over the link for $steps steps (at least $need expected)"
    [ "$moved" -ge "$need" ] || fail "host $n sent only $moved bytes over the link: the gradients did not cross it"
  done
  ;;
gloo)
  reference 2 --backend gloo
  two_hosts 1 --backend gloo
  same_final "$python" 2 "$work/ref.jsonl" "$work/m.jsonl"
  ;;
missing)
  start=$SECONDS
  LOCKSTEP_RDZV_TIMEOUT=5 node 0 2
  wait $! && fail "host 0 alone exited 0"
  cat "$work/host0.log"
  grep -Fq "rank(s) 2, 3 never arrived" "$work/host0.log" || fail "the error does not name ranks 2 and 3"
  [ $((SECONDS - start)) -le 60 ] || fail "took $((SECONDS - start)) s with a 5 s rendezvous timeout"
  # Every process of host 0 (launcher and workers) runs inside its namespace.
  left=$("$hosts" pids)
  [ -z "$left" ] || fail "processes of the job are left: $(ps -o pid=,args= -p "$(echo $left | tr ' ' ,)")"
  ;;
*)
  echo "netns_e2e: unknown case '$case_name' (hier, gloo, missing)" >&2
  exit 2
  ;;
esac
echo "netns_e2e[$case_name]: ok"
