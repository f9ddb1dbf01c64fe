#!/usr/bin/env bash
# tools/rxe-vm/run.sh CMD [ARGS...]
#
# Runs CMD inside a throwaway QEMU VM that has two Soft-RoCE (rdma_rxe)
# devices cabled to each other, so ibverbs code can be tested on a machine
# with no RDMA hardware (tools/rxe-vm/README.md):
#
#     rxe0 -- veth0 10.10.0.1  <== veth pair, MTU 9000 ==>  veth1 10.10.0.2 -- rxe1
#
# Use GID index 1 on both devices (::ffff:10.10.0.x, RoCE v2).
#
# The VM boots the host's own Debian kernel and sees the host's root file
# system (9p, read-only, with a throwaway tmpfs overlay on top). CMD runs
# as root in the VM, in the caller's working directory and with the
# caller's exported environment, plus RXE_VM=1, RXE_VM_GID_INDEX=1 and
# RXE_VM_ACCEL (tcg or kvm: what the VM runs on).
# Its stdin is /dev/null; its stdout and stderr are streamed to ours. The
# VM powers off when CMD ends, and run.sh exits with CMD's status, or with
# 125 when the VM could not run CMD (boot failure, rxe setup failure,
# timeout); the tail of the VM's console is printed then.
#
# Cargo runs every test binary through it with
#     CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER=$PWD/tools/rxe-vm/run.sh cargo test
#
# Knobs (environment):
#   RXE_VM_MEM=2G          guest memory (qemu -m)
#   RXE_VM_SMP=2           guest CPUs (qemu -smp)
#   RXE_VM_CPU=...         qemu -cpu model for TCG; default x86-64-v2 level,
#                          no AVX (see CPU_TCG below). "max" adds AVX2.
#   RXE_VM_ACCEL=auto      tcg | kvm | auto (kvm when the host CPU shows
#                          vmx/svm and /dev/kvm is usable)
#   RXE_VM_TIMEOUT=900     hard limit in seconds; qemu is killed after it (exit 125)
#   RXE_VM_RW=0            1: mount the host root read-write, no overlay:
#                          CMD's writes reach the host
#   RXE_VM_KEEP=0          1: keep the job directory (console log, setup log)
#   RXE_VM_VERBOSE=0       1: print kernel, timings and the rxe setup log
#   RXE_VM_CACHE=/var/tmp/rxe-vm   where the extracted vmlinux is cached
#
# Needs root (apt-get for missing packages, reading /boot, 9p export of /).
set -euo pipefail
shopt -s inherit_errexit

# Debian packages the VM needs on the host: qemu, a kernel that has
# rdma_rxe and its modules, a static busybox for the initramfs, the
# userspace verbs stack (the rxe provider is in ibverbs-providers) and the
# tools used to build the initramfs and set up the links.
PACKAGES="qemu-system-x86 linux-image-amd64 busybox-static rdma-core ibverbs-providers ibverbs-utils iproute2 kmod cpio xz-utils"

# x86-64-v2 (what Debian's and Rust's default targets assume, and more)
# but no AVX: with AVX glibc picks vector memcpy variants that TCG runs
# about 7x slower than the SSE ones.
CPU_TCG="qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt,+cx16"

# Where the guest sees the job directory (a second 9p share).
GUEST_JOB=/run/rxe-job

# Modules the initramfs loads (with their dependencies, resolved on the
# host): virtio PCI + 9p for the file systems, overlay for the throwaway
# root, veth for the cable, crc32_generic because rxe asks the crypto API
# for "crc32" (the ICRC) and nothing else provides it, rdma_rxe itself,
# ib_uverbs for /dev/infiniband/uverbsN and rdma_ucm for librdmacm users.
MODULES="virtio_pci 9pnet_virtio 9p overlay veth crc32_generic rdma_rxe ib_uverbs rdma_ucm"

log() { echo "[rxe-vm] $*" >&2; }

# =============================================================== guest side
# Runs inside the VM, chrooted into the host's root, as root.

# Writes VALUE to the sysctl KEY (dotted name; interface names have no dots).
set_sysctl() { echo "$2" > "/proc/sys/${1//.//}"; }

uptime_s() { cut -d' ' -f1 /proc/uptime; }

