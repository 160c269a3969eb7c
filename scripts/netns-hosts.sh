#!/bin/sh
# Two emulated hosts on this machine: network namespaces NAME0 and NAME1 joined by a veth pair, each with
# its own address on 10.231.0.0/24 (NAME0: 10.231.0.1 on ls0, NAME1: 10.231.0.2 on ls1) and loopback up.
# Every process started with `ip netns exec NAME0 ...` sees only its host's interfaces, so the ranks of a
# job on two hosts must reach each other over the veth link, as over a real network.
#
#   scripts/netns-hosts.sh start [--rate RATE]   create them; RATE (e.g. 1gbit) limits each direction of the
#                                                link with a tbf qdisc on both ends (netem is not in every kernel)
#   scripts/netns-hosts.sh stop                  stop every process still running in them (TERM, then KILL
#                                                after 5 s), then delete both namespaces (and so the link)
#   scripts/netns-hosts.sh pids                  print the processes running in them (nothing when none)
#   scripts/netns-hosts.sh status                print the addresses, the qdiscs and the bytes sent each way
#
# LOCKSTEP_NETNS (default: lockstep-host) names the namespaces; use distinct names for jobs that run at
# the same time. Exit status 3, with the reason on stdout, where the machine forbids it (not root, no
# CAP_NET_ADMIN, iproute2 missing): tests turn that into a skip.
set -u
name=${LOCKSTEP_NETNS:-lockstep-host}
ns0=${name}0
ns1=${name}1
addr0=10.231.0.1
addr1=10.231.0.2

cannot() {
  echo "cannot create network namespaces here: $*"
  exit 3
}

start() {
  rate=""
  while [ $# -gt 0 ]; do
    case $1 in
    --rate) rate=${2:?--rate needs a value, e.g. 1gbit}; shift 2 ;;
    *) echo "netns-hosts: unknown flag '$1' (expected --rate RATE)" >&2; exit 2 ;;
    esac
  done
  command -v ip >/dev/null 2>&1 || cannot "'ip' not found (apt-get install iproute2)"
  [ "$(id -u)" -eq 0 ] || cannot "not root (ip netns needs CAP_NET_ADMIN)"
  stop >/dev/null 2>&1
  ip netns add "$ns0" 2>/dev/null || cannot "'ip netns add $ns0' failed (no CAP_NET_ADMIN in this container?)"
  if ! ip netns add "$ns1" || ! ip link add ls0 netns "$ns0" type veth peer name ls1 netns "$ns1"; then
    stop >/dev/null 2>&1
    cannot "creating the veth pair failed (no veth support or no CAP_NET_ADMIN)"
  fi
  # Any failure from here on removes both namespaces before it exits: nothing half-built stays.
  trap 'rc=$?; [ $rc -eq 0 ] || stop >/dev/null 2>&1' EXIT
  set -e
  ip -n "$ns0" addr add "$addr0/24" dev ls0
  ip -n "$ns1" addr add "$addr1/24" dev ls1
  for ns in "$ns0" "$ns1"; do
    ip -n "$ns" link set lo up
  done
  ip -n "$ns0" link set ls0 up
  ip -n "$ns1" link set ls1 up
  if [ -n "$rate" ]; then
    command -v tc >/dev/null 2>&1 || { echo "netns-hosts: 'tc' not found (apt-get install iproute2)" >&2; exit 1; }
    # Token bucket: RATE sustained, a 1 MiB burst (enough for 1gbit at the kernel's timer granularity),
    # packets queue for at most 100 ms (then drop, and TCP backs off as on a real saturated link).
    ip netns exec "$ns0" tc qdisc add dev ls0 root tbf rate "$rate" burst 1mbit latency 100ms
    ip netns exec "$ns1" tc qdisc add dev ls1 root tbf rate "$rate" burst 1mbit latency 100ms
  fi
  set +e
  # The link is up when both ends report carrier (a veth pair: at once, or within a few ms).
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    [ "$(ip netns exec "$ns0" cat /sys/class/net/ls0/operstate)" = up ] &&
      [ "$(ip netns exec "$ns1" cat /sys/class/net/ls1/operstate)" = up ] && break
    sleep 0.2
  done
  echo "hosts $ns0 ($addr0) and $ns1 ($addr1) up${rate:+, link limited to $rate each way}"
}

pids() {
  for ns in "$ns0" "$ns1"; do
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
  ip netns del "$ns0" 2>/dev/null
  ip netns del "$ns1" 2>/dev/null
  return 0
}

status() {
  for pair in "$ns0 ls0" "$ns1 ls1"; do
    set -- $pair
    ip netns exec "$1" true 2>/dev/null || { echo "$1: absent"; continue; }
    echo "$1: $(ip -n "$1" -brief addr show dev "$2" | tr -s ' ')"
    echo "  sent $(ip netns exec "$1" cat "/sys/class/net/$2/statistics/tx_bytes") bytes"
    ip netns exec "$1" tc qdisc show dev "$2" | sed 's/^/  /'
  done
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
start) start "$@" ;;
stop) stop ;;
pids) pids ;;
status) status ;;
*) echo "usage: scripts/netns-hosts.sh start [--rate RATE] | stop | pids | status" >&2; exit 2 ;;
esac
