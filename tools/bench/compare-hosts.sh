#!/usr/bin/env bash
# hccl-rs against Open MPI and MPICH across hosts that are network
# namespaces (TCP over veths on a bridge between hosts, shared memory inside
# one), in the same run, interleaved:
#
#   lat   2 hosts x 1 rank, AllReduce 8 B: average, p50, p99 (µs)
#   bw64  2 hosts x 1 rank, AllReduce 64 MiB: bus bandwidth (GB/s)
#   bw16  2 hosts x 2 ranks, AllReduce 16 MiB: bus bandwidth (GB/s)
#
# hccl-rs runs as `hccl-test --netns`, the MPIs as tools/bench/mpi_bench
# (built by each MPI's own compiler wrapper) under tools/netns-mpirun.sh:
# Open MPI with ob1, btl self,vader,tcp (vader inside a host, tcp between),
# MPICH (`--mpi mpich`: hydra's mpiexec, UCX over TCP on the hosts'
# interface for every pair — UCX would take the namespaces for one machine
# and use shared memory between them — so in bw16 MPICH's pairs inside a
# host use TCP too, a handicap the output names). Each host gets its own
# CPUs when there are enough (the launchers give each host a slice of the
# machine's). Every case runs RUNS times, the libraries alternating;
# printed per case: each library's median over the runs with the range
# (min-max), and hccl-rs's ratio against the better MPI's median: time
# ratio = hccl-rs / MPI (< 1: hccl-rs faster), bandwidth ratio = hccl-rs /
# MPI (> 1: hccl-rs faster).
#
#   bash tools/bench/compare-hosts.sh
#   RUNS=3          interleaved runs per case and library
#   RATE=1gbit      limit every host's link, both directions (tc htb); default none
#   LAT_ITERS=2000  iterations of the latency case; BW_ITERS=10 of the bandwidth cases
#   WARMUP=5
#   SWEEP=1         also one interleaved sweep 8 B .. 64 MiB (x4) at 2 hosts x 1 rank
#   CASES="lat bw64 bw16"
#   MPIS="openmpi mpich"  (default: those installed)
#
# Needs root, iproute2, Open MPI (openmpi-bin, libopenmpi-dev) and/or MPICH
# (mpich, libmpich-dev). Do not run it beside another benchmark: the
# figures are only as quiet as the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."

RUNS=${RUNS:-3}
RATE=${RATE:-}
LAT_ITERS=${LAT_ITERS:-2000}
BW_ITERS=${BW_ITERS:-10}
WARMUP=${WARMUP:-5}
SWEEP=${SWEEP:-0}
CASES=${CASES:-"lat bw64 bw16"}

[ "$(id -u)" -eq 0 ] || { echo "compare-hosts.sh: network namespaces need root" >&2; exit 1; }
# shellcheck source=tools/bench/mpis.sh
. tools/bench/mpis.sh
build_mpi_bench compare-hosts.sh
cargo build --release -q -p hccl-tools
HCCL=${HCCL:-${CARGO_TARGET_DIR:-target}/release/hccl-test}

rate_h=() rate_m=()
if [ -n "$RATE" ]; then rate_h=(--netns-rate "$RATE"); rate_m=(--rate "$RATE"); fi