# The veth pair and the two rxe devices on it. Every exec costs ~50 ms
# under TCG, so ip and rdma run once each, in batch mode.
guest_setup_rxe() {
    # Both devices stay in init_net: 6.1's rxe opens its UDP/4791 socket
    # and looks up routes in init_net whatever namespace its netdev is in.
    # rxe routes with the output interface set to its own netdev, so the
    # peer's address (a 'local' route, on the other veth) is reached
    # on-link through this veth and packets really cross the pair. The
    # receiving side then sees a packet from one of its own addresses,
    # which it drops unless accept_local=1 and rp_filter=0 (ARP stays
    # INCOMPLETE otherwise). Set on all/default before the veths exist
    # so they inherit it, and on the veths themselves below.
    local c i
    for c in all default; do
        set_sysctl "net.ipv4.conf.$c.accept_local" 1
        set_sysctl "net.ipv4.conf.$c.rp_filter" 0
    done
    # MTU 9000 so that rxe reports active_mtu 4096 (the IB MTU below it).
    ip link add veth0 mtu 9000 type veth peer name veth1 mtu 9000
    for i in 0 1; do
        set_sysctl "net.ipv4.conf.veth$i.accept_local" 1
        set_sysctl "net.ipv4.conf.veth$i.rp_filter" 0
        # No IPv6 (before the link is up, so no fe80 address appears):
        # GID 1 is then the IPv4 one on both devices, always.
        set_sysctl "net.ipv6.conf.veth$i.disable_ipv6" 1
    done
    ip -batch - <<'EOF_IP'
link set lo up
addr add 10.10.0.1/32 dev veth0
addr add 10.10.0.2/32 dev veth1
link set veth0 up
link set veth1 up
EOF_IP
    rdma -b /dev/stdin <<'EOF_RDMA'
link add rxe0 type rxe netdev veth0
link add rxe1 type rxe netdev veth1
EOF_RDMA
    for i in 0 1; do
        guest_wait_gid "rxe$i" "0000:0000:0000:0000:0000:ffff:0a0a:000$((i + 1))"
    done
}

# Waits until DEV's port is ACTIVE and its GID 1 is WANT, RoCE v2 (the GID
# table may fill in after 'rdma link add' returns); fails after ~5 s.
guest_wait_gid() {
    local dev=$1 want=$2 port=/sys/class/infiniband/$1/ports/1 n gid="" type="" state=""
    for ((n = 0; n < 100; n++)); do
        # $(<f): no exec, unlike cat
        gid=$(< "$port/gids/1") 2>/dev/null || gid=""
        type=$(< "$port/gid_attrs/types/1") 2>/dev/null || type=""
        state=$(< "$port/state") 2>/dev/null || state=""
        if [[ $gid == "$want" && $type == "RoCE v2" && $state == *ACTIVE* ]]; then
            echo "$dev on $(< "/sys/class/infiniband/$dev/ports/1/gid_attrs/ndevs/1"): port $state," \
                "gid[1] $gid ($type), gid[0] $(< "$port/gids/0")"
            return 0
        fi
        # bash's read -t as a sleep without an exec
        read -r -t 0.05 <> <(:) || true
    done
    echo "$dev: gid[1] is '$gid' ($type), port '$state'; wanted $want (RoCE v2), ACTIVE"
    return 1
}

# Entry point in the VM: set up, run the job's command, leave its status.
guest_main() {
    export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    local jd=$GUEST_JOB rc
    echo "boot $(uptime_s)" > "$jd/times"
    # A failing setup step must not take the guest down before it has
    # written a status: run it in a subshell that stops at the first
    # failure. (Not as an if condition: errexit is off in there.)
    set +e
    (set -e; guest_setup_rxe) > "$jd/setup.log" 2>&1
    rc=$?
    set -e
    if ((rc != 0)); then
        rc=125
        echo "[rxe-vm] rxe setup failed; see the setup log" >> "$jd/stderr"
    fi
    echo "setup $(uptime_s)" >> "$jd/times"
    if ((rc == 0)); then
        # the caller's environment (a variable bash refuses, say a
        # read-only one, is skipped, not fatal), then what the VM tells CMD
        set +e
        # shellcheck disable=SC1091  # written by the host side
        source "$jd/env.sh" 2>> "$jd/stderr"
        set -e
        export RXE_VM=1 RXE_VM_GID_INDEX=1
        # MPI and verbs users register memory; root has CAP_IPC_LOCK
        # anyway, but children that drop it should not hit 8 MiB.
        ulimit -l unlimited || true
        hostname rxe-vm 2>/dev/null || true
        local cwd argv
        cwd=$(< "$jd/cwd")
        mapfile -d '' -t argv < "$jd/argv"
        if ! cd -- "$cwd" 2>/dev/null; then
            echo "[rxe-vm] cwd $cwd does not exist in the VM (its /run, /dev, /proc and /sys are its own)" >> "$jd/stderr"
            rc=125
        else
            set +e
            "${argv[@]}" < /dev/null > "$jd/stdout" 2>> "$jd/stderr"
            rc=$?
            set -e
        fi
    fi
    echo "cmd $(uptime_s)" >> "$jd/times"
    # rename: the host never reads a half-written status
    echo "$rc" > "$jd/status.tmp"
    mv "$jd/status.tmp" "$jd/status"
    sync
}

