#!/usr/bin/env bash
# Shrink and grow drills (issue 32's bar): RANKS rank processes
# (`hccl-mp-worker drill`) loop 1 MiB AllReduces; one (a random rank each
# trial) is killed with SIGKILL; every survivor, on its failed op, agrees
# with the others on the lost rank (no list given), shrinks the
# communicator without it and runs a checked AllReduce on the new one.
# With GROW=1 the shrunk communicator then grows back to RANKS with a
# fresh process, and every rank runs a checked AllReduce on the grown one.
#
# Measured per trial: the time from the kill to each survivor's first
# correct op on the shrunk communicator, and (GROW=1) from the fresh
# process's start to its first correct op on the grown one. Checked: every
# survivor shrank, nothing hung, no /dev/shm segment and no process left.
#
# Usage: tools/shrink-drill.sh            (from the repository root)
# Environment:
#   TRIALS=20     trials
#   RANKS=8       ranks per trial
#   HOSTS=1       1: one host (shared memory); 2: two declared hosts
#                 (HCCL_RS_HOST_ID: shared memory inside each, TCP between)
#   NETNS=0       1 (with HOSTS=2): the two hosts are network namespaces
#                 (tools/netns.sh; needs root): TCP over veths between them
#   GROW=1        also grow back (0: shrink only)
#   PROFILE=release, WORKER=path (a prebuilt hccl-mp-worker)
#
# Prints one line per trial (ms: min / median / max over the survivors)
# and a summary; exits 1 if a trial failed a check.
set -u

TRIALS=${TRIALS:-20}
RANKS=${RANKS:-8}
HOSTS=${HOSTS:-1}
GROW=${GROW:-1}
NETNS=${NETNS:-0}
PROFILE=${PROFILE:-release}
HANG_LIMIT=40

root=$(cd "$(dirname "$0")/.." && pwd)
exec 3>&2
if [ -z "${WORKER:-}" ]; then
    flag=""
    [ "$PROFILE" = release ] && flag="--release"
    (cd "$root" && cargo build -q $flag -p hccl-tests --bin hccl-mp-worker) || exit 1
    dir=debug
    [ "$PROFILE" = release ] && dir=release
    WORKER="${CARGO_TARGET_DIR:-$root/target}/$dir/hccl-mp-worker"
fi
[ -x "$WORKER" ] || { echo "no worker at $WORKER" >&2; exit 1; }

# namespace hosts: made once for every trial, removed whatever happens
ns_tag="sd$$"
launch=()
if [ "$NETNS" = 1 ]; then
    [ "$HOSTS" = 2 ] || { echo "NETNS=1 needs HOSTS=2" >&2; exit 1; }
    "$root/tools/netns.sh" up 2 --tag "$ns_tag" >/dev/null || exit 1
    trap '"$root/tools/netns.sh" down --tag "$ns_tag" >/dev/null 2>&1' EXIT
    ns_addr=("$("$root/tools/netns.sh" addr 0 --tag "$ns_tag")" "$("$root/tools/netns.sh" addr 1 --tag "$ns_tag")")
fi
# in_host R CMD...: runs CMD as rank R's host would (its namespace with NETNS=1)
in_host() {
    local r=$1
    shift
    if [ "$NETNS" = 1 ]; then
        exec ip netns exec "hccl-$ns_tag-h$((r * 2 / RANKS))" "$@"
    fi
    exec "$@"
}

now_ns() { date +%s%N; }
t_of() { sed 's/.*"t_ns":\([0-9]*\).*/\1/'; }

# env_for RANK: the environment of one rank process
rank_env() {
    local r=$1
    for v in RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT OMPI_COMM_WORLD_RANK \
        OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE SLURM_PROCID SLURM_NTASKS \
        HCCL_ROOT_ADDR HCCL_RS_ROOT_FILE HCCL_RS_EXECUTOR HCCL_RS_HOST_ID HCCL_RS_TRANSPORT; do
        unset "$v"
    done
    export HCCL_BUFFSIZE=8 HCCL_EXEC_TIMEOUT=20 HCCL_CONNECT_TIMEOUT=20 \
        HCCL_IF_IP=127.0.0.1 DRILL_OP=allreduce DRILL_BYTES=1048576 DRILL_SHRINK=agree
    [ "$GROW" = 1 ] && export DRILL_GROW=1
    if [ "$NETNS" = 1 ]; then
        export HCCL_IF_IP="${ns_addr[$((r * 2 / RANKS))]}"
    elif [ "$HOSTS" = 2 ]; then
        export HCCL_RS_HOST_ID="shrink-drill-$$-host$((r * 2 / RANKS))"
    fi
}

# stats: "min median max" of the numbers on stdin
stats() {
    sort -n | awk '{v[NR] = $1} END {
        if (NR == 0) { print "- - -"; exit }
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%.1f %.1f %.1f\n", v[1], m, v[NR] }'
}

