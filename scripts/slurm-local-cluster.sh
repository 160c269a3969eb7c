#!/bin/bash
# A real Slurm cluster on this one host, for lockstep's Slurm tests: slurmctld, two slurmd daemons that
# emulate the nodes lsnode1 and lsnode2 (4 CPUs each), and a private munged, all from Debian's
# slurm-wlm and munge packages (scripts/install-deps.sh installs them).
#
# Usage: scripts/slurm-local-cluster.sh start|stop|status
#   start   writes a munge key and slurm.conf into the state directory, adds the node names to
#           /etc/hosts (127.0.0.1), starts munged, slurmctld and the slurmd daemons, and waits until both
#           nodes are idle. Prints the line to export: SLURM_CONF=<state>/slurm.conf (every client
#           command, sbatch, srun, squeue, scancel, needs it). Starting a running cluster restarts it.
#   stop    cancels every job, stops every daemon and every process they started, removes the /etc/hosts
#           entries and the state directory. Safe to run any number of times, also after a failed start.
#   status  prints sinfo and squeue; exit status 0 when the cluster is up, 1 when it is not.
#
# Environment:
#   LOCKSTEP_SLURM_STATE       the state directory (default /tmp/lockstep-slurm); it holds slurm.conf,
#                              the key, the spool directories, pid files and logs (logs/)
#   LOCKSTEP_SLURM_PORT_BASE   slurmctld listens on this port, the slurmd daemons on the next ones
#                              (default 26817: outside [10000, 19999], where jobs put their rendezvous
#                              port, and below the ephemeral ports)
#
# Exit status: 0 done; 1 the cluster failed to start (the daemons' logs are printed); 3 this machine
# cannot run it (not root, a package missing, /etc/hosts not writable): the reason is printed, and tests
# skip on 3.
#
# Facts this relies on (Slurm 22.05): several slurmd may run on one host when each has its own NodeName
# (-N), port, spool directory, pid file and log (the %n patterns below); the node names must resolve;
# slurmctld wants an absolute -f path; munged's socket directory must be 0755; proctrack/linuxproc and
# task/none need no cgroups; SlurmdParameters=config_overrides lets a node declare more CPUs than the
# host has (2 cores here, 4 CPUs per emulated node).
set -u

state=${LOCKSTEP_SLURM_STATE:-/tmp/lockstep-slurm}
port_base=${LOCKSTEP_SLURM_PORT_BASE:-26817}
nodes="lsnode1 lsnode2"
hosts_marker="# lockstep-slurm-local-cluster"
# Every daemon started here carries this variable, and so does every slurmstepd and task they start:
# `stop` finds what is left by it, and never touches another Slurm or munge on this host.
marker="LOCKSTEP_SLURM_CLUSTER=$state"

say() { echo "slurm-local-cluster: $*"; }
refuse() {
  say "cannot run here: $*" >&2
  exit 3
}

check_machine() {
  [ "$(id -u)" -eq 0 ] || refuse "must run as root (slurmd starts tasks as any user; munged and /etc/hosts need root); run it with sudo"
  local missing=""
  for program in munged slurmctld slurmd sbatch srun scontrol squeue sinfo scancel; do
    command -v "$program" >/dev/null 2>&1 || missing="$missing $program"
  done
  [ -z "$missing" ] || refuse "missing$missing: install slurm-wlm, slurm-client and munge (scripts/install-deps.sh)"
  [ -w /etc/hosts ] || refuse "/etc/hosts is not writable (the emulated node names must resolve)"
}

# The pids of every process whose environment holds $marker, and of their descendants.
marked_pids() {
  local roots="" pid
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    [ "$pid" = "$$" ] && continue
    if grep -qzxF "$marker" "$dir/environ" 2>/dev/null; then roots="$roots $pid"; fi
  done
  [ -n "$roots" ] || return 0
  # Descendants, from the parent links of `ps`.
  ps -e -o pid=,ppid= | awk -v roots="$roots" '
    { parent[$1] = $2; pids[NR] = $1 }
    END {
      n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1
      changed = 1
      while (changed) { changed = 0; for (i in pids) { p = pids[i]; if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; changed = 1 } } }
      for (p in keep) print p
    }'
}

remove_hosts_entries() {
  if grep -qF "$hosts_marker" /etc/hosts 2>/dev/null; then
    # Rewritten in place (not renamed): /etc/hosts is often a bind mount in containers.
    local kept
    kept=$(grep -vF "$hosts_marker" /etc/hosts)
    printf '%s\n' "$kept" >/etc/hosts
  fi
}