if [[ ${1:-} == --guest ]]; then
    guest_main
    exit 0
fi

# ================================================================ host side

JOB=""         # the job directory (shared with the guest)
QEMU_PID=""    # the timeout(1) wrapping qemu
TAIL_PIDS=()   # the tails streaming CMD's output

# Stops the VM and the tails, removes the job directory. Runs on every
# exit (the EXIT trap), also after Ctrl-C or a failure.
# shellcheck disable=SC2317  # only called from the trap
cleanup() {
    local pid
    # TERM to timeout(1) is passed on to qemu
    for pid in "$QEMU_PID" "${TAIL_PIDS[@]}"; do
        if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; fi
    done
    for pid in "$QEMU_PID" "${TAIL_PIDS[@]}"; do
        if [[ -n $pid ]]; then wait "$pid" 2>/dev/null || true; fi
    done
    if [[ -n $JOB ]]; then
        if [[ ${RXE_VM_KEEP:-0} == 1 ]]; then
            log "kept the job directory $JOB"
        else
            rm -rf -- "$JOB"
        fi
    fi
}

# Installs the Debian packages of PACKAGES that are missing (root only).
ensure_packages() {
    local p missing=()
    for p in $PACKAGES; do
        [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true) == "install ok installed" ]] ||
            missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    if ((EUID != 0)); then
        log "missing Debian packages: ${missing[*]} (run as root to have them installed)"
        exit 125
    fi
    log "installing ${missing[*]}"
    {
        apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    } >&2 || { log "apt-get failed"; exit 125; }
}

