#!/bin/sh
# Open MPI's launch agent for hosts that are network namespaces
# (tools/netns.sh): mpirun calls `AGENT [OPTIONS] HOST COMMAND...` the way
# it would call ssh; this runs COMMAND (a shell command line, as ssh hands
# it to the remote shell) inside the namespace named HOST, with HOST as its
# hostname (a UTS namespace of its own) and, if HCCL_NETNS_CPUS gives the
# hosts CPU lists, on its host's CPUs. Used by tools/netns-mpirun.sh as
# `--mca plm_rsh_agent`.
#
# The hostname matters: Open MPI names its session directory and its
# shared-memory (vader) segments after the host, so daemons on two
# namespaces that share one hostname would map each other's segments.
while [ $# -gt 0 ]; do
    case $1 in
        -*) shift ;;  # ssh-style options mpirun may add: nothing to do here
        *) break ;;
    esac
done
if [ $# -lt 2 ]; then
    echo "netns-agent.sh: usage: netns-agent.sh HOST COMMAND..." >&2
    exit 255
fi
host=$1
shift
# the host's CPUs, when netns-mpirun.sh gave each host a slice
# (HCCL_NETNS_CPUS: one list per host, in host order)
pin=""
if [ -n "${HCCL_NETNS_CPUS:-}" ]; then
    i=0
    for list in $HCCL_NETNS_CPUS; do
        [ "$i" = "${host##*-h}" ] && pin="taskset -c $list"
        i=$((i + 1))
    done
fi
exec ip netns exec "$host" unshare --uts $pin /bin/sh -c 'hostname "$1" && shift && exec /bin/sh -c "$*"' netns-agent "$host" "$@"
