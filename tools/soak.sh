#!/usr/bin/env bash
# Soak (issue 15): p rank processes (`hccl-mp-worker soak`) run the same
# seeded pseudo-random sequence of ops over every primitive (allreduce,
# allgather, reduce_scatter, broadcast, reduce, scatter, gather, alltoall,
# barrier, send/recv, allgather_v, reduce_scatter_v, alltoall_v), sizes up
# to 4 MiB skewed small, random roots and reduce operators, every result
# checked against a host reference. Each rank samples its resident set,
# open fds and /dev/shm segments after a 100-op warm-up (whose first 13 ops
# run every primitive at 4 MiB), halfway and at the end.
#
# Usage: tools/soak.sh            (from anywhere in the repository)
# Environment:
#   OPS=100000        ops per rank
#   RANKS=4           rank processes
#   SEED=15           the sequence's seed (the same on every rank)
#   CHECK_EVERY=1     check every k-th op's result (1: every op)
#   PROFILE=release   cargo profile of the worker (or debug)
#   WORKER=path       a prebuilt hccl-mp-worker (skips the build)
#   TIMEOUT=3600      seconds before the ranks are killed
#   TRANSPORT=auto    HCCL_RS_TRANSPORT: auto (shared memory) or tcp
#
# Prints per rank the start / mid / end figures and a verdict; exits 1 if
# a rank failed, a result was wrong, fds or segments were not flat, the
# resident set grew by 16 MiB or more, or a segment was left in /dev/shm.
set -u

OPS=${OPS:-100000}
RANKS=${RANKS:-4}
SEED=${SEED:-15}
CHECK_EVERY=${CHECK_EVERY:-1}
PROFILE=${PROFILE:-release}
TIMEOUT=${TIMEOUT:-3600}
TRANSPORT=${TRANSPORT:-auto}
root=$(cd "$(dirname "$0")/.." && pwd)

if [ -z "${WORKER:-}" ]; then
    if [ "$PROFILE" = release ]; then flag=--release dir=release; else flag= dir=debug; fi
    (cd "$root" && cargo build -q $flag -p hccl-tests --bin hccl-mp-worker) || exit 1
    WORKER="${CARGO_TARGET_DIR:-$root/target}/$dir/hccl-mp-worker"
fi
[ -x "$WORKER" ] || { echo "no worker at $WORKER" >&2; exit 1; }

d=$(mktemp -d "${TMPDIR:-/tmp}/hccl-soak.XXXXXX")
pids=()
for ((r = 0; r < RANKS; r++)); do
    env -u RANK -u WORLD_SIZE -u HCCL_RS_EXECUTOR -u HCCL_RS_HOST_ID \
        -u HCCL_ALGO HCCL_RS_TRANSPORT="$TRANSPORT" \
        HCCL_IF_IP=127.0.0.1 HCCL_BUFFSIZE="${HCCL_BUFFSIZE:-1}" \
        HCCL_EXEC_TIMEOUT=120 HCCL_CONNECT_TIMEOUT=60 \
        SOAK_OPS="$OPS" SOAK_SEED="$SEED" SOAK_CHECK_EVERY="$CHECK_EVERY" \
        timeout -s KILL "$TIMEOUT" "$WORKER" root_info "$r" "$RANKS" "$d" soak \
        >"$d/out.$r" 2>"$d/err.$r" &
    pids+=($!)
done
echo "soak: $RANKS ranks x $OPS ops (seed $SEED, checking every $CHECK_EVERY, transport $TRANSPORT), worker $WORKER"
# the per-rank report: reads one SOAK json line, exits 1 unless flat
cat >"$d/report.py" <<'PY'
import json, sys
v = json.load(sys.stdin)
s, m, e = v["start"], v["mid"], v["end"]
grew = e["rss_kib"] - s["rss_kib"]
ok = (v["bad"] == 0 and v["checked"] > 0
      and all(e[k] == s[k] for k in ("fds", "shm_own", "shm_mapped"))
      and grew < 16 * 1024)
first = f" (first: {v['first_bad']})" if v["first_bad"] else ""
print(f"rank {v['rank']}: {v['ops']} ops in {v['secs']:.1f} s, "
      f"checked {v['checked']}, bad {v['bad']}{first}")
for k in ("rss_kib", "fds", "shm_own", "shm_mapped", "shm_all"):
    print(f"    {k:<10} start {s[k]:>8}  mid {m[k]:>8}  end {e[k]:>8}")
print(f"    rss growth {grew} KiB: " + ("flat" if ok else "NOT FLAT / WRONG"))
sys.exit(0 if ok else 1)
PY
fail=0
rpids=()
for ((r = 0; r < RANKS; r++)); do
    wait "${pids[$r]}"
    rc=$?
    [ "$rc" = 0 ] || { echo "rank $r exited $rc:"; cat "$d/out.$r"; tail -5 "$d/err.$r"; fail=1; }
done
for ((r = 0; r < RANKS; r++)); do
    line=$(sed -n 's/^SOAK //p' "$d/out.$r")
    if [ -z "$line" ]; then echo "rank $r: no SOAK line"; fail=1; continue; fi
    rpids+=($(printf '%s' "$line" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])'))
    printf '%s' "$line" | python3 "$d/report.py" || fail=1
done
left=0
for p in "${rpids[@]}"; do
    n=$(ls /dev/shm 2>/dev/null | grep -c "^hccl-rs-$p-")
    left=$((left + n))
done
echo "segments left in /dev/shm by the ranks: $left"
[ "$left" = 0 ] || fail=1
if [ "$fail" = 0 ]; then echo "soak: PASS"; rm -rf "$d"; else echo "soak: FAIL (logs in $d)"; fi
exit $fail
