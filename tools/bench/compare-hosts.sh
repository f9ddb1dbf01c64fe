#!/usr/bin/env bash
# hccl-rs against Open MPI across hosts that are network namespaces (TCP
# over veths on a bridge between hosts, shared memory inside one), in the
# same run, interleaved:
#
#   lat   2 hosts x 1 rank, AllReduce 8 B: average, p50, p99 (µs)
#   bw64  2 hosts x 1 rank, AllReduce 64 MiB: bus bandwidth (GB/s)
#   bw16  2 hosts x 2 ranks, AllReduce 16 MiB: bus bandwidth (GB/s)
#
# hccl-rs runs as `hccl-test --netns`, Open MPI as tools/bench/mpi_bench
# under tools/netns-mpirun.sh (ob1, btl self,vader,tcp: vader inside a
# host, tcp between). Each host gets its own CPUs when there are enough
# (both launchers give each host a slice of the machine's). Every case runs
# RUNS times, the two libraries alternating; printed per case: each
# library's median over the runs with the range (min-max), and the ratio of
# the medians: time ratio = hccl-rs / MPI (< 1: hccl-rs faster), bandwidth
# ratio = hccl-rs / MPI (> 1: hccl-rs faster).
#
#   bash tools/bench/compare-hosts.sh
#   RUNS=3          interleaved runs per case and library
#   RATE=1gbit      limit every host's link, both directions (tc htb); default none
#   LAT_ITERS=2000  iterations of the latency case; BW_ITERS=10 of the bandwidth cases
#   WARMUP=5
#   SWEEP=1         also one interleaved sweep 8 B .. 64 MiB (x4) at 2 hosts x 1 rank
#   CASES="lat bw64 bw16"
#
# Needs root, iproute2, Open MPI (openmpi-bin, libopenmpi-dev). Do not run
# it beside another benchmark: the figures are only as quiet as the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."

RUNS=${RUNS:-3}
RATE=${RATE:-}
LAT_ITERS=${LAT_ITERS:-2000}
BW_ITERS=${BW_ITERS:-10}
WARMUP=${WARMUP:-5}
SWEEP=${SWEEP:-0}
CASES=${CASES:-"lat bw64 bw16"}

if ! command -v mpicc >/dev/null; then
    echo "compare-hosts.sh: needs Open MPI: apt-get install -y openmpi-bin libopenmpi-dev" >&2
    exit 1
fi
[ "$(id -u)" -eq 0 ] || { echo "compare-hosts.sh: network namespaces need root" >&2; exit 1; }
mkdir -p target/bench
mpicc -O2 -Wall -Werror -o target/bench/mpi_bench tools/bench/mpi_bench.c
cargo build --release -q -p hccl-tools
HCCL=${HCCL:-${CARGO_TARGET_DIR:-target}/release/hccl-test}

rate_h=() rate_m=()
if [ -n "$RATE" ]; then rate_h=(--netns-rate "$RATE"); rate_m=(--rate "$RATE"); fi