# The newest installed kernel that has both a /boot image and rdma_rxe.
pick_kernel() {
    local v best=""
    for v in /lib/modules/*/; do
        v=$(basename "$v")
        [[ -f /boot/vmlinuz-$v ]] || continue
        modprobe -S "$v" --show-depends rdma_rxe > /dev/null 2>&1 || continue
        if [[ -z $best ]] || [[ $(printf '%s\n%s\n' "$best" "$v" | sort -V | tail -1) == "$v" ]]; then
            best=$v
        fi
    done
    [[ -n $best ]] || { log "no kernel with rdma_rxe in /boot + /lib/modules (apt-get install linux-image-amd64)"; exit 125; }
    echo "$best"
}

# Prints the kernel image to boot: the ELF vmlinux unpacked from the
# bzImage, cached; else the bzImage. QEMU boots an ELF vmlinux through its
# PVH entry, which skips the BIOS real-mode path and, above all, the
# guest's own XZ decompression: ~2.5 s less per boot under TCG.
kernel_image() {
    local kver=$1 bz=/boot/vmlinuz-$1 cache=${RXE_VM_CACHE:-/var/tmp/rxe-vm}
    # the mtime is in the name: a reinstalled kernel of the same ABI
    # version gets a fresh extraction
    local elf tmp off
    elf=$cache/vmlinux-$kver-$(stat -c %Y "$bz")
    if [[ ! -s $elf ]]; then
        mkdir -p "$cache"
        tmp=$(mktemp "$cache/.vmlinux.XXXXXX")
        # The payload is the first XZ stream in the bzImage. (xz reads from
        # a process substitution, not a pipe: it stops at the end of the
        # stream, and pipefail would count tail's SIGPIPE as a failure.)
        off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$bz" | head -1 | cut -d: -f1 || true)
        if [[ -n $off ]] &&
            xz -dc --single-stream < <(tail -c "+$((off + 1))" "$bz") > "$tmp" 2>/dev/null &&
            cmp -s -n 4 "$tmp" <(printf '\177ELF'); then
            chmod 644 "$tmp" # mktemp's 0600 would lock other users out of the cache
            mv -f "$tmp" "$elf" # atomic: concurrent runs see all or nothing
        else
            rm -f "$tmp"
            [[ ${RXE_VM_VERBOSE:-0} == 1 ]] && log "could not unpack $bz; booting the bzImage (slower)"
            echo "$bz"
            return
        fi
    fi
    echo "$elf"
}

# write_job ACCEL CMD...: writes what the guest needs to run CMD: argv
# (NUL-separated, so no quoting games), cwd, the exported environment,
# the RW switch.
write_job() {
    local accel=$1
    shift
    printf '%s\0' "$@" > "$JOB/argv"
    pwd > "$JOB/cwd"
    local name
    while read -r name; do
        case $name in
            # bash's own (some read-only) and those the guest sets itself
            PWD | OLDPWD | SHLVL | _ | SHELLOPTS | BASHOPTS | RXE_VM | RXE_VM_GID_INDEX | RXE_VM_ACCEL) continue ;;
        esac
        printf 'export %s=%q\n' "$name" "${!name}"
    done < <(compgen -e) > "$JOB/env.sh"
    printf 'export RXE_VM_ACCEL=%q\n' "$accel" >> "$JOB/env.sh"
    echo "${RXE_VM_RW:-0}" > "$JOB/rw"
    : > "$JOB/stdout"
    : > "$JOB/stderr"
    cp -- "$(readlink -f "${BASH_SOURCE[0]}")" "$JOB/run.sh"
}

# The initramfs /init (busybox sh): load the modules, mount the host's
# root, chroot into it and run this script's guest side; power off.
write_init() {
    cat <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in \$(cat /modules.list); do
    insmod "/modules/\$m" || echo "[rxe-vm] insmod \$m failed"
done
# msize: 9p's request size; 512 KB is the most 6.1's virtio transport takes
o=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o \$o job /job || echo "[rxe-vm] cannot mount the job share"
R=/newroot
if [ "\$(cat /job/rw)" = 1 ]; then
    # cache=mmap: host and guest see each other's writes
    mount -t 9p -o \$o,cache=mmap hostroot \$R
else
    # cache=loose: the fastest; fine since the lower layer is read-only
    mount -t 9p -o \$o,ro,cache=loose hostroot /lower
    mount -t tmpfs -o size=50% tmpfs /upper
    mkdir /upper/data /upper/work
    mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work overlay \$R
fi || echo "[rxe-vm] cannot mount the host root"
# the VM's own kernel file systems, shm and run, over the host's
mount -t proc proc \$R/proc
mount -t sysfs sysfs \$R/sys
mount -t devtmpfs devtmpfs \$R/dev
# what udev would add: bash's <(...) and many scripts need /dev/fd
ln -s /proc/self/fd \$R/dev/fd
ln -s fd/0 \$R/dev/stdin
ln -s fd/1 \$R/dev/stdout
ln -s fd/2 \$R/dev/stderr
mkdir -p \$R/dev/pts \$R/dev/shm
mount -t devpts devpts \$R/dev/pts
mount -t tmpfs tmpfs \$R/dev/shm
mount -t tmpfs tmpfs \$R/run
mkdir -p \$R$GUEST_JOB
mount --move /job \$R$GUEST_JOB
chroot \$R /bin/bash $GUEST_JOB/run.sh --guest
sync
poweroff -f
EOF
}

# Builds the initramfs (static busybox, the modules in load order, /init).
build_initramfs() {
    local kver=$1 dir=$JOB/initramfs m f
    mkdir -p "$dir"/{bin,proc,sys,dev,modules,lower,upper,newroot,job}
    cp /bin/busybox "$dir/bin/busybox"
    # --show-depends lists each module after what it needs; keep the first
    # occurrence of each
    for m in $MODULES; do
        modprobe -S "$kver" --show-depends "$m" | awk '$1 == "insmod" { print $2 }'
    done | awk '!seen[$0]++' | while read -r f; do
        cp "$f" "$dir/modules/"
        basename "$f"
    done > "$dir/modules.list"
    write_init > "$dir/init"
    chmod +x "$dir/init"
    (cd "$dir" && find . | cpio -o -H newc --quiet) > "$JOB/initramfs.cpio"
}

# Prints the accelerator to use.
pick_accel() {
    local a=${RXE_VM_ACCEL:-auto}
    if [[ $a == auto ]]; then
        # Some hosts' /dev/kvm cannot run a stock kernel (a nested "PVM"
        # kvm without vmx/svm): only trust it with hardware virtualization.
        if grep -qwE 'vmx|svm' /proc/cpuinfo && [[ -r /dev/kvm && -w /dev/kvm ]]; then a=kvm; else a=tcg; fi
    fi
    echo "$a"
}

# Boots the VM in the background; sets QEMU_PID.
boot() {
    local kernel=$1 accel=$2 ro=on
    local -a cpu
    [[ ${RXE_VM_RW:-0} == 1 ]] && ro=off
    if [[ $accel == kvm ]]; then
        cpu=(-accel kvm -cpu host)
    else
        cpu=(-accel "tcg,thread=multi" -cpu "${RXE_VM_CPU:-$CPU_TCG}")
    fi
    # multidevs=remap: the host's / spans several file systems; without it
    # inode numbers from different ones can collide in the guest.
    # timeout -k: qemu gets TERM at the limit and KILL 5 s later.
    timeout -k 5 "${RXE_VM_TIMEOUT:-900}" \
        qemu-system-x86_64 "${cpu[@]}" \
        -m "${RXE_VM_MEM:-2G}" -smp "${RXE_VM_SMP:-2}" \
        -nodefaults -no-user-config -display none -no-reboot \
        -serial "file:$JOB/console.log" \
        -kernel "$kernel" -initrd "$JOB/initramfs.cpio" \
        -append "console=ttyS0 quiet loglevel=3 panic=-1 mitigations=off" \
        -fsdev "local,id=hostroot,path=/,security_model=none,readonly=$ro,multidevs=remap" \
        -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
        -fsdev "local,id=job,path=$JOB,security_model=none" \
        -device virtio-9p-pci,fsdev=job,mount_tag=job \
        < /dev/null > "$JOB/qemu.log" 2>&1 &
    QEMU_PID=$!
}

# Streams the guest's stdout and stderr files to ours until qemu is gone.
stream_output() {
    tail -n +1 -s 0.1 -f --pid="$QEMU_PID" "$JOB/stdout" 2>/dev/null &
    TAIL_PIDS+=($!)
    tail -n +1 -s 0.1 -f --pid="$QEMU_PID" "$JOB/stderr" >&2 2>/dev/null &
    TAIL_PIDS+=($!)
}

# Explains a run that left no status and exits 125.
vm_failed() {
    local why=$1
    log "the VM did not run the command: $why"
    [[ -s $JOB/qemu.log ]] && sed 's/^/[rxe-vm qemu] /' "$JOB/qemu.log" >&2
    [[ -s $JOB/setup.log ]] && sed 's/^/[rxe-vm setup] /' "$JOB/setup.log" >&2
    log "console tail:"
    tail -n 40 "$JOB/console.log" >&2 2>/dev/null || true
    exit 125
}

host_main() {
    (($# >= 1)) || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
    local t0 kver kernel accel status=0 rc
    t0=$(date +%s.%N)
    ensure_packages
    kver=$(pick_kernel)
    kernel=$(kernel_image "$kver")
    accel=$(pick_accel)

    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    JOB=$(mktemp -d "${TMPDIR:-/tmp}/hccl-rxe-vm.XXXXXX")
    write_job "$accel" "$@"
    build_initramfs "$kver"
    [[ ${RXE_VM_VERBOSE:-0} == 1 ]] && log "kernel $kernel, accel $accel, job $JOB"

    boot "$kernel" "$accel"
    stream_output
    wait "$QEMU_PID" || status=$?
    QEMU_PID=""
    # the tails end on their own once they have read what qemu left
    wait "${TAIL_PIDS[@]}" 2>/dev/null || true
    TAIL_PIDS=()

    if [[ ! -f $JOB/status ]]; then
        case $status in
            124 | 137) vm_failed "timed out after ${RXE_VM_TIMEOUT:-900} s (RXE_VM_TIMEOUT)" ;;
            0) vm_failed "it powered off without a status (crash or panic?)" ;;
            *) vm_failed "qemu exited with status $status" ;;
        esac
    fi
    rc=$(< "$JOB/status")
    if [[ ${RXE_VM_VERBOSE:-0} == 1 || $rc == 125 ]]; then
        sed 's/^/[rxe-vm setup] /' "$JOB/setup.log" >&2
        log "status $rc, wall $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s," \
            "guest uptime at $(tr '\n' ' ' < "$JOB/times")(s)"
    fi
    [[ $rc == 125 ]] && tail -n 20 "$JOB/console.log" >&2 2>/dev/null
    exit "$rc"
}

host_main "$@"