# hccl-rs: hosts ranks minbytes maxbytes iters factor -> the rows (hccl-test's columns)
hccl() {
    "$HCCL" all_reduce -p "$2" --netns "$1" "${rate_h[@]}" -b "$3" -e "$4" -f "$6" -n "$5" \
        -w "$WARMUP" -c 0 --transport process 2>/dev/null | awk -F'|' 'NR > 2 && $1 ~ /[0-9]/'
}
# an MPI: mpi MPI hosts ranks minbytes maxbytes iters factor, same
# columns (mpi_bench's spread pass on)
mpi() {
    local m=$1
    shift
    local args=()
    [ "$m" = openmpi ] && args=(--mca pml ob1 --mca btl self,vader,tcp)
    tools/netns-mpirun.sh --mpi "$m" --hosts "$1" -np "$2" "${rate_m[@]}" -- "${args[@]}" \
        "target/bench/mpi_bench.$m" all_reduce "$3" "$4" "$6" "$5" "$WARMUP" 1 2>/dev/null |
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
# best KIND COLUMN: the better MPI's median of column COLUMN (KIND time:
# the smallest, bw: the largest) and its name, over the MPIs' files
best() {
    local kind=$1 c=$2 m v out=""
    for m in $MPIS; do
        v=$(col "$c" <"$tmp/$m" | median)
        out="$out$v $m"$'\n'
    done
    if [ "$kind" = time ]; then printf '%s' "$out" | sort -g | head -n 1; else printf '%s' "$out" | sort -gr | head -n 1; fi
}
# vs KIND COLUMN: hccl-rs's ratio against the better MPI, "x.xx (name)"
vs() {
    local b
    read -r -a b <<<"$(best "$1" "$2")"
    echo "$(ratio "$(col "$2" <"$tmp/h" | median)" "${b[0]}") (${b[1]})"
}

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
    : >"$tmp/h"
    for m in $MPIS; do : >"$tmp/$m"; done
    for ((i = 0; i < RUNS; i++)); do
        hccl $hosts $p $b $b $n 2 >>"$tmp/h"
        for m in $MPIS; do
            mpi "$m" $hosts $p $b $b $n 2 >>"$tmp/$m"
        done
    done
    for f in h $MPIS; do
        [ -s "$tmp/$f" ] || { echo "$case: a run of ${f/#h/hccl-rs} printed no row" >&2; exit 1; }
    done
    echo
    if [ "$case" = lat ]; then
        echo "lat: AllReduce 8 B, 2 hosts x 1 rank, $n iterations (µs: median over runs (min-max))"
        printf "  %-8s %-24s %-24s %-24s\n" "" average p50 p99
        for f in h $MPIS; do
            printf "  %-8s %-24s %-24s %-24s\n" "${f/#h/hccl}" "$(col 2 <"$tmp/$f" | stats)" "$(col 6 <"$tmp/$f" | stats)" "$(col 7 <"$tmp/$f" | stats)"
        done
        printf "  %-8s %-24s %-24s %-24s\n" "hccl/best" "$(vs time 2)" "$(vs time 6)" "$(vs time 7)"
    else
        echo "$case: AllReduce $b B, $hosts hosts x $((p / hosts)) rank(s), $n iterations (median over runs (min-max))"
        printf "  %-8s %-26s %-26s\n" "" "time (µs)" "bus bandwidth (GB/s)"
        for f in h $MPIS; do
            printf "  %-8s %-26s %-26s\n" "${f/#h/hccl}" "$(col 2 <"$tmp/$f" | stats)" "$(col 5 <"$tmp/$f" | stats)"
        done
        echo "  hccl-rs against the better MPI: time $(vs time 2), bus bandwidth $(vs bw 5)"
        if [ "$p" -gt "$hosts" ] && [[ " $MPIS " == *" mpich "* ]]; then
            echo "  (mpich: TCP between the ranks of one host too, see tools/netns-mpirun.sh)"
        fi
    fi
done

if [ "$SWEEP" = 1 ]; then
    echo
    echo "sweep: AllReduce, 2 hosts x 1 rank, one interleaved run, $BW_ITERS iterations per size"
    first=${MPIS%% *}
    echo "(against $first)"
    hccl 2 2 8 67108864 "$BW_ITERS" 4 >"$tmp/h"
    mpi "$first" 2 2 8 67108864 "$BW_ITERS" 4 >"$tmp/m"
    printf "  %10s %12s %12s %8s %12s %12s %8s\n" bytes hccl_us mpi_us time_x hccl_GB/s mpi_GB/s bw_x
    paste -d'\n' "$tmp/h" "$tmp/m" | awk -F'|' 'NR % 2 == 1 {b = $1; ht = $2; hb = $5; next}
        { gsub(/ /, "", b); printf "  %10s %12.2f %12.2f %8.2f %12.4f %12.4f %8.2f\n", b, ht, $2, ($2 > 0) ? ht / $2 : 0, hb, $5, ($5 > 0) ? hb / $5 : 0 }'
fi
