#!/usr/bin/env bash
# Open MPI's mpirun across hosts that are network namespaces: makes the
# hosts (tools/netns.sh), writes a hostfile of their names with a slot per
# rank, runs mpirun with the launch agent that enters a namespace
# (tools/netns-agent.sh) and Open MPI's TCP traffic on the hosts' subnet,
# and removes the hosts whatever happens (exit, error, Ctrl-C).
#
#   tools/netns-mpirun.sh --hosts 2,1,3 -- ./prog args       # 6 ranks: 2, 1, 3 per host
#   tools/netns-mpirun.sh --hosts 2 -np 4 -- --mca btl self,vader,tcp ./prog
#   tools/netns-mpirun.sh --mpi mpich --hosts 2 -np 4 -- ./prog # MPICH's mpiexec
#
# Everything after `--` goes to mpirun (its own options, then the program).
# The wrapper adds: --allow-run-as-root, -np, --hostfile, the agent,
# plm_rsh_no_tree_spawn (each daemon is launched from the root namespace),
# oob_tcp_if_include and btl_tcp_if_include set to the hosts' subnet, and,
# for hccl-rs programs (init_from_env, hccl-test --transport process):
# HCCL_SOCKET_IFNAME==hccl0 (every host's interface) and a fresh
# HCCL_RS_ROOT_FILE for the rendezvous, unless the environment sets a
# rendezvous already. Ranks on one host share memory (Open MPI's vader,
# hccl-rs's shm); hosts talk TCP over veths on a bridge. With at least as
# many CPUs as hosts, each host gets a slice of them (HCCL_NETNS_CPUS, one
# list per host, applied by the agent with taskset) that is the binding
# (--bind-to none); a host with more ranks than CPUs has them yield.
#
# --mpi mpich runs Debian's MPICH instead (mpiexec.mpich, hydra): its ssh
# launcher execs the same agent, its control connections go to the
# bridge's address (-localhost), and its ranks' UCX talks TCP on the hosts'
# interface (UCX_NET_DEVICES=hccl0). UCX takes namespaces of one machine
# for one host (same boot id, /dev/shm and process table) and would reach
# a rank on another "host" through shared memory (an 8-byte AllReduce
# between two hosts measured 0.59 µs that way), so every pair uses TCP,
# inside a host too: UCX_TLS=self,tcp unless the environment sets UCX_TLS.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "$0")" && pwd)

usage() {
    cat <<'EOF'
usage: tools/netns-mpirun.sh [--mpi openmpi|mpich] --hosts SPEC [-np N] [--rate RATE] [--tag TAG] -- MPIRUN_ARGS...

  --hosts SPEC   H (hosts, with -np N ranks placed in consecutive blocks as
                 hccl-test --hosts does) or a list of ranks per host (2,1,3)
  -np N          ranks (with --hosts H; a list gives the count itself)
  --rate RATE    limit each host's link in both directions (tc htb: 1gbit, 100mbit)
  --tag TAG      namespace tag (default: mpi<pid>; a tag ending in this
                 script's process id is swept once the script is gone)
  --mpi MPI      openmpi (default: mpirun) or mpich (mpiexec.mpich)

Runs: mpirun --allow-run-as-root -np N --hostfile F --mca plm_rsh_agent
tools/netns-agent.sh --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include
SUBNET --mca btl_tcp_if_include SUBNET [-x HCCL_SOCKET_IFNAME -x
HCCL_RS_ROOT_FILE] MPIRUN_ARGS..., with the hosts' names, addresses and
subnet in HCCL_NETNS_HOSTS, _ADDRS, _SUBNET for MPIRUN_ARGS to use.
Exits with mpirun's status. Needs root, iproute2 and Open MPI.
EOF
}

die() {
    echo "netns-mpirun.sh: $*" >&2
    exit 1
}

spec="" np="" rate="" tag="" mpi=openmpi
while [ $# -gt 0 ]; do
    case $1 in
        --mpi) mpi=${2:?--mpi needs a value}; shift 2 ;;
        --hosts) spec=${2:?--hosts needs a value}; shift 2 ;;
        -np | -n | --np) np=${2:?-np needs a value}; shift 2 ;;
        --rate) rate=${2:?--rate needs a value}; shift 2 ;;
        --tag) tag=${2:?--tag needs a value}; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        --) shift; break ;;
        *) usage >&2; die "unknown option '$1' (mpirun's options go after --)" ;;
    esac
