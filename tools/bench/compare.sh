#!/usr/bin/env bash
# Runs the same collective sweeps on hccl-rs (one process per rank, shared
# memory), on Open MPI (ob1 + vader, Debian's openmpi-bin) and on MPICH
# (Debian's mpich, its own mpiexec; shared memory) in the same run, and
# prints hccl-rs's ratio against the better MPI of each cell:
#   latency ratio  = hccl time / min(MPI times) at the smallest size     (< 1: hccl faster)
#   bandwidth ratio = hccl bus bw / max(MPI bus bws) at the largest size (> 1: hccl faster)
# (the "best" column names which MPI that was), plus single-thread memcpy
# bandwidth as a machine baseline. Every library times ops on buffers
# filled with per-rank data before timing (mpi_bench.c checks that its
# pages are resident). Without MPICH installed (apt-get install -y mpich
# libmpich-dev) its columns print as - and Open MPI is the baseline.
#
#   bash tools/bench/compare.sh            # p = 2 4 8, every collective
#   OPS="all_reduce" PS="2" bash tools/bench/compare.sh
#   ITERS (bandwidth runs, default 20), LAT_ITERS (latency runs, 2000), WARMUP (5)
#   LAT_ONLY=1 skips the bandwidth runs (their columns print as -)
#   MPIS="openmpi mpich" (default: those installed)
#   PLOT=out.svg also sweeps MIN..MAX (x PLOT_FACTOR, default 4; ITERS
#     iterations per size) on hccl-rs and Open MPI and draws them on one
#     chart with hccl-plot: out.svg for one op and one p, else
#     out-OP-pP.svg per pair. Open MPI's table is converted to hccl-test's
#     JSON rows (bytes, time_us, busbw_gbps, p50_us, p99_us, ...; algorithm
#     "Open MPI"); both runs' rows stay in target/bench/plot-OP-pP-{hccl,mpi}.json.
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

# the MPIs: each built with its own compiler wrapper, run by its own launcher
# shellcheck source=tools/bench/mpis.sh
. tools/bench/mpis.sh
build_mpi_bench compare.sh
# mpi_run MPI P ARGS...: mpi_bench under that MPI's launcher, P ranks on
# this host; its stderr (each rank's buffer residency check) goes to
# target/bench/mpi-stderr.log, summed up at the end
: >target/bench/mpi-stderr.log
mpi_run() {
  local m=$1 p=$2
  shift 2
  case $m in
    openmpi)
      local f=(--allow-run-as-root --oversubscribe --mca pml ob1 --mca btl self,vader)
      if [ "$p" -gt "$CORES" ]; then f+=(--mca mpi_yield_when_idle 1); fi
      mpirun.openmpi "${f[@]}" -np "$p" "target/bench/mpi_bench.$m" "$@" 2>>target/bench/mpi-stderr.log
      ;;
    mpich)
      # Hydra on this host; ranks on one host use shared memory
      mpiexec.mpich -launcher fork -n "$p" "target/bench/mpi_bench.$m" "$@" 2>>target/bench/mpi-stderr.log
      ;;
  esac
}
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
for m in $MPIS; do
  case $m in
    openmpi) echo "Open MPI $(mpirun.openmpi --version 2>/dev/null | sed -n '1s/.* //p') (ob1 + vader)" ;;
    mpich) echo "MPICH $(mpichversion 2>/dev/null | sed -n 's/MPICH Version: *//p') ($(mpichversion 2>/dev/null | sed -n 's/MPICH Device: *//p'))" ;;
  esac
done
$HCCL all_reduce -p 1 -b 8 -e 64M -f 2 -n 1 -w 0 -c 0 --baseline | tail -1 | sed "s/;.*//"
printf "%-15s %3s %10s %10s %10s %7s %8s %10s %10s %10s %7s %8s\n" op p \
  "hccl_us" "ompi_us" "mpich_us" "lat_x" best "hccl_GB/s" "ompi_GB/s" "mpich_GB/s" "bw_x" best
