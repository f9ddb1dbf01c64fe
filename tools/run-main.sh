#!/usr/bin/env bash
# The README's main job: a 4-rank fp32-sum AllReduce sweep from 8 B to
# 64 MiB, one process per rank over shared memory, results checked, in
# hccl_test's format with bus bandwidth appended. Installs what a fresh
# machine lacks first (.ci/setup main: a C linker; checks only when present).
#
#   bash tools/run-main.sh              # the sweep above
#   bash tools/run-main.sh ARGS...      # hccl-test with ARGS instead
set -euo pipefail
cd "$(dirname "$0")/.."

bash .ci/setup main >&2
if [ $# -eq 0 ]; then
  set -- all_reduce -p 4 -b 8 -e 64M -f 2 -n 20 -w 5 -o sum -d fp32 -c 1 --transport process
fi
exec cargo run --release -p hccl-tools --bin hccl-test -- "$@"
