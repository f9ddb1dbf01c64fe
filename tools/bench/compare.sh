#!/usr/bin/env bash
# Runs the same collective sweeps on hccl-rs (one process per rank, shared
# memory) and on Open MPI (ob1 + vader, Debian's openmpi-bin) in the same
# run, and prints hccl-rs / Open MPI ratios:
#   latency ratio  = hccl time / MPI time at the smallest size   (< 1: hccl faster)
#   bandwidth ratio = hccl bus bw / MPI bus bw at the largest size (> 1: hccl faster)
# plus single-thread memcpy bandwidth as a machine baseline.
#
#   bash tools/bench/compare.sh            # p = 2 4 8, every collective
#   OPS="all_reduce" PS="2" bash tools/bench/compare.sh
#   ITERS (bandwidth runs, default 20), LAT_ITERS (latency runs, 2000), WARMUP (5)
#   LAT_ONLY=1 skips the bandwidth runs (their columns print as -)
#   PLOT=out.svg also sweeps MIN..MAX (x PLOT_FACTOR, default 4; ITERS
#     iterations per size) on both libraries and draws them on one chart
#     with hccl-plot: out.svg for one op and one p, else out-OP-pP.svg per
#     pair. Open MPI's table is converted to hccl-test's JSON rows (bytes,
#     time_us, busbw_gbps, p50_us, p99_us, ...; algorithm "Open MPI"); both
#     runs' rows stay in target/bench/plot-OP-pP-{hccl,mpi}.json.
set -euo pipefail
cd "$(dirname "$0")/../.."

OPS=${OPS:-"all_reduce all_gather reduce_scatter alltoall broadcast reduce scatter"}
PS=${PS:-"2 4 8"}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
LAT_ITERS=${LAT_ITERS:-2000}
LAT_ONLY=${LAT_ONLY:-0}
PLOT=${PLOT:-}
PLOT_FACTOR=${PLOT_FACTOR:-4}

if ! command -v mpicc >/dev/null; then
  echo "compare.sh: needs Open MPI: apt-get install -y openmpi-bin libopenmpi-dev" >&2
  exit 1
fi
mkdir -p target/bench
mpicc -O2 -Wall -Werror -o target/bench/mpi_bench tools/bench/mpi_bench.c
cargo build --release -q -p hccl-tools
HCCL=${HCCL:-target/release/hccl-test}   # another build can be compared: HCCL=path/to/hccl-test
CORES=$(nproc)

# hccl-test's (and mpi_bench's) table on stdin -> hccl-test --format json
# rows: table_json OP P ALGORITHM
table_json() {
  awk -F'|' -v op="$1" -v p="$2" -v algo="$3" 'NR > 2 && $1 ~ /[0-9]/ {
    for (i = 1; i <= NF; i++) gsub(/ /, "", $i)
    printf "{\"op\":\"%s\",\"ranks\":%d,\"bytes\":%s,\"count\":%.0f,\"dtype\":\"fp32\",", op, p, $1, $1 / 4
    printf "\"time_us\":%s,\"algbw_gbps\":%s,\"busbw_gbps\":%s,\"check\":\"%s\",\"algorithm\":\"%s\",", $2, $3, $5, $4, algo
    printf "\"p50_us\":%s,\"p99_us\":%s,\"max_us\":%s}\n", (NF >= 8) ? $6 : 0, (NF >= 8) ? $7 : 0, (NF >= 8) ? $8 : 0
  }'
}
NPAIRS=$(( $(echo $OPS | wc -w) * $(echo $PS | wc -w) ))

row_first() { awk -F'|' 'NR==3 {gsub(/ /,"",$2); print $2}'; }
row_last_bus() { awk -F'|' 'NR>2 && $1 ~ /[0-9]/ {v=$5} END {gsub(/ /,"",v); print v}'; }

echo "machine: $(lscpu | sed -n 's/Model name: *//p') ($CORES cores), $(date -u +%Y-%m-%dT%H:%MZ)"
$HCCL all_reduce -p 1 -b 8 -e 64M -f 2 -n 1 -w 0 -c 0 --baseline | tail -1 | sed "s/;.*//"
printf "%-15s %3s %12s %12s %9s %12s %12s %9s\n" op p "hccl_us" "mpi_us" "lat_x" "hccl_GB/s" "mpi_GB/s" "bw_x"
for p in $PS; do
  MPI_FLAGS=(--allow-run-as-root --oversubscribe --mca pml ob1 --mca btl self,vader)
  if [ "$p" -gt "$CORES" ]; then MPI_FLAGS+=(--mca mpi_yield_when_idle 1); fi
  MAX=64M; MAXB=67108864
  if [ "$p" -gt 2 ]; then MAX=16M; MAXB=16777216; fi
  for op in $OPS; do
    MIN=8
    case $op in all_gather|reduce_scatter|scatter|alltoall) MIN=$((4 * p));; esac
    # latency at MIN (many iterations), bandwidth at exactly MAX (same
    # sizes for both libraries)
    H=$($HCCL "$op" -p "$p" -b "$MIN" -e "$MIN" -n "$LAT_ITERS" -w "$WARMUP" -c 0 --transport process)
    M=$(mpirun "${MPI_FLAGS[@]}" -np "$p" target/bench/mpi_bench "$op" "$MIN" "$MIN" 1 "$LAT_ITERS" "$WARMUP")
    ht=$(echo "$H" | row_first); mt=$(echo "$M" | row_first)
    hb=-; mb=-
    if [ "$LAT_ONLY" != 1 ]; then
      H=$($HCCL "$op" -p "$p" -b "$MAX" -e "$MAX" -n "$ITERS" -w "$WARMUP" -c 0 --transport process)
      M=$(mpirun "${MPI_FLAGS[@]}" -np "$p" target/bench/mpi_bench "$op" "$MAXB" "$MAXB" 1 "$ITERS" "$WARMUP")
      hb=$(echo "$H" | row_last_bus); mb=$(echo "$M" | row_last_bus)
    fi
    printf "%-15s %3s %12s %12s %9s %12s %12s %9s\n" "$op" "$p" "$ht" "$mt" \
      "$(awk -v a="$ht" -v b="$mt" 'BEGIN{printf "%.2f", (b>0)?a/b:0}')" "$hb" "$mb" \
      "$(awk -v a="$hb" -v b="$mb" 'BEGIN{if (a=="-") print "-"; else printf "%.2f", (b>0)?a/b:0}')"
    if [ -n "$PLOT" ]; then
      out=$PLOT
      if [ "$NPAIRS" -gt 1 ]; then out="${PLOT%.svg}-$op-p$p.svg"; fi
      js=target/bench/plot-$op-p$p
      $HCCL "$op" -p "$p" -b "$MIN" -e "$MAX" -f "$PLOT_FACTOR" -n "$ITERS" -w "$WARMUP" -c 0 \
        --transport process --format json >"$js-hccl.json"
      mpirun "${MPI_FLAGS[@]}" -np "$p" target/bench/mpi_bench "$op" "$MIN" "$MAXB" "$PLOT_FACTOR" "$ITERS" "$WARMUP" 1 |
        table_json "$op" "$p" mpi_bench >"$js-mpi.json"
      target/release/hccl-plot -o "$out" --label hccl-rs --label "Open MPI" \
        --title "$op, p=$p, fp32: hccl-rs (process ranks) vs Open MPI (ob1 + vader), $(date -u +%Y-%m-%d)" \
        "$js-hccl.json" "$js-mpi.json"
      echo "plot: $out"
    fi
  done
done
