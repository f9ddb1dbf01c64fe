#!/usr/bin/env bash
# tools/bench/rdma.sh -- RDMA reference figures in the Soft-RoCE VM, and
# hccl-rs's ibverbs transport and Open MPI + UCX measured against them.
#
# Everything runs in ONE VM run (tools/rxe-vm/run.sh), so the figures
# share one boot and one load on the host:
#   1. perftest, server on rxe0 and client on rxe1, GID index 1:
#        ib_write_lat -s 8           t_typical / t_avg / p99, µs. These are
#                                    HALF a round trip (perftest's ping-pong
#                                    divides by two); RTT = 2 x t_typical.
#        ib_write_bw -s 16777216     BW average, MB/s (perftest's MB = 2^20 B)
#   2. with HCCL_TEST=path/to/hccl-test: hccl-test all_reduce, 2 ranks as
#      processes, HCCL_RS_TRANSPORT=ibverbs, at 8 B and 16 MiB, and the
#      ratios  8 B time / RTT  and  16 MiB bus bandwidth / ib_write_bw.
#      Without HCCL_TEST the step is skipped.
#   3. Open MPI (Debian's) with pml ucx on the rxe devices: mpi_bench
#      all_reduce 8 B, in a few configurations, each reported as working
#      (with its time and the UCX lanes used) or with its first error.
# It prints the host's and the VM's CPU models with the figures: under
# TCG they measure the emulator more than rxe.
#
#   tools/bench/rdma.sh
#   HCCL_TEST=target/release/hccl-test tools/bench/rdma.sh
#
# Knobs: LAT_ITERS=1000 (ib_write_lat -n), BW_ITERS=30 (ib_write_bw -n),
#   HT_LAT_ITERS=2000 HT_LAT_WARMUP=100 HT_BW_ITERS=10 HT_BW_WARMUP=2,
#   HT_TIMEOUT=600 (s, per hccl-test run) -- HT_, not HCCL_: hccl-rs reads
#   every HCCL_* variable as its own setting, MPI=1 (0 skips step 3),
#   MPI_ITERS=2000 MPI_WARMUP=100, MPI_TIMEOUT=120 (s, per mpirun),
#   and run.sh's RXE_VM_* (RXE_VM_SMP, RXE_VM_TIMEOUT, ...).
# Other HCCL_* variables exported by the caller reach hccl-test unchanged.
# Needs root (the VM; apt-get for perftest / Open MPI when missing).
set -euo pipefail
shopt -s inherit_errexit

SELF=$(readlink -f "$0")
ROOT=$(cd "$(dirname "$SELF")/../.." && pwd)

LAT_ITERS=${LAT_ITERS:-1000}
BW_ITERS=${BW_ITERS:-30}
BW_BYTES=16777216
HT_LAT_ITERS=${HT_LAT_ITERS:-2000}
HT_LAT_WARMUP=${HT_LAT_WARMUP:-100}
HT_BW_ITERS=${HT_BW_ITERS:-10}
HT_BW_WARMUP=${HT_BW_WARMUP:-2}
HT_TIMEOUT=${HT_TIMEOUT:-600}
MPI=${MPI:-1}
MPI_ITERS=${MPI_ITERS:-2000}
MPI_WARMUP=${MPI_WARMUP:-100}
MPI_TIMEOUT=${MPI_TIMEOUT:-120}

SERVER_ADDR=10.10.0.1 # rxe0's
GID=${RXE_VM_GID_INDEX:-1}
PORT=18515            # perftest's default TCP port for the QP exchange

# ================================================================ host side

# Installs missing Debian packages (root only).
need_packages() {
    local p missing=()
    for p in "$@"; do
        [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true) == "install ok installed" ]] ||
            missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    ((EUID == 0)) || { echo "rdma.sh: missing Debian packages: ${missing[*]}" >&2; exit 1; }
    echo "rdma.sh: installing ${missing[*]}" >&2
    { apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >&2
}

