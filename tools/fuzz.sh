#!/usr/bin/env bash
# Runs every fuzz target with many cases: the proptest tests named fuzz_*
# in hccl-framework (bootstrap wire formats, rank table, HCCL_ALGO, tuning
# file), hccl-ffi (the C API's argument checking) and hccl-platform (the
# TCP link's descriptor frames). The ordinary test run gives each target a
# few thousand cases; this gives each a million, one target after another,
# and prints the time and outcome of each.
#
#   bash tools/fuzz.sh                 # 10^6 cases per target
#   CASES=10000 bash tools/fuzz.sh     # fewer
#   ONLY=rank_table bash tools/fuzz.sh # targets whose name contains this
#
# A failing target prints its minimal failing input (proptest shrinks it);
# nothing is written into the source tree. Exit status: 1 if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

CASES=${CASES:-1000000}
ONLY=${ONLY:-}
PACKAGES=(-p hccl-framework -p hccl-ffi -p hccl-platform)

echo "building the test binaries..." >&2
mapfile -t binaries < <(
  cargo test --no-run --message-format=json "${PACKAGES[@]}" 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])
'
)

failed=0
printf "%-70s %10s %10s  %s\n" target cases seconds result
for exe in "${binaries[@]}"; do
  mapfile -t targets < <("$exe" --list --format terse 2>/dev/null |
    sed -n 's/: test$//p' | grep -E '(^|::)fuzz_' | grep -F -- "$ONLY" || true)
  for t in "${targets[@]}"; do
    log=$(mktemp)
    start=$(date +%s.%N)
    if PROPTEST_CASES=$CASES "$exe" --exact "$t" --test-threads 1 >"$log" 2>&1; then
      result=ok
    else
      result=FAILED
      failed=1
    fi
    secs=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
    printf "%-70s %10s %10s  %s\n" "$(basename "$exe" | sed 's/-[0-9a-f]*$//')::$t" "$CASES" "$secs" "$result"
    if [ "$result" = FAILED ]; then
      sed 's/^/    /' "$log"
    fi
    rm -f "$log"
  done
done
exit $failed
