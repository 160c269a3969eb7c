#!/usr/bin/env bash
# The seeds' torchrun lines under `lockstep run`, verbatim but for the word `torchrun` (issue 38, "Done when"):
# on one node, and on two emulated hosts (scripts/netns-hosts.sh) with `--rdzv_backend=c10d` and no
# `--node_rank`, running the seeds' Python DDP script (bench/peer/ddp_peer.py: DistributedDataParallel,
# DistributedSampler, DataLoader, Adam on Fashion-MNIST; a .py runs under Python, as under torchrun) and a C++
# example (examples/ddp_native, executed as it is). Where PyTorch's own torchrun works (torch 2.x; Debian's
# 1.13 torchrun crashes on Python 3.11) the Python side runs under it too, and the workers' environments of
# both launchers are compared key by key.
#
#   seed_lines_e2e.sh CASE LOCKSTEP PYTHON DDP_NATIVE
#
# The lines (the seeds use 4 processes; issue 38 writes seed 000's with 2, and so do the cases here):
#   000  export MASTER_ADDR=$(hostname); export MASTER_PORT=<port>
#        torchrun --nnodes=1 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT PROG
#   000, 001, 002 (quick reference):   torchrun --nproc_per_node=2 PROG
#   002 (multi-node):  torchrun --nproc_per_node=4 --nnodes=2 --node_rank=0|1 --master_addr=... --master_port=12355 PROG
#
# Cases:
#   one_node      line 000 (Slurm, c10d) with ddp_peer.py and with ddp_native: each exits 0 and prints its
#                 epoch records (2 ranks); on torch 2.x the Python line runs under torchrun too and prints the
#                 same metrics to the last digit.
#   one_node_quick  the same with the quick-reference line.
#   two_hosts     line 000 on 2 hosts with ddp_peer.py: the same line on both (--nnodes=2,
#                 --rdzv_endpoint=10.231.0.1:29400, no --node_rank); host 0 (started first) becomes node 0
#                 (ranks 0-1), host 1 node 1 (ranks 2-3); both launchers exit 0; the metrics equal those of the
#                 quick-reference line with 4 processes on one host, to the last digit.
#   two_hosts_cpp the same with ddp_native; and line 002 (static, 4 processes per node, 8 ranks) with
#                 ddp_native against 8 processes on one host (8 Python processes on a 2-core machine are too
#                 slow for a test: the C++ example carries this line).
#   two_hosts_torchrun (torch 2.x) line 000 on 2 hosts with ddp_peer.py under torchrun and under
#                 `lockstep run`: the same metrics to the last digit.
#   env_one_node  (torch 2.x) tests/e2e/torchrun_compat.py --env-out under torchrun and under `lockstep run`,
#                 line 000 and the quick-reference line, from the same minimal environment: the workers'
#                 environments agree key by key but for the differences listed below.
#   env_two_hosts (torch 2.x) the same on 2 hosts with line 000 (--nnodes=2, c10d, no --node_rank).
#
# Setup that is not part of any line:
# - LOCKSTEP_JOB_SECRET, the same on both hosts: a job that spans nodes needs one (issue 42; torchrun ignores
#   it). The one-node lines need nothing: lockstep run makes the secret of a job that stays on its node.
# - PYTHON_EXEC=PYTHON for both launchers (torchrun's own variable: the interpreter of a .py; lockstep run
#   honours it too), so that both run the scripts under the python3 whose torch this build uses.
# - The emulated hosts share this machine's hostname, so each resolves it to its own address (a hosts file
#   in /etc/netns/NAME/, which `ip netns exec` puts over /etc/hosts), as a real host resolves its name:
#   Python's Gloo binds to the address of the hostname, and torchrun decides whether it hosts the c10d store
#   by comparing the endpoint with the addresses of the hostname.
# - torchrun gets `--local-addr 10.231.0.<i+1>` on the emulated hosts: it names node 0 by socket.getfqdn()
#   otherwise, the same name on every host. lockstep run is never given it: it derives the address itself.
# - In the env_* cases torchrun runs with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (both launchers get the same
#   minimal environment: PATH, HOME, LANG=C.UTF-8, PYTHON_EXEC and that variable, plus line 000's exports): then
#   torchrun's rank 0 hosts the workers' store on a free port, as lockstep's does (without it torchrun shares
#   its c10d store: MASTER_PORT is the rendezvous port and TORCHELASTIC_USE_AGENT_STORE=True).
# - lockstep's node ranks follow the order of arrival, torchrun's the sorted node addresses: host 0 starts
#   first and host 1 only once host 0 said "joined round 0", so host 0 is node 0 under both.
#
# Exit status 77 (ctest: skipped) with a lockstep-skip line only where network namespaces cannot be made.
set -uo pipefail
export LOCKSTEP_JOB_SECRET=e2e-secret-of-the-emulated-hosts-0123
case_name=${1:?usage: seed_lines_e2e.sh CASE LOCKSTEP PYTHON DDP_NATIVE}
lockstep=$(realpath "$2") python=$3 ddp_native=$(realpath "$4")
here=$(cd "$(dirname "$0")" && pwd)
peer=$(realpath "$here/../../bench/peer/ddp_peer.py")
compat=$here/torchrun_compat.py
hosts="$here/../../scripts/netns-hosts.sh"
export LOCKSTEP_NETNS="lsseed-$case_name"
export PYTHON_EXEC=$python
work=$(mktemp -d /tmp/lockstep-seed-lines.XXXXXX)
pids=()
netns_made=0
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  if [ "$netns_made" -eq 1 ]; then
    "$hosts" stop >/dev/null 2>&1
    rm -rf "/etc/netns/${LOCKSTEP_NETNS}0" "/etc/netns/${LOCKSTEP_NETNS}1"
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP  # (so that cleanup runs when ctest stops the test)
fail() {
  echo "seed_lines_e2e[$case_name]: $*" >&2
  exit 1
}
. "$here/e2e_lib.sh"