host_main() {
    local pkgs=(perftest)
    ((MPI == 1)) && pkgs+=(openmpi-bin libopenmpi-dev)
    need_packages "${pkgs[@]}"
    if [[ -n ${HCCL_TEST:-} ]]; then
        # absolute: the VM runs in this cwd, but be explicit
        HCCL_TEST=$(readlink -f "$HCCL_TEST")
        [[ -x $HCCL_TEST ]] || { echo "rdma.sh: HCCL_TEST=$HCCL_TEST is not an executable" >&2; exit 1; }
        export HCCL_TEST
    fi
    if ((MPI == 1)); then
        # built here: compiling over 9p under TCG would take far longer
        mkdir -p "$ROOT/target/bench"
        mpicc -O2 -Wall -Werror -o "$ROOT/target/bench/mpi_bench" "$ROOT/tools/bench/mpi_bench.c"
        export RDMA_BENCH_MPI_BENCH=$ROOT/target/bench/mpi_bench
    fi
    RDMA_BENCH_HOST_CPU="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs"
    export RDMA_BENCH_HOST_CPU MPI
    exec "$ROOT/tools/rxe-vm/run.sh" bash "$SELF"
}

if [[ ${RXE_VM:-} != 1 ]]; then
    host_main
fi

# =============================================================== in the VM

OUT=$(mktemp -d /tmp/rdma-bench.XXXXXX)

section() { printf '\n== %s\n' "$*"; }

# ratio A B [SCALE]: A * SCALE / B with 3 decimals; "-" when A or B is
# not a number (a measurement that failed) or B is 0.
ratio() {
    awk -v a="$1" -v b="$2" -v s="${3:-1}" 'BEGIN {
        num = "^[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$"
        if (a !~ num || b !~ num || b + 0 == 0) print "-"
        else printf "%.3f\n", a * s / b
    }'
}

# Waits (up to ~10 s) until something listens on TCP port $1.
wait_listen() {
    local n
    for ((n = 0; n < 100; n++)); do
        [[ -n $(ss -Hltn "sport = :$1") ]] && return 0
        sleep 0.1
    done
    return 1
}

# perftest_pair NAME TOOL ARGS...: TOOL's server on rxe0, its client on
# rxe1 connecting over 10.10.0.1; the client's report lands in $OUT/NAME.
perftest_pair() {
    local name=$1 tool=$2 spid crc=0 src=0
    shift 2
    "$tool" -d rxe0 -x "$GID" -p "$PORT" "$@" > "$OUT/$name.server" 2>&1 &
    spid=$!
    wait_listen "$PORT" || echo "$tool server not listening after 10 s"
    timeout 300 "$tool" -d rxe1 -x "$GID" -p "$PORT" "$@" "$SERVER_ADDR" > "$OUT/$name" 2>&1 || crc=$?
    # a client that failed leaves the server waiting for it
    if ((crc != 0)); then kill "$spid" 2>/dev/null || true; fi
    wait "$spid" || src=$?
    if ((crc != 0 || src != 0)); then
        echo "$tool failed (client exit $crc, server exit $src):"
        tail -n 15 "$OUT/$name" "$OUT/$name.server"
        return 1
    fi
    # the result table: the header line and the row under it
    grep -A1 '#bytes' "$OUT/$name"
}

# perftest_value FILE COLUMN: the value under the header column whose name
# starts with COLUMN ("t_typical", "99% percentile", "BW average"). Header
# names may contain a space ("BW average[MB/sec]"): a name ends at a word
# ending in "]" or starting with "#".
perftest_value() {
    awk -v want="$2" '
        /#bytes/ {
            n = 0; cur = ""
            for (i = 1; i <= NF; i++) {
                cur = cur (cur == "" ? "" : " ") $i
                if ($i ~ /^#/ || $i ~ /\]$/) { names[++n] = cur; cur = "" }
            }
            header = 1; next
        }
        header && $1 ~ /^[0-9]+$/ {
            for (i = 1; i <= n; i++) if (index(names[i], want) == 1) { print $i; exit }
        }' "$1"
}