done
[ $# -ge 1 ] || { usage >&2; die "nothing to run: give mpirun's arguments after --"; }
[ -n "$spec" ] || die "--hosts is required"
case $mpi in
    openmpi) command -v mpirun >/dev/null 2>&1 || die "mpirun not found: apt-get install -y openmpi-bin" ;;
    mpich) command -v mpiexec.mpich >/dev/null 2>&1 || die "mpiexec.mpich not found: apt-get install -y mpich" ;;
    *) die "--mpi $mpi: openmpi or mpich" ;;
esac

# slots per host
case $spec in
    *,*)
        IFS=, read -r -a slots <<<"$spec"
        total=0
        for s in "${slots[@]}"; do
            [[ "$s" =~ ^[0-9]+$ ]] && [ "$s" -ge 1 ] || die "--hosts $spec: every count must be at least 1"
            total=$((total + s))
        done
        [ -z "$np" ] || [ "$np" -eq "$total" ] || die "--hosts $spec places $total ranks, but -np is $np"
        np=$total
        ;;
    *)
        [[ "$spec" =~ ^[0-9]+$ ]] && [ "$spec" -ge 1 ] || die "--hosts '$spec': a host count or a list like 2,1,3"
        [ -n "$np" ] || np=$spec
        [[ "$np" =~ ^[0-9]+$ ]] && [ "$np" -ge "$spec" ] || die "-np $np: at least one rank per host ($spec hosts)"
        # consecutive blocks, rank r on host r*H/N (as hccl-test --hosts)
        slots=()
        for ((h = 0; h < spec; h++)); do slots+=(0); done
        for ((r = 0; r < np; r++)); do
            h=$((r * spec / np))
            slots[h]=$((slots[h] + 1))
        done
        ;;
