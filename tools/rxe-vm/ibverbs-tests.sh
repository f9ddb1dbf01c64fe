#!/usr/bin/env bash
# The ibverbs transport's tests, for real: builds hccl-test and the ibverbs
# integration tests with `--features ibverbs` on the host, checks the
# Soft-RoCE VM itself (smoke.sh: a plain ibv_rc_pingpong), then boots the
# VM once and runs tools/rxe-vm/ibverbs-guest.sh there (every primitive at
# p = 2, 3, 4 checked, and tests/tests/ibverbs.rs). CI runs this (.ci/test).
#
#   bash tools/rxe-vm/ibverbs-tests.sh        # PROFILE=test (default: optimized,
#                                             # shares the test build's artifacts) or release
set -euo pipefail
cd "$(dirname "$0")/../.."
profile=${PROFILE:-test}
case "$profile" in
  test) flag="--profile test"; dir=debug ;;
  release) flag=--release; dir=release ;;
  *) echo "ibverbs-tests: PROFILE is test or release" >&2; exit 2 ;;
esac
cargo build $flag -q -p hccl-tools --features ibverbs --bin hccl-test
test_bin=$(cargo test $flag -p hccl-tests --features ibverbs --test ibverbs --no-run 2>&1 |
  sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -n 1)
[ -x "$test_bin" ] || { echo "ibverbs-tests: could not find the test binary" >&2; exit 1; }
echo "== the VM's own RDMA check (smoke.sh)"
bash tools/rxe-vm/smoke.sh
echo "== every primitive and the integration tests over ibverbs, in the VM"
RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-1800} bash tools/rxe-vm/run.sh \
  bash tools/rxe-vm/ibverbs-guest.sh "$PWD/target/$dir/hccl-test" "$test_bin"