# table_row FILE: "time_us busbw_gbps check p50_us p99_us" from the first
# data row of hccl-test's (or mpi_bench's) text table: rows are
#   bytes | aveg_time(us) | alg_bandwidth(GB/s) | check | bus_bandwidth(GB/s) | p50 | p99 | max
# (tools/src/perf.rs print_row; the last three only with per-iteration
# spread, which hccl-test always prints and mpi_bench with its 7th argument).
table_row() {
    awk -F'|' '$1 ~ /^ *[0-9]+ *$/ {
            for (i = 1; i <= NF; i++) gsub(/ /, "", $i)
            print $2, $5, $4, ($6 == "" ? "-" : $6), ($7 == "" ? "-" : $7); exit
        }' "$1"
}

machine() {
    section "machine"
    echo "host CPU:  ${RDMA_BENCH_HOST_CPU:-?}"
    local model flags
    model=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
    flags=$(grep -m1 '^flags' /proc/cpuinfo)
    echo "VM CPU:    $model, $(nproc) vCPUs, AVX2 $([[ $flags == *" avx2"* ]] && echo yes || echo no)," \
        "accelerator ${RXE_VM_ACCEL:-?}"
    echo "VM kernel: $(uname -r); rxe active_mtu $(ibv_devinfo -d rxe0 | sed -n 's/.*active_mtu: *//p' | head -1)"
}

LAT_TYP="" LAT_AVG="" LAT_P99="" BW_MBS=""
perftest_figures() {
    section "perftest: ib_write_lat -s 8 -n $LAT_ITERS (server -d rxe0, client -d rxe1 $SERVER_ADDR, -x $GID)"
    local try
    for try in 1 2 3; do
        perftest_pair lat ib_write_lat -s 8 -n "$LAT_ITERS" || break
        LAT_TYP=$(perftest_value "$OUT/lat" t_typical)
        LAT_AVG=$(perftest_value "$OUT/lat" t_avg)
        LAT_P99=$(perftest_value "$OUT/lat" "99% percentile")
        [[ $LAT_TYP == inf ]] || break
        # perftest times with the TSC and calibrates it against
        # gettimeofday; on a busy host the fit can miss (r^2 < 0.9), the
        # rate becomes 0 and every latency "inf": measure again.
        grep -h 'Correlation' "$OUT/lat" || true
        echo "(attempt $try: perftest could not calibrate its clock; again)"
        LAT_TYP=""
    done
    section "perftest: ib_write_bw -s $BW_BYTES -n $BW_ITERS (same pair)"
    if perftest_pair bw ib_write_bw -s "$BW_BYTES" -n "$BW_ITERS"; then
        BW_MBS=$(perftest_value "$OUT/bw" "BW average")
    fi
}

H_LAT="" H_LAT_P50="" H_LAT_P99="" H_BUSBW="" H_NOTE=""
# hccl_run NAME ARGS...: hccl-test over ibverbs; its table in $OUT/NAME.
hccl_run() {
    local name=$1 rc=0
    shift
    echo "\$ HCCL_RS_TRANSPORT=ibverbs $HCCL_TEST $*"
    # HCCL_TEST is ours, not a setting of hccl-rs: not passed on
    HCCL_RS_TRANSPORT=ibverbs timeout "$HT_TIMEOUT" env -u HCCL_TEST "$HCCL_TEST" "$@" > "$OUT/$name" 2>&1 || rc=$?
    cat "$OUT/$name"
    if ((rc != 0)); then
        echo "hccl-test exited with $rc"
        return 1
    fi
}

