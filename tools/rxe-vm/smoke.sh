#!/usr/bin/env bash
# tools/rxe-vm/smoke.sh -- is the Soft-RoCE VM itself healthy?
#
# Checks, inside one VM run (tools/rxe-vm/run.sh), with rdma-core's own
# tools only:
#   1. ibv_devices lists rxe0 and rxe1;
#   2. ibv_devinfo -d rxe0 (and rxe1) shows port 1 PORT_ACTIVE;
#   3. ibv_rc_pingpong -g 1 -c between rxe0 (server) and rxe1 (client):
#      RC SEND/RECV across the veth pair with the received data checked.
# Prints one line per check (and the tools' output when a check fails, or
# with RXE_VM_VERBOSE=1) and exits 0 when all pass, 1 when one fails, 125
# when the VM itself did not come up (run.sh's status).
#
# CI runs it before the transport tests: if smoke passes and the tests
# fail, the fault is ours, not the VM's.
#
#   tools/rxe-vm/smoke.sh          # boots a VM and runs the checks in it
#   RXE_VM_VERBOSE=1 tools/rxe-vm/smoke.sh
# Already inside the VM (RXE_VM=1), it runs the checks directly.
set -euo pipefail
shopt -s inherit_errexit

if [[ ${RXE_VM:-} != 1 ]]; then
    exec "$(dirname "$(readlink -f "$0")")/run.sh" bash "$(readlink -f "$0")" "$@"
fi

GID=${RXE_VM_GID_INDEX:-1}
PORT=18515
ITERS=200
failed=0

# Runs a named check, indenting its output; counts failures.
check() {
    local name=$1 out rc=0
    shift
    out=$("$@" 2>&1) || rc=$?
    if ((rc == 0)); then
        echo "ok   $name"
    else
        echo "FAIL $name (exit $rc)"
        failed=$((failed + 1))
    fi
    # the tools' output only when it helps: on failure, or when asked
    if [[ -n $out ]] && ((rc != 0)) || [[ ${RXE_VM_VERBOSE:-0} == 1 ]]; then
        local line
        while IFS= read -r line; do echo "     | $line"; done <<< "$out"
    fi
}

devices_listed() {
    local out
    out=$(ibv_devices)
    echo "$out"
    grep -qw rxe0 <<< "$out" && grep -qw rxe1 <<< "$out"
}

port_active() {
    local out
    out=$(ibv_devinfo -d "$1")
    echo "$out"
    grep -q 'state:.*PORT_ACTIVE' <<< "$out"
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

# ibv_rc_pingpong, server on rxe0 and client on rxe1, both checking the
# data they receive (-c); both must exit 0.
pingpong() {
    local spid src=0 crc=0 sout
    sout=$(mktemp)
    ibv_rc_pingpong -d rxe0 -g "$GID" -p "$PORT" -n "$ITERS" -c > "$sout" 2>&1 &
    spid=$!
    if ! wait_listen "$PORT"; then
        echo "server never listened on port $PORT"
        kill "$spid" 2>/dev/null || true
    fi
    echo "client (rxe1):"
    timeout 120 ibv_rc_pingpong -d rxe1 -g "$GID" -p "$PORT" -n "$ITERS" -c 10.10.0.1 || crc=$?
    # a client that failed leaves the server waiting for its peer
    ((crc == 0)) || kill "$spid" 2>/dev/null || true
    wait "$spid" || src=$?
    echo "server (rxe0):"
    cat "$sout"
    rm -f "$sout"
    ((src == 0 && crc == 0))
}

echo "rxe-vm smoke test ($(uname -r), GID index $GID)"
check "ibv_devices lists rxe0 and rxe1" devices_listed
check "ibv_devinfo -d rxe0: port active" port_active rxe0
check "ibv_devinfo -d rxe1: port active" port_active rxe1
check "ibv_rc_pingpong -g $GID -c rxe1 -> rxe0 ($ITERS iterations, data checked)" pingpong
if ((failed > 0)); then
    echo "smoke: $failed check(s) failed"
    exit 1
fi
echo "smoke: all checks passed"