esac
hosts=${#slots[@]}
tag=${tag:-mpi$$}

work=$(mktemp -d "${TMPDIR:-/tmp}/hccl-netns-mpirun.XXXXXX")
# teardown whatever happens from here on
cleanup() {
    "$here/netns.sh" down --tag "$tag" || true
    rm -rf "$work"
}
trap cleanup EXIT
child=""
stop() {
    # mpirun runs in the background (below): pass the signal on; mpirun
    # then stops its daemons and ranks
    [ -z "$child" ] || { kill -TERM "$child" 2>/dev/null; wait "$child"; }
    exit "$1"
}
trap 'stop 130' INT
trap 'stop 143' TERM
trap 'stop 129' HUP

"$here/netns.sh" sweep >/dev/null || true
rate_arg=()
[ -z "$rate" ] || rate_arg=(--rate "$rate")
"$here/netns.sh" up "$hosts" --tag "$tag" "${rate_arg[@]}" >"$work/hosts.txt"
subnet=$("$here/netns.sh" subnet --tag "$tag")
hostfile=$work/hostfile
: >"$hostfile"
i=0
while read -r name _; do
    echo "$name slots=${slots[$i]} max_slots=${slots[$i]}" >>"$hostfile"
    i=$((i + 1))
done <"$work/hosts.txt"

export HCCL_NETNS_TAG=$tag
HCCL_NETNS_HOSTS=$(awk '{print $1}' "$work/hosts.txt" | xargs)
HCCL_NETNS_ADDRS=$(awk '{print $2}' "$work/hosts.txt" | xargs)
export HCCL_NETNS_HOSTS HCCL_NETNS_ADDRS HCCL_NETNS_SUBNET=$subnet

# Each host gets CPUs of its own when there are enough: a slice of this
# script's mask, which the agent applies with taskset, so each daemon and
# its ranks bind inside their host (as on real hosts) instead of every
# host's first rank taking the first CPU. With fewer CPUs than hosts they
# share, and nothing is bound.
bind_args=()
read -r -a allowed < <(awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status |
    tr , '\n' | awk -F- '{ if (NF == 2) for (i = $1; i <= $2; i++) print i; else print $1 }' | xargs)
if [ "${#allowed[@]}" -ge "$hosts" ] && command -v taskset >/dev/null 2>&1; then
    lists=()
    oversubscribed=0
    for ((h = 0; h < hosts; h++)); do
        lo=$((h * ${#allowed[@]} / hosts))
        hi=$(((h + 1) * ${#allowed[@]} / hosts))
        list=$(IFS=,; echo "${allowed[*]:lo:hi-lo}")
        lists+=("$list")
        [ "${slots[$h]}" -le $((hi - lo)) ] || oversubscribed=1
    done
    export HCCL_NETNS_CPUS="${lists[*]}"
    # the slice is the binding: mpirun would bind every host's first rank
    # to the first core of the machine (it maps all hosts alike)
    bind_args=(--bind-to none)
    # more ranks than CPUs on a host: its ranks must yield while they wait
    # (hccl-rs does on its own)
    [ "$oversubscribed" -eq 0 ] || bind_args+=(--mca mpi_yield_when_idle 1)
else
    unset HCCL_NETNS_CPUS
    bind_args=(--bind-to none)
    [ -n "${HCCL_RS_CPU_AFFINITY:-}" ] || { export HCCL_RS_CPU_AFFINITY=off; bind_args+=(-x HCCL_RS_CPU_AFFINITY); }
fi

# hccl-rs ranks: the host's interface, and a rendezvous unless one is set
hccl_env=()
if [ -z "${HCCL_IF_IP:-}${HCCL_SOCKET_IFNAME:-}" ]; then
    export HCCL_SOCKET_IFNAME="=hccl0"
    hccl_env+=(-x HCCL_SOCKET_IFNAME)
fi
if [ -z "${HCCL_ROOT_ADDR:-}${MASTER_ADDR:-}${HCCL_RS_ROOT_FILE:-}" ]; then
    export HCCL_RS_ROOT_FILE=$work/root.bin
    hccl_env+=(-x HCCL_RS_ROOT_FILE)
fi

# in the background, so a signal to this script is acted on at once (bash
# runs traps only between foreground commands); stdin stays mpirun's
set +e
if [ "$mpi" = mpich ]; then
    hosts_arg=$(i=0; while read -r name _; do printf '%s%s:%s' "$([ $i -gt 0 ] && echo ,)" "$name" "${slots[$i]}"; i=$((i + 1)); done <"$work/hosts.txt")
    genv=()
    for v in HCCL_SOCKET_IFNAME HCCL_RS_ROOT_FILE HCCL_NETNS_HOSTS HCCL_NETNS_ADDRS HCCL_NETNS_SUBNET; do
        [ -z "${!v:-}" ] || genv+=(-genv "$v" "${!v}")
    done
    mpiexec.mpich -launcher ssh -launcher-exec "$here/netns-agent.sh" \
        -hosts "$hosts_arg" -n "$np" -localhost "$("$here/netns.sh" addr bridge --tag "$tag")" \
        -genv UCX_NET_DEVICES hccl0 -genv UCX_TLS "${UCX_TLS:-self,tcp}" "${genv[@]}" "$@" <&0 &
else
    mpirun --allow-run-as-root -np "$np" --hostfile "$hostfile" \
        --mca plm_rsh_agent "$here/netns-agent.sh" --mca plm_rsh_no_tree_spawn 1 \
        --mca oob_tcp_if_include "$subnet" --mca btl_tcp_if_include "$subnet" \
        "${bind_args[@]}" "${hccl_env[@]}" "$@" <&0 &
fi
child=$!
wait "$child"
status=$?
set -e
exit $status
