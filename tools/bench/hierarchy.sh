#!/usr/bin/env bash
# Hierarchical AllReduce across namespace hosts with a rate-limited link:
# the flat ring, the two-level, Pipeline and multi-channel executors (any
# registered AllReduce executor whose name matches ALGOS) and the
# selector's own choice, measured at each size, beside two predictions
# from the figures calibrated across the same kind of link
# (`hccl-test --calibrate --netns 2 --netns-rate RATE`: alpha of an
# exchange step and one-way beta between two hosts, the host link's
# capacity across three): the cost model's (the selector's log) and the
# plan simulator's (`hccl-sim --tuning-file`).
#
# Per rate (calibrated once per rate), per layout and size: every
# executor's measured time (median of RUNS runs), the cost model's
# predicted time and the simulator's (sim_us; `-` when this hccl-sim does
# not take --tuning-file or prints no `predicted time:` line) with their
# ratios to the measured time, then the fastest, the selector's pick and
# pick/fastest.
#
#   bash tools/bench/hierarchy.sh
#   LAYOUTS="2,2 2,1,3"  ranks per host, one layout per run of hosts
#   RATES="1gbit 10gbit" every host's link, both directions (tc htb), one
#                        pass per rate (RATE=1gbit, the old name, is one rate)
#   SIZES="256K 1M 4M"   AllReduce bytes
#   RUNS=3 ITERS=5
#   ALGOS="AllReduceRingExecutor AllReduceTwoLevelExecutor AllReducePipelineExecutor"
#                        (the multi-channel AllReduceMultiRingExecutor is added when registered)
#
# Needs root and iproute2. Do not run it beside another benchmark.
set -euo pipefail
cd "$(dirname "$0")/../.."

LAYOUTS=${LAYOUTS:-"2,2 2,1,3"}
RATES=${RATES:-${RATE:-"1gbit 10gbit"}}
SIZES=${SIZES:-"256K 1M 4M"}
RUNS=${RUNS:-3}
ITERS=${ITERS:-5}
ALGOS=${ALGOS:-"AllReduceRingExecutor AllReduceTwoLevelExecutor AllReducePipelineExecutor"}

[ "$(id -u)" -eq 0 ] || { echo "hierarchy.sh: network namespaces need root" >&2; exit 1; }
cargo build --release -q -p hccl-tools
HCCL=${HCCL:-${CARGO_TARGET_DIR:-target}/release/hccl-test}
SIM=${SIM:-${CARGO_TARGET_DIR:-target}/release/hccl-sim}
for extra in $("$HCCL" --list-executors | grep -i '^AllReduce.*MultiRing'); do
    ALGOS="$ALGOS $extra"
done
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "machine: $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ); host links limited to: $RATES"

# one run: layout bytes [algo] -> "time_us" on stdout; the selector's log in $WORK/log
run() {
    local layout=$1 size=$2 algo=${3:-}
    local p
    p=$(echo "$layout" | tr ',' '\n' | awk '{s += $1} END {print s}')
    local args=(all_reduce -p "$p" --netns "$layout" --netns-rate "$rate" --transport process
        -b "$size" -e "$size" -n "$ITERS" -w 1 -c 0 --format json)
    [ -n "$algo" ] && args+=(--algo "$algo")
    HCCL_RS_LOG=hccl_framework::selector=debug "$HCCL" "${args[@]}" 2>"$WORK/log" |
        python3 -c 'import json,sys
rows=[json.loads(l) for l in sys.stdin if l.startswith("{")]
print(rows[-1]["time_us"])'
}

# the plan simulator's prediction: layout bytes algo -> µs, or "-" when
# this hccl-sim cannot give one (no --tuning-file, no `predicted time:`)
sim() {
    local out t
    out=$(timeout 120 "$SIM" --executor "$3" --servers "$1" --count $(($2 / 4)) \
        --tuning-file "$WORK/tuning.json" --no-check 2>/dev/null) || { echo -; return 0; }
    t=$(sed -n 's/^predicted time: *\([0-9][0-9.eE+-]*\).*/\1/p' <<<"$out")
    t=${t%%$'\n'*}
    echo "${t:--}"
}

# measured/predicted ratio, or "-" without a prediction
ratio() { [ "$1" != - ] && [ -n "$1" ] && python3 -c "print(f'{$1/$2:.2f}')" || echo -; }

median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

for rate in $RATES; do
    echo
    echo "host links limited to $rate; calibrating:"
    "$HCCL" --calibrate --netns 2 --netns-rate "$rate" --tuning-file "$WORK/tuning.json" |
        grep -E "level|host link|reduce"
    export HCCL_RS_TUNING_FILE="$WORK/tuning.json"
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
                        line=$(sed 's/\x1b\[[0-9;]*m//g' "$WORK/log" | grep "selected executor" | grep "bytes=$bytes " | head -1 || true)
                        pick=$(echo "$line" | sed -n 's/.* executor=\([A-Za-z0-9]*\).*/\1/p')
                        preds=$(echo "$line" | sed -n 's/.*(\(.*\))$/\1/p')
                    fi
                done
            done
            echo
            echo "hosts $layout, links $rate, AllReduce $size ($bytes B), median of $RUNS runs"
            printf "  %-32s %12s %12s %9s %10s %9s\n" executor measured_us predicted_us pred/meas sim_us sim/meas
            best=""; best_t=""
            for algo in $ALGOS; do
                m=$(median ${times[$algo]})
                pr=$(echo "$preds" | tr ',' '\n' | sed -n "s/^ *$algo=\([0-9.]*\)us.*/\1/p")
                pr=${pr:--}
                sm=$(sim "$layout" "$bytes" "$algo")
                printf "  %-32s %12.1f %12s %9s %10s %9s\n" "$algo" "$m" "$pr" \
                    "$(ratio "$pr" "$m")" "$sm" "$(ratio "$sm" "$m")"
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
done
