#!/usr/bin/env bash
# The shm backend with real processes:
#   killed_rank   3 ranks started by hand (no launcher to stop the others): rank 1 is killed with -9 after
#                 1000 all-reduces, inside the ranks' loop; ranks 0 and 2 must fail with an error naming rank 1
#                 and its pid. Their collective timeout is an hour, so only the peer's death can end them
#                 within `timeout 100` (the hang bound; no time is compared).
#   no_leftovers  RUNS (default 100) jobs of 2 ranks under `lockstep run`, each with one rank killed with
#                 -9 at a random moment in its first 0.6 s (set-up or collectives); afterwards no segment
#                 of any of these jobs may remain in /dev/shm, and inotify must have seen some created.
#   gloo_peer     COMM_WORKER_BACKEND=gloo still works (the worlds in CMakeLists.txt run auto = shm).
# usage: shm_e2e.sh CASE LOCKSTEP_CLI COMM_WORKER
set -u
case_name=$1
lockstep=$2
worker=$3
dir=$(mktemp -d)
pids=""
trap 'for p in $pids; do kill -9 "$p" 2>/dev/null; done; rm -rf "$dir"' EXIT
fail() { echo "shm_e2e $case_name: $*" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("",0)); print(s.getsockname()[1])'; }

case $case_name in
killed_rank)
  port=$(free_port)
  for rank in 0 1 2; do
    RANK=$rank WORLD_SIZE=3 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      TORCHELASTIC_RUN_ID=killed-rank-$$ LOCKSTEP_TIMEOUT=3600 COMM_WORKER_BACKEND=shm COMM_WORKER_ROUNDS=100000000 \
      COMM_WORKER_KILL_RANK=1 COMM_WORKER_KILL_AFTER_ROUNDS=1000 timeout 100 "$worker" >"$dir/out$rank" 2>"$dir/err$rank" &
    pids="$pids $!"
  done
  set -- $pids
  wait "$1"; s0=$?
  wait "$2"; s1=$?
  wait "$3"; s2=$?
  pids=""
  [ "$s1" -eq 137 ] || fail "rank 1 should have died of SIGKILL (137), got $s1"
  [ "$s0" -ne 124 ] && [ "$s2" -ne 124 ] || fail "ranks 0 and 2 were still waiting after 100 s (the hang bound): $s0, $s2"
  [ "$s0" -ne 0 ] && [ "$s2" -ne 0 ] || fail "ranks 0 and 2 should fail, got $s0 and $s2"
  for r in 0 2; do
    grep -q "rank 1 (pid [0-9]*)" "$dir/err$r" || { cat "$dir/err$r"; fail "rank $r's error does not name rank 1 and its pid"; }
  done
  echo "ok: the survivors failed; rank 0 said: $(head -c 300 "$dir/err0")"
  ;;
no_leftovers)
  runs=${RUNS:-100}
  tag=shmkill$$
  # The control: inotify counts the segments of these jobs created in /dev/shm (each is unlinked once
  # every rank has mapped it, so most live for milliseconds). "Nothing left" means something only if
  # segments were made under the name the count below looks for.
  python3 - "lockstep-$tag-" "$dir/created" "$dir/ready" "$dir/stop" <<'PY' &
import ctypes, os, select, struct, sys
prefix, out, ready, stop = sys.argv[1].encode(), sys.argv[2], sys.argv[3], sys.argv[4]
libc = ctypes.CDLL("libc.so.6", use_errno=True)
fd = libc.inotify_init1(os.O_NONBLOCK)
IN_CREATE = 0x100
if fd < 0 or libc.inotify_add_watch(fd, b"/dev/shm", IN_CREATE) < 0:
    sys.exit(f"inotify on /dev/shm: errno {ctypes.get_errno()}")
open(ready, "w").close()
created = 0
while True:
    done = os.path.exists(stop)
    if select.select([fd], [], [], 0.2)[0]:
        data, at = os.read(fd, 1 << 16), 0
        while at < len(data):
            _, _, _, length = struct.unpack_from("iIII", data, at)
            created += data[at + 16:at + 16 + length].rstrip(b"\0").startswith(prefix)
            at += 16 + length
    elif done:
        break
open(out, "w").write(f"{created}\n")
PY
  watcher=$!
  pids="$pids $watcher"
  for _ in $(seq 1 300); do [ -e "$dir/ready" ] && break; sleep 0.1; done  # a hang bound, not a timing
  [ -e "$dir/ready" ] || fail "the inotify watcher did not start"
  for i in $(seq 1 "$runs"); do
    # Rounds enough for hours: every job is still running when its rank is killed, so every run below is
    # a killed one (a job that finished first would prove nothing about leftovers after a kill).
    COMM_WORKER_BACKEND=shm COMM_WORKER_ROUNDS=100000000 COMM_WORKER_KILL_RANK=$((RANDOM % 2)) \
      COMM_WORKER_KILL_AFTER_MS=$((RANDOM % 600)) \
      "$lockstep" run --nproc-per-node 2 --standalone --rdzv-id "$tag-$i" -- "$worker" >"$dir/run.log" 2>&1
    status=$?
    [ "$status" -ne 0 ] || { cat "$dir/run.log"; fail "run $i exited 0: its rank was not killed"; }
    grep -q "killed by signal 9 (SIGKILL)" "$dir/run.log" || { cat "$dir/run.log"; fail "run $i failed, not by the kill"; }
  done
  touch "$dir/stop"
  wait "$watcher" || fail "the inotify watcher failed"
  created=$(cat "$dir/created")
  [ "$created" -ge 1 ] || fail "no segment of these $runs jobs was ever created in /dev/shm: nothing to leave behind"
  left=$(ls /dev/shm | grep -c "^lockstep-$tag-" || true)
  [ "$left" -eq 0 ] || { ls -la /dev/shm; fail "$left segment(s) left in /dev/shm after $runs killed runs"; }
  echo "ok: $runs runs, each with a rank killed by -9, created $created segment(s), nothing left in /dev/shm"
  ;;
gloo_peer)
  COMM_WORKER_BACKEND=gloo "$lockstep" run --nproc-per-node 2 --standalone -- "$worker" >"$dir/run.log" 2>&1 ||
    { cat "$dir/run.log"; fail "gloo run failed"; }
  grep -q "rank 1/2 ok (run .*, backend gloo)" "$dir/run.log" || { cat "$dir/run.log"; fail "no gloo ok line"; }
  echo "ok"
  ;;
*) fail "unknown case" ;;
esac