# hccl-rs: hosts ranks minbytes maxbytes iters factor -> the rows (hccl-test's columns)
hccl() {
    "$HCCL" all_reduce -p "$2" --netns "$1" "${rate_h[@]}" -b "$3" -e "$4" -f "$6" -n "$5" \
        -w "$WARMUP" -c 0 --transport process 2>/dev/null | awk -F'|' 'NR > 2 && $1 ~ /[0-9]/'
}
# Open MPI: same arguments, same columns (mpi_bench's spread pass on)
mpi() {
    tools/netns-mpirun.sh --hosts "$1" -np "$2" "${rate_m[@]}" -- \
        --mca pml ob1 --mca btl self,vader,tcp \
        target/bench/mpi_bench all_reduce "$3" "$4" "$6" "$5" "$WARMUP" 1 2>/dev/null |
        awk -F'|' 'NR > 2 && $1 ~ /[0-9]/'
}
col() { awk -F'|' -v c="$1" '{gsub(/ /, "", $c); print $c}'; }
# median and range of the numbers on stdin: "median (min-max)"
stats() {
    sort -g | awk '{v[NR] = $1} END {
        if (NR == 0) { print "-"; exit }
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%s (%s-%s)\n", f(m), f(v[1]), f(v[NR]) }
        function f(x) { return sprintf(x >= 100 ? "%.0f" : x >= 1 ? "%.2f" : "%.3g", x) }'
}
median() { sort -g | awk '{v[NR] = $1} END { if (NR == 0) print 0; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

echo "machine: $(lscpu | sed -n 's/Model name: *//p') ($(nproc) cores), $(date -u +%Y-%m-%dT%H:%MZ)"
echo "hosts: network namespaces on one bridge, link rate ${RATE:-unlimited}; $RUNS interleaved runs per case"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for case in $CASES; do
    case $case in
        lat) hosts=2 p=2 b=8 n=$LAT_ITERS ;;
        bw64) hosts=2 p=2 b=67108864 n=$BW_ITERS ;;
        bw16) hosts=2 p=4 b=16777216 n=$BW_ITERS ;;
        *) echo "unknown case $case" >&2; exit 1 ;;
    esac
    : >"$tmp/h" && : >"$tmp/m"
    for ((i = 0; i < RUNS; i++)); do
        hccl $hosts $p $b $b $n 2 >>"$tmp/h"
        mpi $hosts $p $b $b $n 2 >>"$tmp/m"
    done
    [ -s "$tmp/h" ] && [ -s "$tmp/m" ] || { echo "$case: a run printed no row" >&2; exit 1; }
    echo
    if [ "$case" = lat ]; then
        echo "lat: AllReduce 8 B, 2 hosts x 1 rank, $n iterations (µs: median over runs (min-max))"
        printf "  %-6s %-24s %-24s %-24s\n" "" average p50 p99
        printf "  %-6s %-24s %-24s %-24s\n" hccl "$(col 2 <"$tmp/h" | stats)" "$(col 6 <"$tmp/h" | stats)" "$(col 7 <"$tmp/h" | stats)"
        printf "  %-6s %-24s %-24s %-24s\n" mpi "$(col 2 <"$tmp/m" | stats)" "$(col 6 <"$tmp/m" | stats)" "$(col 7 <"$tmp/m" | stats)"
        printf "  %-6s %-24s %-24s %-24s\n" "time ratio hccl/mpi" \
            "$(ratio "$(col 2 <"$tmp/h" | median)" "$(col 2 <"$tmp/m" | median)")" \
            "$(ratio "$(col 6 <"$tmp/h" | median)" "$(col 6 <"$tmp/m" | median)")" \
            "$(ratio "$(col 7 <"$tmp/h" | median)" "$(col 7 <"$tmp/m" | median)")"
    else
        echo "$case: AllReduce $b B, $hosts hosts x $((p / hosts)) rank(s), $n iterations (median over runs (min-max))"
        printf "  %-6s %-26s %-26s\n" "" "time (µs)" "bus bandwidth (GB/s)"
        printf "  %-6s %-26s %-26s\n" hccl "$(col 2 <"$tmp/h" | stats)" "$(col 5 <"$tmp/h" | stats)"
        printf "  %-6s %-26s %-26s\n" mpi "$(col 2 <"$tmp/m" | stats)" "$(col 5 <"$tmp/m" | stats)"
        echo "  time ratio hccl/mpi $(ratio "$(col 2 <"$tmp/h" | median)" "$(col 2 <"$tmp/m" | median)"), busbw ratio hccl/mpi $(ratio "$(col 5 <"$tmp/h" | median)" "$(col 5 <"$tmp/m" | median)")"
    fi
done

if [ "$SWEEP" = 1 ]; then
    echo
    echo "sweep: AllReduce, 2 hosts x 1 rank, one interleaved run, $BW_ITERS iterations per size"
    hccl 2 2 8 67108864 "$BW_ITERS" 4 >"$tmp/h"
    mpi 2 2 8 67108864 "$BW_ITERS" 4 >"$tmp/m"
    printf "  %10s %12s %12s %8s %12s %12s %8s\n" bytes hccl_us mpi_us time_x hccl_GB/s mpi_GB/s bw_x
    paste -d'\n' "$tmp/h" "$tmp/m" | awk -F'|' 'NR % 2 == 1 {b = $1; ht = $2; hb = $5; next}
        { gsub(/ /, "", b); printf "  %10s %12.2f %12.2f %8.2f %12.4f %12.4f %8.2f\n", b, ht, $2, ($2 > 0) ? ht / $2 : 0, hb, $5, ($5 > 0) ? hb / $5 : 0 }'
fi
