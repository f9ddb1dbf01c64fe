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
set -euo pipefail
cd "$(dirname "$0")/../.."

OPS=${OPS:-"all_reduce all_gather reduce_scatter alltoall broadcast reduce scatter"}
PS=${PS:-"2 4 8"}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
LAT_ITERS=${LAT_ITERS:-2000}
LAT_ONLY=${LAT_ONLY:-0}

if ! command -v mpicc >/dev/null; then
  echo "compare.sh: needs Open MPI: apt-get install -y openmpi-bin libopenmpi-dev" >&2
  exit 1
fi
mkdir -p target/bench
mpicc -O2 -Wall -Werror -o target/bench/mpi_bench tools/bench/mpi_bench.c
cargo build --release -q -p hccl-tools
HCCL=${HCCL:-target/release/hccl-test}   # another build can be compared: HCCL=path/to/hccl-test
CORES=$(nproc)

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
  done
done