hccl_figures() {
    section "hccl-test, HCCL_RS_TRANSPORT=ibverbs, all_reduce, 2 ranks (processes)"
    if [[ -z ${HCCL_TEST:-} ]]; then
        echo "skipped: HCCL_TEST is not set (HCCL_TEST=target/release/hccl-test tools/bench/rdma.sh)"
        H_NOTE="skipped (HCCL_TEST unset)"
        return 0
    fi
    env | grep '^HCCL_' | grep -v '^HCCL_TEST=' | sort | sed 's/^/env: /' || true
    local t b c p50 p99
    if hccl_run hccl-lat all_reduce -p 2 -b 8 -e 8 -n "$HT_LAT_ITERS" -w "$HT_LAT_WARMUP" -c 1 --transport process &&
        read -r t b c p50 p99 < <(table_row "$OUT/hccl-lat"); then
        H_LAT=$t H_LAT_P50=$p50 H_LAT_P99=$p99
        [[ $c == failed ]] && H_NOTE+="8 B check FAILED; "
    else
        H_NOTE+="8 B run failed; "
    fi
    if hccl_run hccl-bw all_reduce -p 2 -b 16M -e 16M -n "$HT_BW_ITERS" -w "$HT_BW_WARMUP" -c 1 --transport process &&
        read -r t b c p50 p99 < <(table_row "$OUT/hccl-bw"); then
        H_BUSBW=$b
        [[ $c == failed ]] && H_NOTE+="16 MiB check FAILED; "
    else
        H_NOTE+="16 MiB run failed; "
    fi
    return 0
}

MPI_OK=() MPI_NOTE="" MPI_N=0
# Given to every app context: UCX_LOG_LEVEL=info prints the lanes each
# endpoint uses (ep_cfg), the proof that the bytes went over rc_verbs/rxeN
# and not tcp or shm; with UCX_UD_TIMEOUT a UD wireup that cannot succeed
# fails in 10 s rather than 30. (-x applies to its own app context only:
# in "A : B" each side needs all of them.)
MPI_COMMON=(-x UCX_LOG_LEVEL=info -x UCX_UD_TIMEOUT=10s)

# mpi_try LABEL MPIRUN-ARGS...: one Open MPI + UCX run of mpi_bench
# all_reduce 8 B; prints the time and UCX's lanes, or the first error.
mpi_try() {
    local label=$1 rc=0 log t b c p50 p99 lanes err
    shift
    MPI_N=$((MPI_N + 1))
    log=$OUT/mpi-$MPI_N
    echo "-- $MPI_N. $label"
    echo "\$ mpirun $*"
    timeout "$MPI_TIMEOUT" mpirun --allow-run-as-root --oversubscribe --mca pml ucx --mca btl '^openib,ofi' \
        "$@" > "$log" 2>&1 || rc=$?
    lanes=$(grep -o 'ep_cfg\[1\]: .*' "$log" | sort -u | tr '\n' ' ' || true)
    if ((rc == 0)) && read -r t b c p50 p99 < <(table_row "$log"); then
        echo "   works: 8 B all_reduce avg $t us, p50 $p50 us, p99 $p99 us; lanes: ${lanes:-?}"
        MPI_OK+=("$MPI_N|$t|$p50|$p99|$label")
    else
        # the root cause is usually the Fatal line, not the first error
        err=$(grep -m1 'Fatal' "$log" || grep -m1 -E 'ERROR|Error|error' "$log" || tail -n 1 "$log")
        echo "   FAILS (exit $rc): $err"
        [[ -z $lanes ]] || echo "   lanes before it failed: $lanes"
        MPI_NOTE+="$MPI_N. exit $rc: $err
"
    fi
}

