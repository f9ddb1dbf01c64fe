#!/usr/bin/env bash
# Fault drills: how fast, and how clearly, do ranks notice a lost peer?
#
# For each case, p ranks (processes, `hccl-mp-worker drill`) loop one op;
# then one rank is lost and the drill measures, on every survivor, the
# time from the loss to the survivor's error, and checks that the error
# names the lost rank, that nothing hangs, and that no /dev/shm segment and
# no process is left behind.
#
# Cases (N trials each):
#   kill -9 of one rank during {allreduce, allgather, broadcast, alltoall,
#   barrier} x {root (rank 0), non-root victim} x {shm, tcp, hosts2}
#   and, for allreduce on each transport: a rank that exits while the others
#   wait (exit), destroys its communicator while they are mid-op (destroy),
#   or aborts its communicator with ops queued (abort).
#
# Transports: shm = one host, shared memory; tcp = one host, TCP only
# (HCCL_RS_TRANSPORT=tcp); hosts2 = two declared hosts (HCCL_RS_HOST_ID:
# shared memory inside each, TCP between them).
#
# Usage: tools/fault-drill.sh            (from the repository root)
# Environment:
#   TRIALS=20        trials per case
#   RANKS=4          ranks per trial
#   OPS="allreduce allgather broadcast alltoall barrier"
#   TRANSPORTS="shm tcp hosts2"
#   EXTRAS="exit destroy abort"   (empty: only the kill cases)
#   DRILL_BYTES=4194304           bytes each rank sends per op
#   PROFILE=release               cargo profile of the worker (or debug)
#   WORKER=path                   a prebuilt hccl-mp-worker (skips the build)
#   OUT=fault-drill.tsv           every trial's measurements
#
# Prints one line per case: detection time (median and max over every
# survivor of every trial, ms), whether all were within 1 s, whether every
# message named the lost rank, hangs and leaks. Exits 1 if any case failed
# a check (a hang, a leak, an unnamed rank, or a detection over 1 s).
set -u

TRIALS=${TRIALS:-20}
RANKS=${RANKS:-4}
OPS=${OPS:-"allreduce allgather broadcast alltoall barrier"}
TRANSPORTS=${TRANSPORTS:-"shm tcp hosts2"}
EXTRAS=${EXTRAS-"exit destroy abort"}
DRILL_BYTES=${DRILL_BYTES:-4194304}
PROFILE=${PROFILE:-release}
OUT=${OUT:-fault-drill.tsv}
HANG_LIMIT=40   # seconds; HCCL_EXEC_TIMEOUT is 20, so a timeout is not a hang
NONROOT=$((RANKS / 2))

root=$(cd "$(dirname "$0")/.." && pwd)
# our own messages go to fd 3: a trial's stderr is silenced (bash reports
# every killed rank as a job that died)
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

now_ns() { date +%s%N; }

