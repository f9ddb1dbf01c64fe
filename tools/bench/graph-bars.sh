#!/usr/bin/env bash
# The graph-mode bars of issue 17, measured in one run with hccl-test
# (ranks as processes on this host, fp32 sum), REPS interleaved repetitions
# so a noisy minute hits both sides alike; medians printed with the
# ratios:
#
#   1. p=2 8 B AllReduce: a captured graph replayed (--graph -z 1) against
#      op-base (average time per op; p50 of single ops also shown);
#   2. 64 AllReduces of 16 KiB on 64 buffers per loop op (--bucket 64):
#      captured and replayed (fused, --graph -z 1) against 64 op-base
#      calls, at p=2 and p=4; then the same with the 64 buffers as slices
#      of one allocation (--bucket-flat), which the fused op reads and
#      writes in place;
#   3. p=2 64 MiB AllReduce, AllGather, AllToAll on registered memory
#      (-z 1) against op-base, bus bandwidth, and the registered
#      AllReduce's bus bandwidth against the single-thread memcpy of the
#      same run (--baseline).
#
#   bash tools/bench/graph-bars.sh            # REPS=3
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-3}
cargo build --release -q -p hccl-tools
HT=target/release/hccl-test
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"

# one JSON row's field: row FIELD < output
field() { python3 -c "import json,sys
rows=[json.loads(l) for l in sys.stdin if l.startswith('{')]
print([r for r in rows if '$1' in r][-1]['$1'])"; }
median() { python3 -c "import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }

run() { "$HT" "$@" --transport process --format json -c 1 2>/dev/null; }

declare -A v
for rep in $(seq "$REPS"); do
  for mode in op graph; do
    extra=(); [ $mode = graph ] && extra=(--graph -z 1)
    out=$(run all_reduce -p 2 -b 8 -e 8 -n 20000 -w 1000 "${extra[@]}")
    v[lat_$mode]+="$(field time_us <<<"$out") "
    v[lat50_$mode]+="$(field p50_us <<<"$out") "
    for p in 2 4; do
      out=$(run all_reduce -p $p -b 16K -e 16K -n 200 -w 20 --bucket 64 "${extra[@]}")
      v[bucket${p}_$mode]+="$(field time_us <<<"$out") "
      out=$(run all_reduce -p $p -b 16K -e 16K -n 200 -w 20 --bucket 64 --bucket-flat "${extra[@]}")
      v[flat${p}_$mode]+="$(field time_us <<<"$out") "
    done
  done
  for op in all_reduce all_gather alltoall; do
    for z in 0 1; do
      b=64M; [ $op = all_gather ] && b=32M
      out=$(run $op -p 2 -b $b -e $b -n 10 -w 3 -z $z --baseline)
      v[${op}_z$z]+="$(field busbw_gbps <<<"$out") "
      if [ $op = all_reduce ] && [ $z = 1 ]; then v[memcpy]+="$(field memcpy_gbps <<<"$out") "; fi
    done
  done
done

m() { median ${v[$1]}; }
ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
echo
echo "1. p=2 8 B AllReduce, µs per op (median of $REPS): op-base $(m lat_op) (p50 $(m lat50_op)), graph replay $(m lat_graph) (p50 $(m lat50_graph))"
echo "   graph / op-base: $(ratio "$(m lat_graph)" "$(m lat_op)") (bar <= 0.6)"
for p in 2 4; do
  echo "2. p=$p 64 x 16 KiB AllReduce, µs per AllReduce: op-base $(m bucket${p}_op), graph (fused) $(m bucket${p}_graph); speed-up $(ratio "$(m bucket${p}_op)" "$(m bucket${p}_graph)")x (bar >= 4)"
  echo "   the same on one flat buffer (--bucket-flat: nothing copied): op-base $(m flat${p}_op), graph (fused) $(m flat${p}_graph); speed-up $(ratio "$(m flat${p}_op)" "$(m flat${p}_graph)")x"
done
for op in all_reduce all_gather alltoall; do
  echo "3. p=2 $op 64 MiB bus GB/s: op-base $(m ${op}_z0), registered $(m ${op}_z1); registered / op-base $(ratio "$(m ${op}_z1)" "$(m ${op}_z0)") (bar >= 1.2)"
done
if [ -n "${v[memcpy]:-}" ]; then
  echo "   registered AllReduce / single-thread memcpy $(m memcpy) GB/s: $(ratio "$(m all_reduce_z1)" "$(m memcpy)") (bar >= 0.65)"
fi
echo "raw:"; for k in "${!v[@]}"; do echo "  $k: ${v[$k]}"; done | sort
