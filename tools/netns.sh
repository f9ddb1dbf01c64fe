#!/usr/bin/env bash
# Test hosts as network namespaces (docs/launching.md, "Hosts as network
# namespaces").
#
# A host is a network namespace `hccl-TAG-hN` with loopback up and one
# veth (`hccl0` inside) to a bridge `hcclbK` in the root namespace.
# Addresses come from the benchmarking range 198.18.0.0/15: host N is
# 198.18.K.(N+1)/24 and the bridge 198.18.K.254, so processes in the root
# namespace (mpirun and its daemons' call-home) reach every host. K is the
# first bridge index not taken (the bridge's name claims it, so runs side
# by side get different subnets); the bridge's alias is `hccl-TAG`.
# `--rate` limits each host's link in both directions with tc htb.
#
# Hosts whose TAG is letters followed by a process id (`ht4711`, made by
# `hccl-test --netns`; `sh4711`, made by `run` below) belong to that
# process: `sweep` (and every `hccl-test --netns`) removes them once it is
# gone.
#
# Needs root and iproute2 (`ip`, and `tc` for --rate).
set -euo pipefail
shopt -s inherit_errexit

usage() {
    cat <<'EOF'
usage: tools/netns.sh COMMAND [ARGS]

  up H [--rate RATE] [--tag TAG]   make H hosts hccl-TAG-h0 .. h(H-1); print name and address of each
  down [--tag TAG]                 remove the hosts and the bridge of TAG (nothing there: nothing done)
  exec N [--tag TAG] -- CMD...     run CMD in host N (N: index or namespace name)
  addr N [--tag TAG]               print host N's address (N = bridge: the root namespace's side)
  subnet [--tag TAG]               print the hosts' subnet (198.18.K.0/24)
  list                             hccl-* namespaces and hcclb* bridges present, with their tags
  sweep                            remove hosts whose owner process (the number ending TAG) is gone
  run H [--rate RATE] [--tag TAG] -- CMD...
                                   up, run CMD in the root namespace, down, whatever happens
                                   (exit, error, Ctrl-C); CMD sees HCCL_NETNS_TAG, _HOSTS (names),
                                   _ADDRS, _SUBNET and _BRIDGE_ADDR; exits with CMD's status

TAG: lowercase letters and digits, at most 24 (default: net; for run: sh<pid>).
RATE: tc's syntax, e.g. 1gbit, 100mbit; applied to both directions of every host's link.

examples:
  tools/netns.sh up 2 --rate 1gbit --tag demo
  tools/netns.sh exec 1 --tag demo -- ping -c 1 "$(tools/netns.sh addr 0 --tag demo)"
  tools/netns.sh down --tag demo
  tools/netns.sh run 3 -- bash -c 'echo $HCCL_NETNS_HOSTS'
EOF
}

die() {
    echo "netns.sh: $*" >&2
    exit 1
}

need_root() {
    command -v ip >/dev/null 2>&1 || die "'ip' (iproute2) not found: apt-get install -y iproute2"
    [ "$(id -u)" -eq 0 ] || die "network namespaces need root (running as uid $(id -u))"
}

check_tag() {
    [[ "$1" =~ ^[a-z0-9]{1,24}$ ]] || die "tag '$1' must be 1 to 24 lowercase letters or digits"
}

# The bridge of TAG (by its alias), or nothing.
bridge_of() {
    local f
    for f in /sys/class/net/hcclb*/ifalias; do
        [ -e "$f" ] || continue
        if [ "$(cat "$f")" = "hccl-$1" ]; then
            basename "$(dirname "$f")"
            return 0
        fi
    done
}

# The namespaces of TAG, in host order.
hosts_of() {
    ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^hccl-$1-h[0-9]+\$" |
        awk -F-h '{print $NF, $0}' | sort -n | awk '{print $2}' || true
}