# trial OP TRANSPORT VICTIM HOW -> appends one line per survivor to $OUT:
# case  trial  survivor  ms  named  hang  leaked_segments  leaked_processes  message
trial() {
    local op=$1 transport=$2 victim=$3 how=$4 t=$5
    local d
    d=$(mktemp -d /tmp/hccl-drill.XXXXXX)
    local pids=() r
    for ((r = 0; r < RANKS; r++)); do
        (
            for v in RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT OMPI_COMM_WORLD_RANK \
                OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE SLURM_PROCID SLURM_NTASKS \
                HCCL_ROOT_ADDR HCCL_RS_ROOT_FILE HCCL_RS_EXECUTOR HCCL_RS_HOST_ID; do
                unset "$v"
            done
            export HCCL_BUFFSIZE=8 HCCL_EXEC_TIMEOUT=20 HCCL_CONNECT_TIMEOUT=20 \
                HCCL_IF_IP=127.0.0.1 DRILL_LINGER_MS=5000 DRILL_OP=$op DRILL_BYTES=$DRILL_BYTES DRILL_ROOT=0
            case $transport in
            tcp) export HCCL_RS_TRANSPORT=tcp ;;
            hosts2) export HCCL_RS_HOST_ID="drill-$$-host$((r * 2 / RANKS))" ;;
            esac
            if [ "$how" != kill ]; then export DRILL_VICTIM="$victim:$how"; fi
            exec "$WORKER" root_info "$r" "$RANKS" "$d" drill >"$d/out.$r" 2>"$d/err.$r"
        ) &
        pids+=($!)
    done
    # every rank in the loop
    local deadline=$(($(date +%s) + 60)) ready
    while :; do
        ready=$(ls "$d" 2>/dev/null | grep -c '^ready\.')
        [ "$ready" -ge "$RANKS" ] && break
        if [ "$(date +%s)" -gt "$deadline" ]; then
            echo "  $op/$transport: ranks never all started; see $d" >&3
            kill -9 "${pids[@]}" 2>/dev/null
            wait "${pids[@]}" 2>/dev/null
            return 1
        fi
        sleep 0.02
    done
    local t_loss=0
    if [ "$how" = kill ]; then
        # a random moment of the loop
        sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
        t_loss=$(now_ns)
        kill -9 "${pids[$victim]}"
    fi
    # every survivor reports an error (and lingers, see DRILL_LINGER_MS) or
    # ends; else it is a hang
    local hang=0 alive
    deadline=$(($(date +%s) + HANG_LIMIT))
    while :; do
        alive=0
        for ((r = 0; r < RANKS; r++)); do
            [ "$r" = "$victim" ] && continue
            grep -q '"message"' "$d/out.$r" 2>/dev/null && continue
            kill -0 "${pids[$r]}" 2>/dev/null && alive=1
        done
        [ $alive = 0 ] && break
        if [ "$(date +%s)" -gt "$deadline" ]; then
            hang=1
            break
        fi
        sleep 0.02
    done
    if [ "$how" != kill ]; then
        t_loss=$(grep -h '"event"' "$d/out.$victim" | head -1 | sed 's/.*"t_ns":\([0-9]*\).*/\1/')
        t_loss=${t_loss:-0}
    fi
    kill -9 "${pids[@]}" 2>/dev/null
    wait "${pids[@]}" 2>/dev/null
    # leaks: segments of these processes, processes still there
    local segs=0 procs=0 p
    for p in "${pids[@]}"; do
        segs=$((segs + $(ls /dev/shm 2>/dev/null | grep -c "^hccl-rs-$p-")))
        kill -0 "$p" 2>/dev/null && procs=$((procs + 1))
    done
    local vpid=${pids[$victim]} line ms named msg tns
    for ((r = 0; r < RANKS; r++)); do
        [ "$r" = "$victim" ] && continue
        line=$(grep -h '^DRILL ' "$d/out.$r" | grep '"message"' | head -1)
        if [ -z "$line" ]; then
            ms=-1 named=0 msg="(no error reported)"
        else
            tns=$(sed 's/.*"t_ns":\([0-9]*\).*/\1/' <<<"$line")
            msg=$(sed 's/.*"message":"\(.*\)","pid".*/\1/; s/.*"message":"\([^"]*\)".*/\1/' <<<"$line")
            ms=$(((tns - t_loss) / 1000000))
            named=0
            if [ "$how" = abort ]; then
                grep -q "rank $victim\b" <<<"$msg" && named=1
            else
                grep -q "rank $victim (process $vpid" <<<"$msg" && named=1
            fi
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$op/$transport/$how/victim$victim" "$t" "$r" \
            "$ms" "$named" "$hang" "$segs" "$procs" "$msg" >>"$OUT"
    done
    rm -rf "$d"
}

: >"$OUT"
cases=()
for transport in $TRANSPORTS; do
    for op in $OPS; do
        for victim in 0 "$NONROOT"; do
            cases+=("$op $transport $victim kill")
        done
    done
    for how in $EXTRAS; do
        cases+=("allreduce $transport $NONROOT $how")
    done
done

echo "fault drill: ${#cases[@]} cases x $TRIALS trials, $RANKS ranks, $DRILL_BYTES bytes per op"
printf '%-36s %8s %8s %6s %6s %5s %5s\n' case median_ms max_ms "<=1s" named hangs leaks
failed=0
for c in "${cases[@]}"; do
    set -- $c
    for ((t = 1; t <= TRIALS; t++)); do
        trial "$1" "$2" "$3" "$4" "$t" 2>/dev/null || failed=1
    done
    name="$1/$2/$4/victim$3"
    summary=$(awk -F'\t' -v c="$name" '$1 == c {
            n++; ms[n] = $4; if ($4 < 0 || $4 > 1000) late++; if ($5 != 1) unnamed++
            hangs += $6; leaks += $7 + $8 }
        END {
            if (n == 0) { print "- - - - - -"; exit }
            # sort the times (insertion sort: n is small)
            for (i = 2; i <= n; i++) { v = ms[i]; j = i - 1
                while (j > 0 && ms[j] > v) { ms[j + 1] = ms[j]; j-- } ms[j + 1] = v }
            med = (n % 2) ? ms[(n + 1) / 2] : (ms[n / 2] + ms[n / 2 + 1]) / 2
            printf "%s %s %s %s %d %d\n", med, ms[n], late ? "no" : "yes", unnamed ? "no" : "yes", hangs, leaks
        }' "$OUT")
    set -- $summary
    printf '%-36s %8s %8s %6s %6s %5s %5s\n' "$name" "$1" "$2" "$3" "$4" "$5" "$6"
    if [ "$3" != yes ] || [ "$4" != yes ] || [ "$5" != 0 ] || [ "$6" != 0 ]; then
        failed=1
    fi
done
echo "every survivor's message: $OUT (case, trial, rank, ms, named, hang, leaked segments, leaked processes, message)"
exit $failed
