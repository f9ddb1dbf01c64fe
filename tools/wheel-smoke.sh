#!/usr/bin/env bash
# Builds the Python package's abi3 wheel (maturin build, release) and
# proves it stands alone: installs it with pip into a fresh venv whose
# PATH has no Rust toolchain (and no CARGO_HOME / RUSTUP_HOME), then runs
# two ranks as processes there — an AllReduce, an in-place AllGather and
# an error by type — with NumPy as the only other package.
#
#   bash tools/wheel-smoke.sh      # prints the wheel's path, then "wheel smoke test passed"
#
# Needs the build venv of tools/python-env.sh (maturin); makes it if absent.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

py=$(bash tools/python-env.sh --no-build | tail -n 1)
out="$root/target/wheels"
rm -rf "$out"
mkdir -p "$out"
(cd python && PATH="$root/$(dirname "$py"):$PATH" maturin build --release --quiet -o "$out" >/dev/null)
wheel=$(ls "$out"/hccl_rs-*-abi3-*.whl)
echo "wheel: $wheel ($(du -h "$wheel" | cut -f1))"

venv="$root/target/wheel-venv"
rm -rf "$venv"
python3 -m venv "$venv"
# no Rust anywhere on the way: the install must not build anything
clean=(env -u CARGO_HOME -u RUSTUP_HOME -u CARGO_TARGET_DIR PATH="$venv/bin:/usr/bin:/bin")
if "${clean[@]}" sh -c 'command -v cargo || command -v rustc' >/dev/null; then
  echo "wheel-smoke: a Rust toolchain is still on the clean PATH" >&2
  exit 1
fi
"${clean[@]}" python -m pip install -q --disable-pip-version-check --no-cache-dir --only-binary :all: "$wheel" numpy

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; pkill -9 -f "$tmp/smoke.py" 2>/dev/null || true' EXIT
cat > "$tmp/smoke.py" <<'PY'
import os, sys
import numpy as np
import hccl_rs

comm = hccl_rs.Comm.from_env()
r, p = comm.rank, comm.size
assert hccl_rs.__file__.startswith(sys.prefix), hccl_rs.__file__  # the wheel's copy
x = np.full(1000, r + 1, np.float32)
comm.all_reduce(x)
assert (x == p * (p + 1) / 2).all(), x[:4]
out = np.full(8 * p, -1, np.int64)
out[8 * r:8 * r + 8] = r
comm.all_gather(out[8 * r:8 * r + 8], out)
assert (out == np.repeat(np.arange(p), 8)).all(), out
try:
    comm.all_reduce(np.zeros(4, np.float32), op="nonsense")
except hccl_rs.HcclError as e:
    assert "nonsense" in str(e), e
else:
    raise AssertionError("a bad op was accepted")
comm.destroy()
print(f"rank {r} ok ({hccl_rs.__version__})")
PY
pids=()
for r in 0 1; do
  "${clean[@]}" RANK=$r WORLD_SIZE=2 HCCL_RS_ROOT_FILE="$tmp/root" HCCL_EXEC_TIMEOUT=20 \
    timeout 60 python "$tmp/smoke.py" > "$tmp/out.$r" 2>&1 &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
cat "$tmp"/out.*
if [ "$rc" != 0 ] || [ "$(grep -c ' ok ' "$tmp"/out.*| awk -F: '{s+=$2} END {print s}')" != 2 ]; then
  echo "wheel smoke test failed" >&2
  exit 1
fi
echo "wheel smoke test passed"