down() {
    local tag=$1 b k ns n
    b=$(bridge_of "$tag")
    for ns in $(hosts_of "$tag"); do
        n=${ns##*-h}
        # the root side first, synchronously: a namespace's deletion frees
        # its veth pair only later, and the next run may reuse the name
        if [ -n "$b" ]; then
            k=${b#hcclb}
            ip link del "hcclv${k}h${n}" 2>/dev/null || true
        fi
        ip netns del "$ns" 2>/dev/null || true
    done
    [ -n "$b" ] && ip link del "$b" 2>/dev/null || true
}

up() {
    local hosts=$1 rate=$2 tag=$3 k b n ns err
    [[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le 253 ] ||
        die "host count '$hosts' must be 1 to 253"
    [ -z "$(bridge_of "$tag")" ] && [ -z "$(hosts_of "$tag")" ] ||
        die "hosts of tag '$tag' exist already (tools/netns.sh down --tag $tag)"
    if [ -n "$rate" ]; then
        command -v tc >/dev/null 2>&1 || die "--rate needs 'tc' (iproute2)"
    fi
    # claim a subnet: the first bridge name that is free and whose subnet
    # no interface uses
    b=""
    for k in $(seq 0 255); do
        [ -n "$(ip -4 -o addr show to "198.18.$k.0/24" 2>/dev/null)" ] && continue
        if err=$(ip link add "hcclb$k" type bridge 2>&1); then
            b=hcclb$k
            break
        fi
        case $err in *"File exists"*) continue ;; *) die "creating bridge hcclb$k: $err" ;; esac
    done
    [ -n "$b" ] || die "no free bridge index (hcclb0..hcclb255 taken)"
    # from here on a failure removes what was made
    trap 'down "$tag"' ERR
    ip link set "$b" alias "hccl-$tag"
    ip addr add "198.18.$k.254/24" dev "$b"
    ip link set "$b" up
    for n in $(seq 0 $((hosts - 1))); do
        ns=hccl-$tag-h$n
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip link add "hcclv${k}h${n}" type veth peer name hccl0 netns "$ns"
        ip link set "hcclv${k}h${n}" master "$b" up
        ip -n "$ns" addr add "198.18.$k.$((n + 1))/24" dev hccl0
        ip -n "$ns" link set hccl0 up
        if [ -n "$rate" ]; then
            # htb on both ends: into the host (root side's egress) and out of it
            tc qdisc add dev "hcclv${k}h${n}" root handle 1: htb default 1
            tc class add dev "hcclv${k}h${n}" parent 1: classid 1:1 htb rate "$rate" ceil "$rate" quantum 60000
            tc -n "$ns" qdisc add dev hccl0 root handle 1: htb default 1
            tc -n "$ns" class add dev hccl0 parent 1: classid 1:1 htb rate "$rate" ceil "$rate" quantum 60000
        fi
        echo "$ns 198.18.$k.$((n + 1))"
    done
    trap - ERR
}

# Host N of TAG: its namespace name (N an index or a name).
host_name() {
    case $1 in
        hccl-*) echo "$1" ;;
        *[!0-9]* | "") die "host '$1' is neither an index nor a namespace name" ;;
        *) echo "hccl-$2-h$1" ;;
    esac
}

subnet_k() {
    local b
    b=$(bridge_of "$1")
    [ -n "$b" ] || die "no hosts of tag '$1' (tools/netns.sh up H --tag $1)"
    echo "${b#hcclb}"
}

