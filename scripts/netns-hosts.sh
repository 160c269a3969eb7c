#!/bin/sh
# Emulated hosts on this machine: network namespaces NAME0, NAME1, ... each with its own address on
# 10.231.0.0/24 (NAMEi: 10.231.0.<i+1> on lsi) and loopback up, each joined by a veth pair to one bridge
# (a switch) in the namespace NAMEbr. Every process started with `ip netns exec NAME0 ...` sees only its
# host's interfaces, so the ranks of a job on several hosts must reach each other over the links, as over
# a real network.
#
#   scripts/netns-hosts.sh start [--hosts N] [--rate RATE]
#                                    create N hosts (default 2); RATE (e.g. 1gbit) limits what each host
#                                    sends with a tbf qdisc on its link (netem is not in every kernel)
#   scripts/netns-hosts.sh stop      stop every process still running in them (TERM, then KILL after 5 s),
#                                    then delete every namespace (and so the links)
#   scripts/netns-hosts.sh pids [I]  print the processes running in them, or in host I only (nothing when none)
#   scripts/netns-hosts.sh status    print the addresses, the qdiscs and the bytes each host sent
#
# LOCKSTEP_NETNS (default: lockstep-host) names the namespaces; use distinct names for jobs that run at
# the same time. Exit status 3, with the reason on stdout, where the machine forbids it (not root, no
# CAP_NET_ADMIN, iproute2 missing): tests turn that into a skip.
set -u
name=${LOCKSTEP_NETNS:-lockstep-host}
bridge=${name}br

# The host namespaces that exist now, in order.
hosts() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${name}[0-9]+$" | sort -V
}

cannot() {
  echo "cannot create network namespaces here: $*"
  exit 3
}

start() {
  rate="" count=2
  while [ $# -gt 0 ]; do
    case $1 in
    --rate) rate=${2:?--rate needs a value, e.g. 1gbit}; shift 2 ;;
    --hosts) count=${2:?--hosts needs a count}; shift 2 ;;
    *) echo "netns-hosts: unknown flag '$1' (expected --hosts N, --rate RATE)" >&2; exit 2 ;;
    esac
  done
  case $count in ''|*[!0-9]*) echo "netns-hosts: --hosts '$count' is not a count" >&2; exit 2 ;; esac
  [ "$count" -ge 1 ] && [ "$count" -le 200 ] || { echo "netns-hosts: --hosts $count is not in 1..200" >&2; exit 2; }
  command -v ip >/dev/null 2>&1 || cannot "'ip' not found (apt-get install iproute2)"
  [ "$(id -u)" -eq 0 ] || cannot "not root (ip netns needs CAP_NET_ADMIN)"
  stop >/dev/null 2>&1
  ip netns add "$bridge" 2>/dev/null || cannot "'ip netns add $bridge' failed (no CAP_NET_ADMIN in this container?)"
  if ! ip -n "$bridge" link add br0 type bridge; then
    stop >/dev/null 2>&1
    cannot "creating a bridge failed (no bridge support in this kernel?)"
  fi
  # Any failure from here on removes every namespace before it exits: nothing half-built stays.
  trap 'rc=$?; [ $rc -eq 0 ] || stop >/dev/null 2>&1' EXIT
  set -e
  ip -n "$bridge" link set br0 up
  i=0
  while [ "$i" -lt "$count" ]; do
    ns=$name$i
    ip netns add "$ns"
    ip link add "ls$i" netns "$ns" type veth peer name "p$i" netns "$bridge"
    ip -n "$bridge" link set "p$i" master br0
    ip -n "$bridge" link set "p$i" up
    ip -n "$ns" addr add "10.231.0.$((i + 1))/24" dev "ls$i"
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "ls$i" up
    if [ -n "$rate" ]; then
      command -v tc >/dev/null 2>&1 || { echo "netns-hosts: 'tc' not found (apt-get install iproute2)" >&2; exit 1; }
      # Token bucket: RATE sustained, a 1 MiB burst (enough for 1gbit at the kernel's timer granularity),
      # packets queue for at most 100 ms (then drop, and TCP backs off as on a real saturated link).
      ip netns exec "$ns" tc qdisc add dev "ls$i" root tbf rate "$rate" burst 1mbit latency 100ms
    fi
    i=$((i + 1))
  done
  set +e
  # The links are up when every host's end reports carrier (a veth pair: at once, or within a few ms).
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    down=0 i=0
    while [ "$i" -lt "$count" ]; do
      [ "$(ip netns exec "$name$i" cat "/sys/class/net/ls$i/operstate")" = up ] || down=1
      i=$((i + 1))
    done
    [ "$down" -eq 0 ] && break
    sleep 0.2
  done
  echo "$count host(s) ${name}0..${name}$((count - 1)) on 10.231.0.1..10.231.0.$count up${rate:+, each sending at most $rate}"
}

pids() {
  if [ $# -gt 0 ]; then
    ip netns pids "$name$1" 2>/dev/null
    return 0
  fi
  for ns in $(hosts); do
    ip netns pids "$ns" 2>/dev/null
  done
}

stop() {
  # Deleting a namespace does not end the processes in it (they keep it alive): stop them first.
  left=$(pids)
  if [ -n "$left" ]; then
    kill $left 2>/dev/null
    for _ in $(seq 50); do
      [ -z "$(pids)" ] && break
      sleep 0.1
    done
    left=$(pids)
    [ -z "$left" ] || kill -9 $left 2>/dev/null
  fi
  for ns in $(hosts); do
    ip netns del "$ns" 2>/dev/null
  done
  ip netns del "$bridge" 2>/dev/null
  return 0
}

status() {
  for ns in $(hosts); do
    i=${ns#"$name"}
    echo "$ns: $(ip -n "$ns" -brief addr show dev "ls$i" | tr -s ' ')"
    echo "  sent $(ip netns exec "$ns" cat "/sys/class/net/ls$i/statistics/tx_bytes") bytes"
    ip netns exec "$ns" tc qdisc show dev "ls$i" | sed 's/^/  /'
  done
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
start) start "$@" ;;
stop) stop ;;
pids) pids "$@" ;;
status) status ;;
*) echo "usage: scripts/netns-hosts.sh start [--hosts N] [--rate RATE] | stop | pids [I] | status" >&2; exit 2 ;;
esac