# best_of KIND A B: the better of two figures (- when missing) and its name
best_of() {
  awk -v k="$1" -v a="$2" -v b="$3" 'BEGIN {
    if (a == "-" && b == "-") { print "- -"; exit }
    if (b == "-" || (a != "-" && ((k == "time" && a + 0 <= b + 0) || (k == "bw" && a + 0 >= b + 0)))) print a, "ompi"
    else print b, "mpich" }'
}
for p in $PS; do
  MAX=64M; MAXB=67108864
  if [ "$p" -gt 2 ]; then MAX=16M; MAXB=16777216; fi
  for op in $OPS; do
    MIN=8
    case $op in all_gather|reduce_scatter|scatter|alltoall) MIN=$((4 * p));; esac
    # latency at MIN (many iterations), bandwidth at exactly MAX (same
    # sizes for every library)
    ht=$($HCCL "$op" -p "$p" -b "$MIN" -e "$MIN" -n "$LAT_ITERS" -w "$WARMUP" -c 0 --transport process | row_first)
    declare -A mt=([openmpi]=- [mpich]=-) mb=([openmpi]=- [mpich]=-)
    for m in $MPIS; do
      mt[$m]=$(mpi_run "$m" "$p" "$op" "$MIN" "$MIN" 1 "$LAT_ITERS" "$WARMUP" | row_first)
    done
    hb=-
    if [ "$LAT_ONLY" != 1 ]; then
      hb=$($HCCL "$op" -p "$p" -b "$MAX" -e "$MAX" -n "$ITERS" -w "$WARMUP" -c 0 --transport process | row_last_bus)
      for m in $MPIS; do
        mb[$m]=$(mpi_run "$m" "$p" "$op" "$MAXB" "$MAXB" 1 "$ITERS" "$WARMUP" | row_last_bus)
      done
    fi
    read -r bt btn <<<"$(best_of time "${mt[openmpi]}" "${mt[mpich]}")"
    read -r bb bbn <<<"$(best_of bw "${mb[openmpi]}" "${mb[mpich]}")"
    printf "%-15s %3s %10s %10s %10s %7s %8s %10s %10s %10s %7s %8s\n" "$op" "$p" \
      "$ht" "${mt[openmpi]}" "${mt[mpich]}" \
      "$(awk -v a="$ht" -v b="$bt" 'BEGIN{if (b == "-") print "-"; else printf "%.2f", (b>0)?a/b:0}')" "$btn" \
      "$hb" "${mb[openmpi]}" "${mb[mpich]}" \
      "$(awk -v a="$hb" -v b="$bb" 'BEGIN{if (a == "-" || b == "-") print "-"; else printf "%.2f", (b>0)?a/b:0}')" "$bbn"
    if [ -n "$PLOT" ] && [[ " $MPIS " == *" openmpi "* ]]; then
      out=$PLOT
      if [ "$NPAIRS" -gt 1 ]; then out="${PLOT%.svg}-$op-p$p.svg"; fi
      js=target/bench/plot-$op-p$p
      $HCCL "$op" -p "$p" -b "$MIN" -e "$MAX" -f "$PLOT_FACTOR" -n "$ITERS" -w "$WARMUP" -c 0 \
        --transport process --format json >"$js-hccl.json"
      mpi_run openmpi "$p" "$op" "$MIN" "$MAXB" "$PLOT_FACTOR" "$ITERS" "$WARMUP" 1 |
        table_json "$op" "$p" mpi_bench >"$js-mpi.json"
      target/release/hccl-plot -o "$out" --label hccl-rs --label "Open MPI" \
        --title "$op, p=$p, fp32: hccl-rs (process ranks) vs Open MPI (ob1 + vader), $(date -u +%Y-%m-%d)" \
        "$js-hccl.json" "$js-mpi.json"
      echo "plot: $out"
    fi
  done
done
echo "mpi_bench residency checks: $(grep -c 'every page resident' target/bench/mpi-stderr.log) rank runs on filled, resident buffers; $(grep -vc 'every page resident' target/bench/mpi-stderr.log) other stderr lines (target/bench/mpi-stderr.log)"