# The programs, with small limits: 1 epoch of 10 batches of 64 per rank (Python); 2 epochs of the C++
# example's 8192 synthetic samples.
py_prog=("$peer" --epochs 1 --limit-train-batches 10 --threads 1)
cpp_prog=("$ddp_native" 2)
lockstep_run=("$lockstep" run)
torchrun=("$python" -m torch.distributed.run)

torchrun_works() { "$python" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)'; }
free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }
show() { echo "---- $1"; cat "$1"; }

# expect_ok NAME STATUS: NAME's launcher (output in $work/NAME.out) exited 0.
expect_ok() {
  [ "$2" -eq 0 ] || { show "$work/$1.out" >&2; fail "$1: the launcher exited $2"; }
}

# metrics NAME: the epoch records rank 0 printed in $work/NAME.out, one line each, into $work/NAME.metrics:
# ddp_peer.py's JSON (epoch train_loss val_loss val_acc) or ddp_native's "epoch E: train_loss ..." line.
metrics() {
  local out=$work/$1.out
  if grep -q '{"epoch"' "$out"; then
    grep -o '{"epoch".*' "$out" | "$python" -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r["epoch"], r["train_loss"], r["val_loss"], r["val_acc"])'
  else
    grep -o 'epoch [0-9]*: train_loss .*' "$out"
  fi >"$work/$1.metrics"
  [ -s "$work/$1.metrics" ] || { show "$out" >&2; fail "$1: no epoch record"; }
  echo "$1: $(paste -sd';' "$work/$1.metrics")"
}

# same_metrics REFERENCE NAME...: each NAME printed exactly REFERENCE's epoch records.
same_metrics() {
  local ref=$1 name
  shift
  for name in "$@"; do
    cmp -s "$work/$ref.metrics" "$work/$name.metrics" ||
      fail "$name printed other metrics than $ref: $(paste -sd';' "$work/$name.metrics") vs $(paste -sd';' "$work/$ref.metrics")"
  done
}