shrink_all=() grow_all=() failed=0
echo "shrink drill: $TRIALS trials, $RANKS ranks on $HOSTS host(s)$([ "$NETNS" = 1 ] && echo " (network namespaces)"), grow back: $GROW"
printf '%-6s %-7s %28s %14s %6s\n' trial victim "shrink ms (min/med/max)" "grow ms" checks
for ((t = 1; t <= TRIALS; t++)); do
    d=$(mktemp -d /tmp/hccl-shrink.XXXXXX)
    pids=()
    for ((r = 0; r < RANKS; r++)); do
        (rank_env "$r"; in_host "$r" "$WORKER" root_info "$r" "$RANKS" "$d" drill >"$d/out.$r" 2>"$d/err.$r") &
        pids+=($!)
    done
    deadline=$(($(date +%s) + 60))
    while [ "$(ls "$d" | grep -c '^ready\.')" -lt "$RANKS" ]; do
        if [ "$(date +%s)" -gt "$deadline" ]; then
            echo "trial $t: ranks never all started; see $d" >&3
            failed=1
            break
        fi
        sleep 0.02
    done
    victim=$((RANDOM % RANKS))
    sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
    t_kill=$(now_ns)
    kill -9 "${pids[$victim]}"
    fresh=""
    t_spawn=0
    if [ "$GROW" = 1 ]; then
        deadline=$(($(date +%s) + HANG_LIMIT))
        while [ ! -e "$d/grow.bin" ] && [ "$(date +%s)" -le "$deadline" ]; do sleep 0.002; done
        if [ -e "$d/grow.bin" ]; then
            t_spawn=$(now_ns)
            # the members keep their shrunk ranks 0..RANKS-2: the new
            # process is the last rank
            (rank_env $((RANKS - 1)); in_host $((RANKS - 1)) "$WORKER" grow $((RANKS - 1)) "$RANKS" "$d" grown >"$d/out.new" 2>"$d/err.new") &
            fresh=$!
        fi
    fi
    # every process ends (survivors exit after their last op), else a hang
    hang=0
    deadline=$(($(date +%s) + HANG_LIMIT))
    for p in "${pids[@]}" $fresh; do
        while kill -0 "$p" 2>/dev/null; do
            if [ "$(date +%s)" -gt "$deadline" ]; then hang=1; break; fi
            sleep 0.02
        done
    done
    kill -9 "${pids[@]}" $fresh 2>/dev/null
    wait 2>/dev/null
    segs=0 procs=0
    for p in "${pids[@]}" $fresh; do
        segs=$((segs + $(ls /dev/shm 2>/dev/null | grep -c "^hccl-rs-$p-")))
        kill -0 "$p" 2>/dev/null && procs=$((procs + 1))
    done
    shrunk=()
    ok=1
    for ((r = 0; r < RANKS; r++)); do
        [ "$r" = "$victim" ] && continue
        line=$(grep -h '"event":"shrunk"' "$d/out.$r" | head -1)
        if [ -z "$line" ]; then ok=0; continue; fi
        shrunk+=($((($(t_of <<<"$line") - t_kill) / 1000)))
    done
    grow_ms="-"
    if [ "$GROW" = 1 ]; then
        line=$(grep -h '"event":"grown"' "$d/out.new" 2>/dev/null | head -1)
        if [ -z "$line" ]; then
            ok=0
        else
            us=$((($(t_of <<<"$line") - t_spawn) / 1000))
            grow_ms=$(awk -v u="$us" 'BEGIN { printf "%.1f", u / 1000 }')
            grow_all+=("$us")
        fi
        # every member grew too
        n_grown=$(cat "$d"/out.* 2>/dev/null | grep -c '"event":"grown"')
        [ "$n_grown" = "$RANKS" ] || ok=0
    fi
    [ ${#shrunk[@]} = $((RANKS - 1)) ] || ok=0
    shrink_all+=("${shrunk[@]}")
    s=$(printf '%s\n' "${shrunk[@]}" | awk '{print $1 / 1000}' | stats)
    checks="ok"
    if [ $ok = 0 ] || [ $hang = 1 ] || [ $segs != 0 ] || [ $procs != 0 ]; then
        checks="FAIL(ok=$ok hang=$hang segs=$segs procs=$procs)"
        failed=1
        echo "  trial $t kept in $d" >&3
    else
        rm -rf "$d"
    fi
    printf '%-6s %-7s %28s %14s %6s\n' "$t" "$victim" "$(tr ' ' / <<<"$s")" "$grow_ms" "$checks"
done
echo "summary over every survivor of every trial, ms (min / median / max):"
echo "  kill -> first correct op on the shrunk communicator: $(printf '%s\n' "${shrink_all[@]}" | awk '{print $1 / 1000}' | stats | tr ' ' /)"
[ "$GROW" = 1 ] && echo "  fresh process start -> its first correct op on the grown one: $(printf '%s\n' "${grow_all[@]}" | awk '{print $1 / 1000}' | stats | tr ' ' /)"
exit $failed
