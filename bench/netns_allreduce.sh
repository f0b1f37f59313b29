#!/usr/bin/env bash
# AllReduce across two "hosts" (network namespaces, scripts/netns_testbed.sh)
# with two sinkd daemons each: data-parallel MLP training, its gradients cut
# into AllReduce buckets of several sizes (comm_fusion "size"), profiled;
# prints each bucket's mean AllReduce time on rank 0 per bucket size.
#
#   sudo bench/netns_allreduce.sh [BUILD_DIR] [--delay 1ms] [--rate 1gbit] [--sizes "1 2 4 8"] [--steps 64]
#
# --sizes are comm_fusion sizes in MindSpore's MB (262144 bytes): 1 = 256 KiB
# buckets; the MLP's gradients are 2.1 MB, so 8 is one bucket. The cross-host
# link gets --rate and --delay (netem; where the kernel lacks sch_netem,
# the delay is dropped with a warning and tbf gives the rate). Variables the
# daemons read pass through (e.g. SINKRT_HIERARCHICAL_ALLREDUCE=0|1 to
# compare the two-level AllReduce with a flat ring).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
if [[ $# -gt 0 && $1 != --* ]]; then build=$(cd "$1" && pwd); shift; fi
delay=1ms rate=1gbit sizes="1 2 4 8" steps=64
while (($#)); do
  case $1 in
    --delay) delay=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "netns_allreduce: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "netns_allreduce: needs root (network namespaces)" >&2; exit 2; }

bed=$root/scripts/netns_testbed.sh
prefix=nab$$
work=$(mktemp -d)
trap '"$bed" down --prefix "$prefix" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

shaping=(--rate "$rate")
[[ -n $delay ]] && shaping+=(--delay "$delay")
if ! "$bed" up 2 --prefix "$prefix" "${shaping[@]}" 2>"$work/up.err"; then
  if grep -q "sch_netem" "$work/up.err"; then
    echo "netns_allreduce: WARNING: no netem in this kernel: links get rate $rate but no added delay" >&2
    delay=""
    "$bed" up 2 --prefix "$prefix" --rate "$rate"
  else
    cat "$work/up.err" >&2
    exit 1
  fi
fi

token=bench$$
cat >"$work/hosts.json" <<EOF
{"version": "1.0", "server_count": "2", "status": "completed", "server_list": [
  {"server_id": "10.77.0.1", "device": [{"device_id": "0", "rank_id": "0"}, {"device_id": "1", "rank_id": "1"}]},
  {"server_id": "10.77.0.2", "device": [{"device_id": "0", "rank_id": "2"}, {"device_id": "1", "rank_id": "3"}]}]}
EOF
for h in 0 1; do
  for d in 0 1; do
    "$bed" exec "$h" --prefix "$prefix" "$build/device/sinkd" --listen "10.77.0.$((h + 1)):$((7100 + d))" \
      --rank $((h * 2 + d)) --token "$token" --threads 1 --quiet >"$work/sinkd$h$d.out" &
  done
done
for h in 0 1; do  # each daemon prints its ready line once it listens
  for d in 0 1; do
    for ((i = 0; i < 300; ++i)); do grep -q listening "$work/sinkd$h$d.out" 2>/dev/null && break; sleep 0.1; done
    grep -q listening "$work/sinkd$h$d.out" || { echo "netns_allreduce: sinkd $h$d did not start" >&2; exit 1; }
  done
done

echo "# 2 hosts x 2 sinkd, rate ${rate:-none}, delay ${delay:-none}; uptime:$(uptime | sed 's/.*load/ load/')"
echo "# SINKRT_HIERARCHICAL_ALLREDUCE=${SINKRT_HIERARCHICAL_ALLREDUCE:-unset}"
printf "%8s %12s %8s %10s %10s\n" "size_mb" "bucket_bytes" "buckets" "mean_ms" "step_ms"
for s in $sizes; do
  prof=$work/prof$s
  "$bed" exec 0 --prefix "$prefix" "$build/tools/sinkrun" train --model mlp --data synthetic:$((steps * 64)) \
    --batch 16 --epochs 2 --parallel data_parallel --rank-table "$work/hosts.json" --token "$token" \
    --comm-fusion "{\"allreduce\": {\"mode\": \"size\", \"config\": $s}}" --profile "$prof" >"$work/train$s.out"
  "$build/tools/sinkprof" "$prof" --json >"$work/prof$s.json"
  python3 - "$work/prof$s.json" "$s" <<'EOF'
import json, sys
summary = json.load(open(sys.argv[1]))
buckets = [b for b in summary.get("buckets", []) if b["rank"] == 0]
step = next((r["step_ms"] for r in summary.get("ranks", []) if r["rank"] == 0), float("nan"))
for b in buckets:
    print("%8s %12d %8d %10.3f %10.3f" % (sys.argv[2], b["bytes"], len(buckets), b["mean_ms"], step))
EOF
done
