#!/usr/bin/env bash
# Makes (or refreshes) the Python environment the Python package's tests and
# benchmarks run in: a venv at target/pyenv (override with PYENV=DIR) with
# numpy, pytest, pytest-timeout, maturin, torch, lightning (the sharded
# training tests run PyTorch Lightning's DDP) and torchft from PyPI, then builds and
# installs ./python into it (`pip install ./python`, release, abi3 wheel).
#
#   bash tools/python-env.sh            # create or update, then install hccl_rs
#   bash tools/python-env.sh --no-build # only the third-party packages
#
# Prints the venv's python at the end. Quick when everything is present:
# pip skips what is installed; the build reuses python/target.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${PYENV:-target/pyenv}
build=1
[ "${1:-}" = "--no-build" ] && build=0

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; assert sys.version_info >= (3, 9)' 2>/dev/null; then
  echo "python-env: $python (3.9 or newer) is needed" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "python-env: creating $venv"
  "$python" -m venv "$venv"
fi
py="$venv/bin/python"
# torchft: the one nightly its tests were written against (hccl_rs.torchft
# subclasses its process group wrapper)
want=(numpy pytest pytest-timeout "maturin>=1.5,<2" torch lightning "torchft-nightly==2026.10.26")
missing=()
for pkg in numpy pytest pytest_timeout maturin torch lightning torchft; do
  "$py" -c "import $pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "python-env: installing ${want[*]} (torch for CPU: about 3 GB the first time)"
  "$py" -m pip install -q --disable-pip-version-check --no-cache-dir --upgrade pip
  # PyPI's torch is the CUDA build: with its dependencies it is 5.5 GB
  # installed, and pip holds every downloaded wheel (another ~3 GB) until
  # it has installed them all, which a fresh CI machine's disk may not
  # have. So resolve once (metadata only), then install the wheels one at
  # a time, torch first, and after each CUDA package drop what a CPU run
  # never loads (tools/pyenv_prune.py: Triton, cuDNN's engines, cuSOLVER,
  # headers, static and device code; the libraries torch links stay, so
  # `import torch` works). HCCL_RS_PYENV_FULL=1 installs it all as is.
  if [ -n "${HCCL_RS_PYENV_FULL:-}" ]; then
    "$py" -m pip install -q --disable-pip-version-check --no-cache-dir "${want[@]}"
  else
    "$py" -m pip install -q --disable-pip-version-check --no-cache-dir "${want[@]}" --dry-run --report "$venv/resolve.json"
    mapfile -t big < <("$py" tools/pyenv_prune.py --list big "$venv/resolve.json")
    mapfile -t small < <("$py" tools/pyenv_prune.py --list small "$venv/resolve.json")
    if [ ${#small[@]} -gt 0 ]; then
      "$py" -m pip install -q --disable-pip-version-check --no-cache-dir --no-deps "${small[@]}"
    fi
    for req in "${big[@]}"; do
      "$py" -m pip install -q --disable-pip-version-check --no-cache-dir --no-deps "$req"
      "$py" tools/pyenv_prune.py --prune
    done
    "$py" tools/pyenv_prune.py --check
    rm -f "$venv/resolve.json"
  fi
fi
if [ "$build" = 1 ]; then
  echo "python-env: building and installing ./python"
  # --no-build-isolation: maturin is in the venv already (no download per
  # build); pip runs it from PATH
  PATH="$(cd "$venv/bin" && pwd):$PATH" "$py" -m pip install -q --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps ./python
fi
echo "$py"