cluster_up() {
  [ -f "$state/slurm.conf" ] || return 1
  local idle
  idle=$(SLURM_CONF="$state/slurm.conf" sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 ~ /^(idle|mix|alloc)/' | wc -l)
  [ "$idle" -eq 2 ]
}

stop_cluster() {
  if [ -f "$state/slurm.conf" ]; then
    export SLURM_CONF="$state/slurm.conf"
    if scontrol ping >/dev/null 2>&1; then
      scancel --full --quiet --user=root >/dev/null 2>&1 || true
      for _ in $(seq 1 50); do
        [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
        sleep 0.2
      done
    fi
  fi
  # The daemons by pid file, then whatever else carries the marker (slurmstepd, tasks): TERM, then KILL.
  local pids=""
  for file in "$state"/run/*.pid; do
    [ -f "$file" ] && pids="$pids $(cat "$file" 2>/dev/null)"
  done
  pids="$pids $(marked_pids | tr '\n' ' ')"
  pids=$(echo $pids)
  if [ -n "$pids" ]; then
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 1 50); do
      local alive=""
      for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive="$alive $pid"; done
      [ -z "$alive" ] && break
      sleep 0.1
    done
    pids=$(echo $pids $(marked_pids | tr '\n' ' '))
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
  fi
  remove_hosts_entries
  rm -rf "$state"
}

show_logs() {
  for log in "$state"/logs/*.log; do
    [ -f "$log" ] || continue
    echo "---- $log (last 30 lines)"
    tail -n 30 "$log"
  done
}

write_config() {
  local node_lines="" port=$port_base
  for node in $nodes; do
    port=$((port + 1))
    node_lines="${node_lines}NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$node Port=$port CPUs=4 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=2000 State=UNKNOWN
"
  done
  # Job ids (and so the master ports lockstep derives from them) differ between two starts.
  local first_job=$((1000 + RANDOM % 30000))
  cat >"$state/slurm.conf" <<EOF
# Written by scripts/slurm-local-cluster.sh: two emulated nodes on this host.
ClusterName=lockstep-local
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$port_base
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued job waits before it may start again (default 120 s).
AuthInfo=socket=$state/munge/munge.socket.2,cred_expire=10
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool/%n
SlurmctldPidFile=$state/run/slurmctld.pid
SlurmdPidFile=$state/run/slurmd-%n.pid
SlurmctldLogFile=$state/logs/slurmctld.log
SlurmdLogFile=$state/logs/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
# Start a requeued job as soon as it is eligible (the defaults wait up to 60 s / 30 s).
SchedulerParameters=sched_interval=2,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
JobRequeue=1
FirstJobId=$first_job
KillWait=5
MinJobAge=30
InactiveLimit=0
SlurmdTimeout=60
SlurmctldTimeout=60
$node_lines
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

start_cluster() {
  check_machine
  stop_cluster
  mkdir -p "$state"/{ctld,run,logs,munge} || refuse "cannot create $state"
  for node in $nodes; do mkdir -p "$state/spool/$node"; done
  chmod 0755 "$state" "$state/munge"
  chmod 0700 "$state/ctld"
  write_config

  # The emulated node names resolve to this host.
  remove_hosts_entries
  for node in $nodes; do echo "127.0.0.1 $node $hosts_marker" >>/etc/hosts; done

  # A private munged with its own key and socket (the host's munge, if any, is left alone).
  head -c 1024 /dev/urandom >"$state/munge/munge.key"
  chmod 0400 "$state/munge/munge.key"
  env "$marker" munged --force --key-file="$state/munge/munge.key" --socket="$state/munge/munge.socket.2" \
    --pid-file="$state/run/munged.pid" --log-file="$state/logs/munged.log" --seed-file="$state/munge/munged.seed" \
    || { show_logs; say "munged did not start" >&2; stop_cluster; exit 1; }

  env "$marker" slurmctld -f "$state/slurm.conf" -i \
    || { show_logs; say "slurmctld did not start" >&2; stop_cluster; exit 1; }
  for node in $nodes; do
    env "$marker" slurmd -f "$state/slurm.conf" -N "$node" \
      || { show_logs; say "slurmd -N $node did not start" >&2; stop_cluster; exit 1; }
  done

  export SLURM_CONF="$state/slurm.conf"
  for _ in $(seq 1 150); do
    if cluster_up; then
      say "up: nodes $nodes (4 CPUs each), partition debug; state in $state"
      echo "export SLURM_CONF=$state/slurm.conf"
      return 0
    fi
    sleep 0.2
  done
  sinfo -N 2>&1 || true
  show_logs
  say "the nodes did not become idle within 30 s" >&2
  stop_cluster
  exit 1
}

case ${1:-} in
start)
  start_cluster
  ;;
stop)
  [ "$(id -u)" -eq 0 ] || refuse "must run as root"
  stop_cluster
  say "stopped; nothing left in $state or /etc/hosts"
  ;;
status)
  if cluster_up; then
    export SLURM_CONF="$state/slurm.conf"
    echo "export SLURM_CONF=$state/slurm.conf"
    sinfo
    squeue
    exit 0
  fi
  say "not running (no idle nodes under $state)"
  exit 1
  ;;
*)
  echo "usage: $0 start|stop|status" >&2
  exit 2
  ;;
esac
