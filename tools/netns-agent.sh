#!/bin/sh
# Open MPI's launch agent for hosts that are network namespaces
# (tools/netns.sh): mpirun calls `AGENT [OPTIONS] HOST COMMAND...` the way
# it would call ssh; this runs COMMAND (a shell command line, as ssh hands
# it to the remote shell) inside the namespace named HOST, with HOST as its
# hostname (a UTS namespace of its own). Used by tools/netns-mpirun.sh as
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
exec ip netns exec "$host" unshare --uts /bin/sh -c 'hostname "$1" && shift && exec /bin/sh -c "$*"' netns-agent "$host" "$@"