mpi_figures() {
    section "Open MPI + UCX in the VM: mpi_bench all_reduce 8 B, 2 ranks on this one host"
    if [[ $MPI != 1 ]]; then
        echo "skipped (MPI=0)"
        return 0
    fi
    echo "$(ompi_info --version | head -1); its UCX components:" \
        "$(ompi_info | grep -i 'mca.*: ucx' | awk '{ sub(/:/, "", $2); print $2 }' | tr '\n' ' ' || true)"
    # 7th argument 1: per-iteration spread, for p50 / p99
    local bench=("$RDMA_BENCH_MPI_BENCH" all_reduce 8 8 2 "$MPI_ITERS" "$MPI_WARMUP" 1)
    local rc=("${MPI_COMMON[@]}" -x "UCX_TLS=rc,self")
    # 1. as one would try first: both devices for both ranks, RC only
    #    (UD does the wireup). UCX 1.13 drops every UD packet from rxe:
    #    it reads the RoCE packet type (IPv4 or IPv6) from the completion's
    #    sl field, as mlx5 fills it; rxe leaves it 0, so UCX looks for the
    #    destination GID at the IPv6 offset of the GRH area, misses, and
    #    drops the packet ("UD endpoint ... unhandled timeout error").
    mpi_try "UCX_TLS=rc,self, UCX_NET_DEVICES=rxe0:1,rxe1:1" \
        -np 2 "${rc[@]}" -x UCX_NET_DEVICES=rxe0:1,rxe1:1 "${bench[@]}"
    # 2. the same without that check
    mpi_try "as 1 + UCX_UD_ETH_DGID_CHECK=n" \
        -np 2 "${rc[@]}" -x UCX_NET_DEVICES=rxe0:1,rxe1:1 -x UCX_UD_ETH_DGID_CHECK=n "${bench[@]}"
    # 3. one device per rank, like perftest: the traffic must cross the
    #    veth. (In 2 UCX pairs rxe0 with rxe0 and rxe1 with rxe1: each
    #    lane loops back inside one rxe device and never reaches the wire.)
    mpi_try "as 2, rank 0 on rxe0 only, rank 1 on rxe1 only (crosses the veth)" \
        -np 1 "${rc[@]}" -x UCX_UD_ETH_DGID_CHECK=n -x UCX_NET_DEVICES=rxe0:1 "${bench[@]}" \
        : -np 1 "${rc[@]}" -x UCX_UD_ETH_DGID_CHECK=n -x UCX_NET_DEVICES=rxe1:1 "${bench[@]}"
    # 4. rc_verbs named explicitly, UD for the wireup named too
    mpi_try "UCX_TLS=rc_verbs,ud_verbs,self + UCX_UD_ETH_DGID_CHECK=n" \
        -np 2 "${MPI_COMMON[@]}" -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=rxe0:1,rxe1:1 \
        -x UCX_UD_ETH_DGID_CHECK=n "${bench[@]}"
}

summary() {
    local rtt bw_gbs
    rtt=$(ratio "$LAT_TYP" 1 2)
    bw_gbs=$(ratio "$BW_MBS" 1e9 1048576)
    section "summary (VM CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) vCPUs; host CPU: ${RDMA_BENCH_HOST_CPU:-?})"
    echo "ib_write_lat 8 B:        t_typical ${LAT_TYP:--} us, t_avg ${LAT_AVG:--} us, p99 ${LAT_P99:--} us" \
        "(one way = half a round trip; RTT = 2 x t_typical = $rtt us)"
    echo "ib_write_bw 16 MiB:      ${BW_MBS:--} MB/s (MB = 2^20 B) = $bw_gbs GB/s (GB = 10^9 B, as hccl-test's)"
    if [[ -n ${HCCL_TEST:-} ]]; then
        echo "hccl all_reduce 8 B:     ${H_LAT:--} us avg, p50 ${H_LAT_P50:--} us, p99 ${H_LAT_P99:--} us;" \
            "avg / RTT = $(ratio "$H_LAT" "$rtt"), p50 / RTT = $(ratio "$H_LAT_P50" "$rtt")"
        echo "hccl all_reduce 16 MiB:  busbw ${H_BUSBW:--} GB/s;" \
            "/ ib_write_bw = $(ratio "$H_BUSBW" "$bw_gbs")"
    fi
    [[ -z $H_NOTE ]] || echo "hccl:                    $H_NOTE"
    local r n t p50 p99 label
    for r in "${MPI_OK[@]}"; do
        IFS='|' read -r n t p50 p99 label <<< "$r"
        echo "Open MPI+UCX 8 B ($n.):   $t us avg, p50 $p50 us, p99 $p99 us;" \
            "avg / RTT = $(ratio "$t" "$rtt"), p50 / RTT = $(ratio "$p50" "$rtt") [$label]"
    done
    if [[ $MPI == 1 && ${#MPI_OK[@]} == 0 ]]; then echo "Open MPI+UCX 8 B:        no configuration worked"; fi
    [[ -z $MPI_NOTE ]] || printf 'Open MPI+UCX failures:\n%s' "$MPI_NOTE"
}

machine
perftest_figures
hccl_figures
mpi_figures
summary
rm -rf "$OUT"