# The seeds' lines on one node under LAUNCHER (lockstep_run or torchrun: an array's name), each under
# `timeout 120` (a hang bound) after the words of the array `prefix` (an environment); output in
# $work/NAME.out; the launcher must exit 0.
prefix=(env)
# seed 000's Slurm script: `export MASTER_ADDR=$(hostname); export MASTER_PORT=<port>`, then c10d at
# $MASTER_ADDR:$MASTER_PORT.
line_000() {
  local name=$1 launcher="$2[@]" addr port
  shift 2
  addr=$(hostname) port=$(free_port)
  "${prefix[@]}" MASTER_ADDR="$addr" MASTER_PORT="$port" timeout 120 \
    "${!launcher}" --nnodes=1 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint="$addr:$port" "$@" \
    >"$work/$name.out" 2>&1
  expect_ok "$name" $?
}
# seeds 000, 001, 002 (quick reference).
line_quick() {
  local name=$1 launcher="$2[@]"
  shift 2
  "${prefix[@]}" timeout 120 "${!launcher}" --nproc_per_node=2 "$@" >"$work/$name.out" 2>&1
  expect_ok "$name" $?
}

# The reference for two hosts: the quick-reference line with 4 processes on this host (NAME PROG...).
line_4() {
  local name=$1
  shift
  "${prefix[@]}" timeout 120 "${lockstep_run[@]}" --nproc_per_node=4 "$@" >"$work/$name.out" 2>&1
  expect_ok "$name" $?
}

# The emulated hosts 0 and 1 (10.231.0.1 and .2), each resolving this machine's hostname to its own address.
make_hosts() {
  start_or_skip "seed_lines_e2e[$case_name]" "the emulated hosts" "$hosts" start --hosts 2
  netns_made=1
  local i name
  name=$(hostname)
  for i in 0 1; do
    mkdir -p "/etc/netns/${LOCKSTEP_NETNS}$i" || fail "cannot write /etc/netns/${LOCKSTEP_NETNS}$i"
    { grep -vw -- "$name" /etc/hosts; echo "10.231.0.$((i + 1)) $name"; } >"/etc/netns/${LOCKSTEP_NETNS}$i/hosts" ||
      fail "cannot write /etc/netns/${LOCKSTEP_NETNS}$i/hosts"
  done
}

# wait_for FILE TEXT PID: FILE says TEXT while PID runs (bounded by 60 s, only a hang bound).
wait_for() {
  local deadline=$((SECONDS + 60))
  until grep -Fq -- "$2" "$1" 2>/dev/null; do
    kill -0 "$3" 2>/dev/null || { show "$1" >&2; fail "$(basename "$1" .out) ended before it said '$2'"; }
    [ "$SECONDS" -lt "$deadline" ] || { show "$1" >&2; fail "$(basename "$1" .out) did not say '$2' within 60 s"; }
    sleep 0.1
  done
}

# on_hosts NAME KIND LINE...: LINE on host 0, then on host 1, each under `timeout 120` after the words of
# `prefix`, with KIND's launcher: lockstep (`lockstep run`) or torchrun (given `--local-addr` of its host).
# A word containing __NODE_RANK__ has the host's index there. Output in $work/NAME.host<i>.out. Under
# lockstep and c10d, host 1 starts once host 0 said "joined round 0" (node ranks in order of arrival);
# both launchers must exit 0.
on_hosts() {
  local name=$1 kind=$2 i status host_pids=()
  shift 2
  for i in 0 1; do
    local launcher=("${lockstep_run[@]}")
    [ "$kind" = torchrun ] && launcher=("${torchrun[@]}" --local-addr "10.231.0.$((i + 1))")
    ip netns exec "${LOCKSTEP_NETNS}$i" "${prefix[@]}" timeout 120 "${launcher[@]}" "${@//__NODE_RANK__/$i}" \
      >"$work/$name.host$i.out" 2>&1 &
    host_pids+=("$!")
    pids+=("$!")
    if [ "$i" -eq 0 ] && [ "$kind" = lockstep ] && [[ " $* " == *" --rdzv_backend=c10d "* ]]; then
      wait_for "$work/$name.host0.out" "joined round 0" "${host_pids[0]}"
    fi
  done
  for i in 0 1; do
    wait "${host_pids[$i]}"
    status=$?
    if [ "$status" -ne 0 ]; then
      show "$work/$name.host0.out" >&2
      show "$work/$name.host1.out" >&2
      fail "$name: host $i's launcher exited $status"
    fi
  done
}

