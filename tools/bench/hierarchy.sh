#!/usr/bin/env bash
# Hierarchical AllReduce across namespace hosts with a rate-limited link:
# the flat ring, the two-level, Pipeline and multi-channel executors (any
# registered AllReduce executor whose name matches ALGOS) and the
# selector's own choice, measured at each size, beside the cost model's
# prediction after calibrating alpha and beta across the same kind of
# link (`hccl-test --calibrate --netns 2 --netns-rate RATE`).
#
# Prints per layout and size: every executor's measured time (median of
# RUNS runs) and predicted time with their ratio, then the fastest, the
# selector's pick and pick/fastest.
#
#   bash tools/bench/hierarchy.sh
#   LAYOUTS="2,2 2,1,3"  ranks per host, one layout per run of hosts
#   RATE=1gbit           every host's link, both directions (tc htb)
#   SIZES="256K 1M 4M"   AllReduce bytes
#   RUNS=3 ITERS=5
#   ALGOS="AllReduceRingExecutor AllReduceTwoLevelExecutor AllReducePipelineExecutor"
#                        (the multi-channel AllReduceMultiRingExecutor is added when registered)
#
# Needs root and iproute2. Do not run it beside another benchmark.
set -euo pipefail
cd "$(dirname "$0")/../.."

LAYOUTS=${LAYOUTS:-"2,2 2,1,3"}
RATE=${RATE:-1gbit}
SIZES=${SIZES:-"256K 1M 4M"}
RUNS=${RUNS:-3}
ITERS=${ITERS:-5}
ALGOS=${ALGOS:-"AllReduceRingExecutor AllReduceTwoLevelExecutor AllReducePipelineExecutor"}

[ "$(id -u)" -eq 0 ] || { echo "hierarchy.sh: network namespaces need root" >&2; exit 1; }
cargo build --release -q -p hccl-tools
HCCL=${HCCL:-${CARGO_TARGET_DIR:-target}/release/hccl-test}
for extra in $("$HCCL" --list-executors | grep -i '^AllReduce.*MultiRing'); do
    ALGOS="$ALGOS $extra"
done
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "machine: $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ); host links limited to $RATE"
"$HCCL" --calibrate --netns 2 --netns-rate "$RATE" --tuning-file "$WORK/tuning.json" | grep -E "level|reduce"
export HCCL_RS_TUNING_FILE="$WORK/tuning.json"

# one run: layout bytes [algo] -> "time_us" on stdout; the selector's log in $WORK/log
run() {
    local layout=$1 size=$2 algo=${3:-}
    local p
    p=$(echo "$layout" | tr ',' '\n' | awk '{s += $1} END {print s}')
    local args=(all_reduce -p "$p" --netns "$layout" --netns-rate "$RATE" --transport process
        -b "$size" -e "$size" -n "$ITERS" -w 1 -c 0 --format json)
    [ -n "$algo" ] && args+=(--algo "$algo")
    HCCL_RS_LOG=hccl_framework::selector=debug "$HCCL" "${args[@]}" 2>"$WORK/log" |
        python3 -c 'import json,sys
rows=[json.loads(l) for l in sys.stdin if l.startswith("{")]
print(rows[-1]["time_us"])'
}

median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

for layout in $LAYOUTS; do
    for size in $SIZES; do
        bytes=$(python3 -c "import sys; s=sys.argv[1]; m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$size")
        declare -A times=()
        pick=""
        preds=""
        for r in $(seq "$RUNS"); do
            for algo in "" $ALGOS; do
                t=$(run "$layout" "$size" "$algo")
                times["${algo:-selector}"]+="$t "
                if [ -z "$algo" ] && [ -z "$pick" ]; then
                    line=$(sed 's/\x1b\[[0-9;]*m//g' "$WORK/log" | grep "selected executor" | grep "bytes=$bytes " | head -1)
                    pick=$(echo "$line" | sed -n 's/.* executor=\([A-Za-z0-9]*\).*/\1/p')
                    preds=$(echo "$line" | sed -n 's/.*(\(.*\))$/\1/p')
                fi
            done
        done
        echo
        echo "hosts $layout, AllReduce $size ($bytes B), median of $RUNS runs"
        printf "  %-32s %12s %12s %8s\n" executor measured_us predicted_us pred/meas
        best=""; best_t=""
        for algo in $ALGOS; do
            m=$(median ${times[$algo]})
            pr=$(echo "$preds" | tr ',' '\n' | sed -n "s/^ *$algo=\([0-9.]*\)us.*/\1/p")
            ratio=$( [ -n "$pr" ] && python3 -c "print(f'{$pr/$m:.2f}')" || echo -)
            printf "  %-32s %12.1f %12s %8s\n" "$algo" "$m" "${pr:--}" "$ratio"
            if [ -z "$best_t" ] || python3 -c "import sys; sys.exit(0 if $m < $best_t else 1)"; then
                best=$algo; best_t=$m
            fi
        done
        sel=$(median ${times[selector]})
        printf "  fastest: %s %.1f us; selector picked %s: %.1f us = %.2fx the fastest\n" \
            "$best" "$best_t" "${pick:-?}" "$sel" "$(python3 -c "print($sel/$best_t)")"
        unset times
    done
done
