#!/usr/bin/env bash
# Runs inside the Soft-RoCE VM (tools/rxe-vm/ibverbs-tests.sh boots it):
# every primitive over the ibverbs transport at p = 2, 3, 4 with results
# checked (hccl-test -c 1, ranks as processes taking rxe0 and rxe1 in
# turn), then the ibverbs integration tests (tests/tests/ibverbs.rs).
#
#   ibverbs-guest.sh HCCL_TEST_BINARY IBVERBS_TEST_BINARY
set -uo pipefail
hccl_test=$1
test_bin=$2
export HCCL_RS_TRANSPORT=ibverbs HCCL_RS_IB_HCA=rxe0,rxe1
export HCCL_CONNECT_TIMEOUT=60 HCCL_EXEC_TIMEOUT=120 HCCL_BUFFSIZE=4
OPS="all_reduce all_gather all_gatherv reduce_scatter reduce_scatterv broadcast reduce scatter gather alltoall alltoallv send_recv barrier"
failed=0
printf '%-16s %6s %6s %6s\n' primitive p=2 p=3 p=4
for op in $OPS; do
  row=$(printf '%-16s' "$op")
  for p in 2 3 4; do
    # 8 B, 512 B, 32 KiB, 2 MiB (larger than the 4 MiB CCL buffer / p at p=4: chunked)
    # Known issue (docs/performance.md, RDMA section): a batched send and
    # receive at p=4 over ibverbs trips the consistency check falsely in
    # about 1 run of 35 (descriptors are paired in arrival order per
    # connection; 0 of 40 with the check off). The matrix checks the data
    # of send_recv without it; the check itself is tested over ibverbs by
    # tests/tests/ibverbs.rs.
    check=1
    [ "$op" = send_recv ] && check=0
    out=$(HCCL_RS_CONSISTENCY_CHECK=$check timeout 300 "$hccl_test" "$op" -p "$p" -b 8 -e 2M -f 64 -n 2 -w 1 -c 1 --transport process 2>&1)
    rc=$?
    rows=$(grep -cE '^ +[0-9]+ \|.*\| +success +\|' <<<"$out")
    bad=$(grep -cE '\| +failed +\|' <<<"$out")
    if [ $rc -eq 0 ] && [ "$rows" -ge 1 ] && [ "$bad" -eq 0 ]; then
      row+=$(printf ' %6s' "ok/$rows")
    else
      row+=$(printf ' %6s' FAIL)
      failed=1
      echo "---- $op p=$p (exit $rc):" >&2
      tail -n 20 <<<"$out" >&2
    fi
  done
  echo "$row"
done
echo "== integration tests (tests/tests/ibverbs.rs)"
HCCL_RS_IBV_TESTS=1 timeout 1200 "$test_bin" --test-threads 1 --nocapture || failed=1
exit $failed
