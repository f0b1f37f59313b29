#!/usr/bin/env bash
# Hosts on one machine: N Linux network namespaces, each with its own
# address on a private bridge, so sinkd daemons in different namespaces see
# each other as separate hosts (TCP between them, shared memory inside one).
#
#   netns_testbed.sh up N [--delay 1ms] [--rate 1gbit] [--prefix NAME] [--subnet 10.77.0] [--owner PID]
#   netns_testbed.sh down [--prefix NAME | --all-stale]   # stops what still runs inside, too
#   netns_testbed.sh status [--prefix NAME]
#   netns_testbed.sh addr I [--prefix NAME]      # the address of host I
#   netns_testbed.sh exec I [--prefix NAME] CMD...
#
# Host i is namespace ${prefix}i at ${subnet}.(i+1)/24 with loopback up; its
# eth0 is one end of a veth pair whose other end hangs on a bridge that
# lives in a namespace of its own, ${prefix}br. Nothing is created in the
# root namespace: no route leads from the test range to the outside, and
# the names inside each namespace cannot clash with another run's.
#
# The prefix (default snk<PID>) makes parallel runs independent; `up`
# prints it, and the other commands take it as --prefix or
# NETNS_TESTBED_PREFIX. Each run records its owner (--owner, default the
# caller's PID) under /run/sinkrt-netns, and `down --all-stale` removes the
# runs whose owner has died. `up` removes what it made if any step fails.
#
# --delay and --rate shape each host's egress (so every cross-host packet
# passes one shaper) with netem; where the kernel lacks sch_netem, --rate
# falls back to tbf and --delay is refused, never silently dropped.
# Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2.
set -euo pipefail

STATE_DIR=${NETNS_TESTBED_STATE_DIR:-/run/sinkrt-netns}

die() {
  echo "netns_testbed: $*" >&2
  exit 2
}

usage() {
  sed -n '6,10p' "$0" | sed 's/^# *//' >&2
  exit 2
}

check_prefix() {
  [[ -n $1 ]] || die "no prefix: pass --prefix NAME or set NETNS_TESTBED_PREFIX"
  # Namespace names end up in /run/netns; keep them to one safe word.
  [[ $1 =~ ^[A-Za-z][A-Za-z0-9_]{0,11}$ ]] || die "prefix '$1': 1-12 letters, digits or _, starting with a letter"
}

ns_exists() { [[ -e /run/netns/$1 ]]; }

# Every namespace of a run: its hosts, then the bridge's.
run_namespaces() {
  local prefix=$1 ns
  for ns in /run/netns/"$prefix"[0-9] /run/netns/"$prefix"br; do
    [[ -e $ns ]] && echo "${ns##*/}"
  done
  return 0
}

# Processes still inside a run's namespaces (daemons started with exec):
# they would keep a namespace, its veth and its bridge port alive after
# `ip netns del`.
run_pids() {
  local ns
  for ns in $(run_namespaces "$1"); do ip netns pids "$ns" 2>/dev/null || true; done
}

down_prefix() {
  local prefix=$1 ns pids i
  pids=$(run_pids "$prefix")
  if [[ -n $pids ]]; then
    kill -TERM $pids 2>/dev/null || true
    for ((i = 0; i < 50; ++i)); do  # up to 5 s for them to stop
      pids=$(run_pids "$prefix")
      [[ -z $pids ]] && break
      sleep 0.1
    done
    [[ -n $pids ]] && kill -KILL $pids 2>/dev/null || true
  fi
  # Deleting a namespace deletes its veth ends and with them their peers.
  for ns in $(run_namespaces "$prefix"); do
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -f "$STATE_DIR/$prefix"
}

shape() {
  local ns=$1 delay=$2 rate=$3
  [[ -z $delay && -z $rate ]] && return 0
  local netem=(netem)
  [[ -n $delay ]] && netem+=(delay "$delay")
  [[ -n $rate ]] && netem+=(rate "$rate")
  if tc -n "$ns" qdisc add dev eth0 root "${netem[@]}" 2>/dev/null; then
    return 0
  fi
  [[ -n $delay ]] && die "--delay needs the kernel's netem qdisc (sch_netem), which this kernel lacks"
  # tbf's bucket: at least one MTU, and about a millisecond at the rate.
  tc -n "$ns" qdisc add dev eth0 root tbf rate "$rate" burst 128kb latency 50ms ||
    die "--rate $rate: neither netem nor tbf accepted it"
}