sweep() {
    local f tag pid ns
    for f in /sys/class/net/hcclb*/ifalias; do
        [ -e "$f" ] || continue
        tag=$(cat "$f")
        tag=${tag#hccl-}
        [[ "$tag" =~ ^[a-z]+([0-9]+)$ ]] || continue
        pid=${BASH_REMATCH[1]}
        [ -d "/proc/$pid" ] || { echo "sweep: tag $tag (process $pid gone)"; down "$tag"; }
    done
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^hccl-[a-z]+[0-9]+-h[0-9]+$' || true); do
        tag=${ns#hccl-}
        tag=${tag%-h*}
        pid=${tag##*[a-z]}
        [ -d "/proc/$pid" ] || { echo "sweep: $ns (process $pid gone)"; ip netns del "$ns" 2>/dev/null || true; }
    done
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
    -h | --help | help | "") usage; [ -n "$cmd" ]; exit ;;
esac

# common options; positional arguments before `--`, the rest is CMD
tag="" rate="" pos=() rest=()
while [ $# -gt 0 ]; do
    case $1 in
        --tag) tag=${2:?--tag needs a value}; shift 2 ;;
        --tag=*) tag=${1#--tag=}; shift ;;
        --rate) rate=${2:?--rate needs a value}; shift 2 ;;
        --rate=*) rate=${1#--rate=}; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; rest=("$@"); break ;;
        *) pos+=("$1"); shift ;;
    esac
done

case $cmd in
    up)
        [ ${#pos[@]} -eq 1 ] || die "usage: up H [--rate RATE] [--tag TAG]"
        tag=${tag:-net}; check_tag "$tag"; need_root
        up "${pos[0]}" "$rate" "$tag"
        ;;
    down)
        tag=${tag:-net}; check_tag "$tag"; need_root
        down "$tag"
        ;;
    exec)
        [ ${#pos[@]} -eq 1 ] && [ ${#rest[@]} -ge 1 ] || die "usage: exec N [--tag TAG] -- CMD..."
        tag=${tag:-net}; check_tag "$tag"; need_root
        exec ip netns exec "$(host_name "${pos[0]}" "$tag")" "${rest[@]}"
        ;;
    addr)
        [ ${#pos[@]} -eq 1 ] || die "usage: addr N [--tag TAG]"
        tag=${tag:-net}; check_tag "$tag"
        k=$(subnet_k "$tag")
        case ${pos[0]} in
            bridge) echo "198.18.$k.254" ;;
            *)
                ns=$(host_name "${pos[0]}" "$tag")
                ip netns list | awk '{print $1}' | grep -qx "$ns" || die "no host $ns"
                echo "198.18.$k.$((${ns##*-h} + 1))"
                ;;
        esac
        ;;
    subnet)
        tag=${tag:-net}; check_tag "$tag"
        echo "198.18.$(subnet_k "$tag").0/24"
        ;;
    list)
        for f in /sys/class/net/hcclb*/ifalias; do
            [ -e "$f" ] || continue
            b=$(basename "$(dirname "$f")")
            echo "bridge $b tag $(cat "$f" | sed 's/^hccl-//') subnet 198.18.${b#hcclb}.0/24"
        done
        ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^hccl-' | sed 's/^/netns /' || true
        ;;
    sweep)
        need_root
        sweep
        ;;
    run)
        [ ${#pos[@]} -eq 1 ] && [ ${#rest[@]} -ge 1 ] || die "usage: run H [--rate RATE] [--tag TAG] -- CMD..."
        tag=${tag:-sh$$}; check_tag "$tag"; need_root
        # teardown whatever happens from here: exit, error, Ctrl-C, kill
        trap 'down "$tag"' EXIT
        child=""
        stop() {
            # CMD runs in the background (below): pass the signal on
            [ -z "$child" ] || { kill -TERM "$child" 2>/dev/null; wait "$child"; }
            exit "$1"
        }
        trap 'stop 130' INT
        trap 'stop 143' TERM
        trap 'stop 129' HUP
        up "${pos[0]}" "$rate" "$tag" >/dev/null
        k=$(subnet_k "$tag")
        export HCCL_NETNS_TAG=$tag
        HCCL_NETNS_HOSTS=$(hosts_of "$tag" | xargs)
        HCCL_NETNS_ADDRS=$(for n in $(seq 1 "${pos[0]}"); do echo "198.18.$k.$n"; done | xargs)
        export HCCL_NETNS_HOSTS HCCL_NETNS_ADDRS
        export HCCL_NETNS_SUBNET=198.18.$k.0/24 HCCL_NETNS_BRIDGE_ADDR=198.18.$k.254
        # in the background, so a signal to this script is acted on at
        # once (bash runs traps only between foreground commands); stdin
        # stays CMD's
        set +e
        "${rest[@]}" <&0 &
        child=$!
        wait "$child"
        status=$?
        set -e
        exit $status
        ;;
    *)
        usage >&2
        die "unknown command '$cmd'"
        ;;
esac