# expect_rounds NAME WORLD PER_NODE: under c10d host 0 became node 0 (ranks 0..PER_NODE-1) and host 1
# node 1, in one round of 2 nodes.
expect_rounds() {
  local name=$1 world=$2 per=$3 i
  for i in 0 1; do
    local want="this node is node $i, ranks $((i * per))..$((i * per + per - 1)) of $world"
    if ! grep -Fq "round 0: 2 node(s)" "$work/$name.host$i.out" || ! grep -Fq "$want" "$work/$name.host$i.out"; then
      show "$work/$name.host$i.out" >&2
      fail "$name: host $i does not say round 0 of 2 nodes, '$want'"
    fi
  done
}

# compare_env WHAT TORCHRUN LOCKSTEP WORLD ALLOWED...: the environments the workers of both launchers wrote
# (torchrun_compat.py --env-out PREFIX: PREFIX.rank<R>.json), rank by rank and key by key. The keys may
# differ only as listed in the Python below; ALLOWED names those of its `per_line` entries this line allows.
compare_env() {
  "$python" - "$@" <<'PY' || fail "$1: the workers' environments differ"
import json, sys
what, tprefix, lprefix, world, allowed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
# Values that differ on every line, by design:
differ = {
    "MASTER_PORT": "a free port chosen for each job by node 0 (torchrun's get_free_port(), lockstep's rank 0's "
                   "store)",
    "TORCHELASTIC_SIGNALS_TO_HANDLE": "each launcher's own default: lockstep run also handles SIGUSR1 (Slurm's "
                                      "preemption notice), passing it on to the workers",
    "OMP_NUM_THREADS": "torchrun: 1 with more than one worker; lockstep: max(1, cores / workers) (README, "
                       "lockstep run): the same on a 2-core machine with 2 workers per node",
}
# Values that differ on some lines only (ALLOWED names them):
per_line = {
    "MASTER_ADDR": "one node, no --local-addr: torchrun names node 0 by socket.getfqdn() ('localhost' here), "
                   "lockstep by the address it reaches the rendezvous from (127.0.0.1); on two hosts both give "
                   "10.231.0.1 (torchrun told by --local-addr, lockstep by itself)",
    "TORCHELASTIC_RUN_ID": "the quick-reference line (single node, static, no port): a random id per job "
                           "(torchrun turns it into c10d at localhost:0 with a uuid; lockstep 16 hex digits)",
}
# Set by torchrun only:
absent = {
    "TORCHELASTIC_ERROR_FILE": "torchrun always gives each worker an error file (its default logs spec, in "
                               "/tmp/torchelastic_*); lockstep only with --log-dir, and reports a failed rank's "
                               "stderr instead",
}
# Set by lockstep only:
extra = {
    "LOCKSTEP_HEARTBEAT_FD": "the worker's heartbeat pipe to its launcher (a hung worker is found and the job "
                             "stopped: --collective-timeout)",
    "LOCKSTEP_JOB_SECRET": "lockstep run makes the job secret of a job on one node and gives it to its workers "
                           "(on two hosts both launchers pass on the same given one)",
    "PYTHONUNBUFFERED": "lockstep run sets it (unless set) so that a Python worker's lines reach the launcher's "
                        "pipe at once, also from Python subprocesses of a C++ worker (--help)",
}
may_differ = {**differ, **{k: per_line[k] for k in allowed}}
bad, same = [], set()
for rank in range(world):
    try:
        t = json.load(open(f"{tprefix}.rank{rank}.json"))
        l = json.load(open(f"{lprefix}.rank{rank}.json"))
    except OSError as e:
        sys.exit(f"{what}: rank {rank} wrote no environment: {e}")
    for key in sorted(set(t) | set(l)):
        if key in t and key not in l:
            if key not in absent:
                bad.append(f"rank {rank}: torchrun sets {key}={t[key]!r}, lockstep run does not")
        elif key in l and key not in t:
            if key not in extra:
                bad.append(f"rank {rank}: lockstep run sets {key}={l[key]!r}, torchrun does not")
        elif t[key] != l[key]:
            if key not in may_differ:
                bad.append(f"rank {rank}: {key}: torchrun {t[key]!r}, lockstep run {l[key]!r}")
        else:
            same.add(key)
    differing = sorted(k for k in may_differ if k in t and k in l and t[k] != l[k])
    print(f"{what}: rank {rank}: {len(t)} variables from torchrun, {len(l)} from lockstep run; "
          f"RANK {l.get('RANK')} GROUP_RANK {l.get('GROUP_RANK')} MASTER_ADDR {l.get('MASTER_ADDR')} "
          f"TORCHELASTIC_RUN_ID {l.get('TORCHELASTIC_RUN_ID')}; differ as listed: {differing}")
for line in bad:
    print(f"{what}: {line}", file=sys.stderr)
if not bad:
    print(f"{what}: the same values for {sorted(same)}")
    print(f"{what}: listed differences: " + "; ".join(f"{k}: {v}" for k, v in {**may_differ, **absent, **extra}.items()))
sys.exit(1 if bad else 0)
PY
}

