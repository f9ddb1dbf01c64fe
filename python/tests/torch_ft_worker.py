"""Test scenarios of the torch backend found by running torchft on it
(issue 32, "Fault tolerance"), run by each rank (``python
torch_ft_worker.py SCENARIO`` with torch's env:// variables; see
test_torch_ft.py)."""

import os
import sys

import torch
import torch.distributed as dist
from torch_worker import close, data, reference
from worker_common import scenario

import hccl_rs.torch  # noqa: F401  (registers "hccl_rs")


def coalesced():
    """allreduce_coalesced (its options are AllreduceCoalescedOptions, not
    a ReduceOp) against references: dist.all_reduce_coalesced (one type,
    several sizes), blocking and async, and the group's own
    allreduce_coalesced with tensors of different types and sizes."""
    dist.init_process_group("hccl_rs")
    r, p = dist.get_rank(), dist.get_world_size()
    sizes = [1, 7, 300, 33]
    for dt in (torch.float32, torch.float64):
        for name in ("SUM", "AVG", "MAX"):
            op = getattr(dist.ReduceOp, name)
            ts = [data(r + k, n, dt) for k, n in enumerate(sizes)]
            dist.all_reduce_coalesced(ts, op=op)
            for k, (t, n) in enumerate(zip(ts, sizes)):
                want = reference([data(q + k, n, dt) for q in range(p)], name, dt)
                close(t, want, f"all_reduce_coalesced {name} {dt} tensor {k}")
            ts = [data(r + k, n, dt) for k, n in enumerate(sizes)]
            fut = dist.all_reduce_coalesced(ts, op=op, async_op=True)
            fut.wait()
            for k, (t, n) in enumerate(zip(ts, sizes)):
                want = reference([data(q + k, n, dt) for q in range(p)], name, dt)
                close(t, want, f"all_reduce_coalesced async {name} {dt} tensor {k}")
    # the group's method, as torchft calls it: mixed types and sizes
    pg = dist.group.WORLD
    mixed = [(torch.float32, 5), (torch.int64, 12), (torch.bfloat16, 64), (torch.float64, 3)]
    for name in ("SUM", "MAX", "AVG"):
        kinds = [(dt, n) for dt, n in mixed if name != "AVG" or dt.is_floating_point]
        ts = [data(r * 2 + k, n, dt) for k, (dt, n) in enumerate(kinds)]
        opts = dist.AllreduceCoalescedOptions()
        opts.reduceOp = getattr(dist.ReduceOp, name)
        w = pg.allreduce_coalesced(ts, opts)
        if w is not None:
            w.wait()
        for k, (t, (dt, n)) in enumerate(zip(ts, kinds)):
            want = reference([data(q * 2 + k, n, dt) for q in range(p)], name, dt)
            close(t, want, f"pg.allreduce_coalesced {name} {dt} tensor {k}")
    # and with no options at all (sum), its result through the future
    ts = [torch.full((4,), float(r + 1)), torch.full((2,), r + 1, dtype=torch.int32)]
    got = pg.allreduce_coalesced(ts).get_future().wait()
    assert torch.equal(got[0], torch.full((4,), p * (p + 1) / 2)), got
    assert torch.equal(got[1], torch.full((2,), p * (p + 1) // 2, dtype=torch.int32)), got
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    scenario({"coalesced": coalesced})
    sys.stdout.flush()