cmd_up() {
  local n=${1:-}
  shift || true
  [[ $n =~ ^[2-4]$ ]] || die "up N: N must be 2, 3 or 4 (got '${n}')"
  local prefix="snk$$" subnet=${NETNS_TESTBED_SUBNET:-10.77.0} delay="" rate="" owner=$PPID
  while (($#)); do
    case $1 in
      --delay) delay=${2:?--delay needs a value}; shift 2 ;;
      --rate) rate=${2:?--rate needs a value}; shift 2 ;;
      --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
      --subnet) subnet=${2:?--subnet needs a value}; shift 2 ;;
      --owner) owner=${2:?--owner needs a value}; shift 2 ;;
      *) die "up: unknown option '$1'" ;;
    esac
  done
  check_prefix "$prefix"
  [[ $subnet =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "--subnet '$subnet': the first three octets, e.g. 10.77.0"
  [[ $owner =~ ^[0-9]+$ ]] || die "--owner '$owner' is not a PID"
  [[ -z $(run_namespaces "$prefix") ]] || die "prefix $prefix is in use (netns_testbed.sh down --prefix $prefix)"

  # From here on, a failed step removes everything this run made.
  trap 'down_prefix "$prefix"' EXIT
  mkdir -p "$STATE_DIR"
  echo "$owner" >"$STATE_DIR/$prefix"
  local br="${prefix}br" i ns
  ip netns add "$br"
  ip -n "$br" link add br0 type bridge
  ip -n "$br" link set br0 up
  for ((i = 0; i < n; ++i)); do
    ns="$prefix$i"
    ip netns add "$ns"
    ip -n "$br" link add "h$i" type veth peer name eth0 netns "$ns"
    ip -n "$br" link set "h$i" master br0
    ip -n "$br" link set "h$i" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    shape "$ns" "$delay" "$rate"
  done
  trap - EXIT
  echo "netns_testbed: up prefix=$prefix hosts=$n subnet=$subnet.0/24 delay=${delay:-none} rate=${rate:-none}"
}

cmd_down() {
  local prefix=${NETNS_TESTBED_PREFIX:-} stale=0
  while (($#)); do
    case $1 in
      --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
      --all-stale) stale=1; shift ;;
      *) die "down: unknown option '$1'" ;;
    esac
  done
  if ((stale)); then
    local f owner
    for f in "$STATE_DIR"/*; do
      [[ -f $f ]] || continue
      owner=$(<"$f")
      if ! kill -0 "$owner" 2>/dev/null; then
        echo "netns_testbed: removing ${f##*/} (owner $owner is gone)"
        down_prefix "${f##*/}"
      fi
    done
    return 0
  fi
  check_prefix "$prefix"
  down_prefix "$prefix"
}

cmd_status() {
  local prefix=${NETNS_TESTBED_PREFIX:-}
  [[ ${1:-} == --prefix ]] && prefix=${2:?--prefix needs a value}
  local prefixes=()
  if [[ -n $prefix ]]; then
    check_prefix "$prefix"
    prefixes=("$prefix")
  else
    local f
    for f in "$STATE_DIR"/*; do [[ -f $f ]] && prefixes+=("${f##*/}"); done
  fi
  local p ns owner
  for p in "${prefixes[@]}"; do
    owner=$(cat "$STATE_DIR/$p" 2>/dev/null || echo "?")
    echo "run $p (owner $owner$(kill -0 "$owner" 2>/dev/null || echo ", gone"))"
    for ns in $(run_namespaces "$p"); do
      [[ $ns == "${p}br" ]] && continue
      echo "  $ns $(ip -n "$ns" -4 -o addr show dev eth0 | awk '{print $4}')" \
        "$(ip -n "$ns" -o link show dev eth0 | grep -o 'state [A-Z]*')" \
        "qdisc: $(tc -n "$ns" qdisc show dev eth0 | head -n1 | cut -d' ' -f2-)"
    done
  done
}

# Parses "I [--prefix NAME]" for addr and exec; sets host_ns and host_rest.
host_args() {
  local i=${1:-}
  shift || true
  local prefix=${NETNS_TESTBED_PREFIX:-}
  if [[ ${1:-} == --prefix ]]; then
    prefix=${2:?--prefix needs a value}
    shift 2
  fi
  [[ $i =~ ^[0-9]$ ]] || die "host index '$i' is not 0-9"
  check_prefix "$prefix"
  host_ns="$prefix$i"
  ns_exists "$host_ns" || die "no namespace $host_ns (is the test bed up?)"
  host_rest=("$@")
}

main() {
  local cmd=${1:-}
  shift || true
  case $cmd in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status "$@" ;;
    addr)
      host_args "$@"
      ip -n "$host_ns" -4 -o addr show dev eth0 | awk '{split($4, a, "/"); print a[1]}'
      ;;
    exec)
      host_args "$@"
      ((${#host_rest[@]})) || die "exec I: no command"
      exec ip netns exec "$host_ns" "${host_rest[@]}"
      ;;
    *) usage ;;
  esac
}

main "$@"