# seed 000's line on two hosts: the same on both, meeting at host 0 (10.231.0.1), no --node_rank; its
# exports as on the first node of the Slurm job (what $(hostname) names there).
line_000_hosts=(--nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=10.231.0.1:29400)
env_000_hosts=(MASTER_ADDR=10.231.0.1 MASTER_PORT=29400 LOCKSTEP_JOB_SECRET="$LOCKSTEP_JOB_SECRET")
# seed 002's multi-node line (static), node ranks 0 and 1.
line_002_hosts=(--nproc_per_node=4 --nnodes=2 --node_rank=__NODE_RANK__ --master_addr=10.231.0.1 --master_port=12355)
# The environment of the env_* cases: the same minimal one for both launchers.
minimal_env=(env -i PATH="$PATH" HOME="$HOME" LANG=C.UTF-8 TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 PYTHON_EXEC="$python")

case $case_name in
one_node | one_node_quick)
  [ -d /usr/share/datasets/fashion-mnist ] || fail "no Fashion-MNIST (scripts/install-deps.sh installs dataset-fashion-mnist)"
  line=line_000
  [ "$case_name" = one_node_quick ] && line=line_quick
  "$line" lockstep_py lockstep_run "${py_prog[@]}"
  "$line" lockstep_cpp lockstep_run "${cpp_prog[@]}"
  if [ "$line" = line_000 ] && ! grep -Fq "round 0: 1 node(s)" "$work/lockstep_py.out"; then
    show "$work/lockstep_py.out"
    fail "line 000 ran no c10d round"
  fi
  py_runs=(lockstep_py)
  if torchrun_works; then
    "$line" torchrun_py torchrun "${py_prog[@]}"
    py_runs+=(torchrun_py)
  else
    echo "torchrun: not run here ($python has torch $("$python" -c 'import torch; print(torch.__version__)'), whose" \
      "torchrun crashes on Python 3.11); the torch 2.x build runs it"
  fi
  for name in "${py_runs[@]}" lockstep_cpp; do metrics "$name"; done
  [ "$(wc -l <"$work/lockstep_py.metrics")" -eq 1 ] || fail "ddp_peer.py printed other than 1 epoch record"
  [ "$(wc -l <"$work/lockstep_cpp.metrics")" -eq 2 ] || fail "ddp_native printed other than 2 epoch records"
  grep -Fq "(2 ranks, " "$work/lockstep_cpp.metrics" || fail "ddp_native did not run 2 ranks"
  same_metrics "${py_runs[@]}"
  ;;
two_hosts)
  [ -d /usr/share/datasets/fashion-mnist ] || fail "no Fashion-MNIST (scripts/install-deps.sh installs dataset-fashion-mnist)"
  make_hosts
  prefix=(env "${env_000_hosts[@]}")
  on_hosts lockstep_000_py lockstep "${line_000_hosts[@]}" "${py_prog[@]}"
  expect_rounds lockstep_000_py 4 2
  prefix=(env)
  line_4 one_host_4_py "${py_prog[@]}"
  for name in lockstep_000_py.host0 one_host_4_py; do metrics "$name"; done
  same_metrics one_host_4_py lockstep_000_py.host0
  ;;
two_hosts_cpp)
  make_hosts
  prefix=(env "${env_000_hosts[@]}")
  on_hosts lockstep_000_cpp lockstep "${line_000_hosts[@]}" "${cpp_prog[@]}"
  expect_rounds lockstep_000_cpp 4 2
  prefix=(env)
  on_hosts lockstep_002_cpp lockstep "${line_002_hosts[@]}" "${cpp_prog[@]}"
  line_4 one_host_4_cpp "${cpp_prog[@]}"
  name=one_host_8_cpp
  timeout 120 "${lockstep_run[@]}" --nproc_per_node=8 "${cpp_prog[@]}" >"$work/$name.out" 2>&1
  expect_ok "$name" $?
  for name in lockstep_000_cpp.host0 one_host_4_cpp lockstep_002_cpp.host0 one_host_8_cpp; do metrics "$name"; done
  grep -Fq "(4 ranks, " "$work/one_host_4_cpp.metrics" || fail "ddp_native did not run 4 ranks"
  grep -Fq "(8 ranks, " "$work/one_host_8_cpp.metrics" || fail "ddp_native did not run 8 ranks"
  same_metrics one_host_4_cpp lockstep_000_cpp.host0
  same_metrics one_host_8_cpp lockstep_002_cpp.host0
  ;;
two_hosts_torchrun)
  torchrun_works || fail "$python's torch has no working torchrun (this case is registered for torch 2.x only)"
  [ -d /usr/share/datasets/fashion-mnist ] || fail "no Fashion-MNIST (scripts/install-deps.sh installs dataset-fashion-mnist)"
  make_hosts
  prefix=(env "${env_000_hosts[@]}")
  on_hosts torchrun_000_py torchrun "${line_000_hosts[@]}" "${py_prog[@]}"
  on_hosts lockstep_000_py lockstep "${line_000_hosts[@]}" "${py_prog[@]}"
  expect_rounds lockstep_000_py 4 2
  for name in torchrun_000_py.host0 lockstep_000_py.host0; do metrics "$name"; done
  same_metrics torchrun_000_py.host0 lockstep_000_py.host0
  ;;
env_one_node)
  torchrun_works || fail "$python's torch has no working torchrun (this case is registered for torch 2.x only)"
  prefix=("${minimal_env[@]}")
  line_000 torchrun_000 torchrun "$compat" --env-out "$work/torchrun_000"
  line_000 lockstep_000 lockstep_run "$compat" --env-out "$work/lockstep_000"
  line_quick torchrun_quick torchrun "$compat" --env-out "$work/torchrun_quick"
  line_quick lockstep_quick lockstep_run "$compat" --env-out "$work/lockstep_quick"
  compare_env "line 000" "$work/torchrun_000" "$work/lockstep_000" 2 MASTER_ADDR
  compare_env "quick-reference line" "$work/torchrun_quick" "$work/lockstep_quick" 2 MASTER_ADDR TORCHELASTIC_RUN_ID
  ;;
env_two_hosts)
  torchrun_works || fail "$python's torch has no working torchrun (this case is registered for torch 2.x only)"
  make_hosts
  prefix=("${minimal_env[@]}" "${env_000_hosts[@]}")
  on_hosts torchrun_000 torchrun "${line_000_hosts[@]}" "$compat" --env-out "$work/torchrun_000"
  on_hosts lockstep_000 lockstep "${line_000_hosts[@]}" "$compat" --env-out "$work/lockstep_000"
  expect_rounds lockstep_000 4 2
  compare_env "line 000 on 2 hosts" "$work/torchrun_000" "$work/lockstep_000" 4
  ;;
*)
  echo "seed_lines_e2e: unknown case '$case_name' (one_node, one_node_quick, two_hosts, two_hosts_cpp," \
    "two_hosts_torchrun, env_one_node, env_two_hosts)" >&2
  exit 2
  ;;
esac
echo "seed_lines_e2e[$case_name]: ok"
