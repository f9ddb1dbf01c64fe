"""Test scenarios of the torch.distributed backend, run by each rank
(``python torch_worker.py SCENARIO`` with torch's env:// variables, or
under torchrun; see test_torch.py and test_ddp.py)."""

import os
import sys

import torch
import torch.distributed as dist
from worker_common import scenario

import hccl_rs
import hccl_rs.torch  # noqa: F401  (registers "hccl_rs")

ALL_TYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
]
OPS = {
    "SUM": dist.ReduceOp.SUM,
    "PRODUCT": dist.ReduceOp.PRODUCT,
    "MIN": dist.ReduceOp.MIN,
    "MAX": dist.ReduceOp.MAX,
    "AVG": dist.ReduceOp.AVG,
}


def data(r, n, dt):
    """Rank r's input: small values every type holds (bools vary too)."""
    v = (torch.arange(n) + r) % 3 + 1
    if dt == torch.bool:
        return ((torch.arange(n) + r) % 3) == 0
    return v.to(dt)


def reference(ts, op, dt):
    s = torch.stack([t.to(torch.float64) if dt != torch.bool else t for t in ts])
    if dt == torch.bool:
        return {"SUM": s.any(0), "MAX": s.any(0), "PRODUCT": s.all(0), "MIN": s.all(0)}[op]
    out = {
        "SUM": s.sum(0),
        "PRODUCT": s.prod(0),
        "MIN": s.min(0).values,
        "MAX": s.max(0).values,
        "AVG": s.mean(0),
    }[op]
    return out.to(dt)


def close(got, want, what):
    if got.dtype in (torch.float16, torch.bfloat16):
        ok = torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2)
    else:
        ok = torch.equal(got, want)
    assert ok, f"{what}: got {got}, want {want}"


def collectives():
    dist.init_process_group("hccl_rs")
    r, p = dist.get_rank(), dist.get_world_size()
    n = 11
    for dt in ALL_TYPES:
        every = [data(q, n, dt) for q in range(p)]
        for name, op in OPS.items():
            if name == "AVG" and not dt.is_floating_point:
                continue
            t = data(r, n, dt)
            dist.all_reduce(t, op=op)
            close(t, reference(every, name, dt), f"all_reduce {name} {dt}")
        # async with a future
        t = data(r, n, dt)
        w = dist.all_reduce(t, async_op=True)
        (got,) = w.get_future().wait()
        close(got, reference(every, "SUM" if dt != torch.bool else "MAX", dt), f"future {dt}")
        w.wait()
        # all_gather, list and tensor forms
        outs = [torch.zeros(n, dtype=dt) for _ in range(p)]
        dist.all_gather(outs, data(r, n, dt))
        for q in range(p):
            close(outs[q], every[q], f"all_gather {dt}")
        out = torch.zeros(p * n, dtype=dt)
        dist.all_gather_into_tensor(out, data(r, n, dt))
        close(out, torch.cat(every), f"all_gather_into_tensor {dt}")
        # broadcast from the last rank
        t = data(r, n, dt)
        dist.broadcast(t, src=p - 1)
        close(t, every[p - 1], f"broadcast {dt}")
        # all_to_all_single, equal blocks
        send = torch.cat([data(r * p + q, n, dt) for q in range(p)])
        out = torch.zeros(p * n, dtype=dt)
        dist.all_to_all_single(out, send)
        close(out, torch.cat([data(q * p + r, n, dt) for q in range(p)]), f"all_to_all_single {dt}")
        # gather and scatter
        outs = [torch.zeros(n, dtype=dt) for _ in range(p)] if r == 0 else None
        dist.gather(data(r, n, dt), outs, dst=0)
        if r == 0:
            for q in range(p):
                close(outs[q], every[q], f"gather {dt}")
        out = torch.zeros(n, dtype=dt)
        ins = [data(10 + q, n, dt) for q in range(p)] if r == p - 1 else None
        dist.scatter(out, ins, src=p - 1)
        close(out, data(10 + r, n, dt), f"scatter {dt}")
    for dt in [torch.float32, torch.bfloat16, torch.int64]:
        # reduce (to rank 1 % p), reduce_scatter in both forms
        every = [data(q, n * p, dt) for q in range(p)]
        tot = reference(every, "SUM", dt)
        t = data(r, n * p, dt)
        dist.reduce(t, dst=1 % p)
        if r == 1 % p:
            close(t, tot, f"reduce {dt}")
        out = torch.zeros(n, dtype=dt)
        dist.reduce_scatter_tensor(out, data(r, n * p, dt))
        close(out, tot[r * n : (r + 1) * n], f"reduce_scatter_tensor {dt}")
        out = torch.zeros(n, dtype=dt)
        dist.reduce_scatter(out, list(data(r, n * p, dt).chunk(p)))
        close(out, tot[r * n : (r + 1) * n], f"reduce_scatter {dt}")
        if dt.is_floating_point:
            out = torch.zeros(n, dtype=dt)
            dist.reduce_scatter_tensor(out, data(r, n * p, dt), op=dist.ReduceOp.AVG)
            close(out, reference(every, "AVG", dt)[r * n : (r + 1) * n], f"reduce_scatter AVG {dt}")
    # all_to_all with lists, and all_to_all_single with splits (rows of 2)
    ins = [torch.full((q + 1,), float(r * 10 + q)) for q in range(p)]
    outs = [torch.zeros(r + 1) for _ in range(p)]
    dist.all_to_all(outs, ins)
    for q in range(p):
        assert torch.equal(outs[q], torch.full((r + 1,), float(q * 10 + r))), outs
    in_splits = [q + 1 for q in range(p)]
    out_splits = [r + 1] * p
    send = torch.cat([torch.full((q + 1, 2), float(r * 10 + q)) for q in range(p)])
    out = torch.zeros(sum(out_splits), 2)
    dist.all_to_all_single(out, send, out_splits, in_splits)
    want = torch.cat([torch.full((r + 1, 2), float(q * 10 + r)) for q in range(p)])
    assert torch.equal(out, want), (out, want)
    # point to point: a ring by batch_isend_irecv, and a plain send / recv
    s, got = torch.full((3,), float(r)), torch.zeros(3)
    reqs = dist.batch_isend_irecv(
        [dist.P2POp(dist.isend, s, (r + 1) % p), dist.P2POp(dist.irecv, got, (r - 1) % p)]
    )
    for q in reqs:
        q.wait()
    assert torch.equal(got, torch.full((3,), float((r - 1) % p))), got
    if r == 0:
        dist.send(torch.arange(4.0), dst=p - 1)
    elif r == p - 1:
        t = torch.zeros(4)
        dist.recv(t, src=0)
        assert torch.equal(t, torch.arange(4.0)), t
    # a group of the odd... of every rank but 0, and one of all, reversed
    g = dist.new_group(list(range(1, p)))
    if r > 0:
        t = torch.ones(2)
        dist.all_reduce(t, group=g)
        assert torch.equal(t, torch.full((2,), float(p - 1))), t
    g2 = dist.new_group(list(range(p)))
    t = torch.full((2,), float(r))
    w = dist.all_reduce(t, group=g2, async_op=True)
    w.wait()
    assert torch.equal(t, torch.full((2,), float(p * (p - 1) / 2))), t
    forms(r, p)
    dist.barrier()
    dist.destroy_process_group()


def forms(r, p):
    """The group's own object: the ProcessGroup subclass (or, with
    HCCL_RS_TORCH_PG=0, torch's ProcessGroup over the backend), its call
    forms, and the dispatcher's path (functional collectives)."""
    from hccl_rs.torch import HcclRsBackend, HcclRsProcessGroup

    pg = dist.group.WORLD
    want_pg = os.environ.get("HCCL_RS_TORCH_PG", "1") != "0"
    assert isinstance(pg, HcclRsProcessGroup) == want_pg, type(pg)
    assert isinstance(pg._get_backend(torch.device("cpu")), HcclRsBackend)
    assert dist.get_backend() == "hccl_rs"
    t = torch.full((3,), float(r + 1))
    pg.allreduce(t).wait()  # a tensor, default options
    assert torch.equal(t, torch.full((3,), p * (p + 1) / 2)), t
    t = torch.full((3,), float(r + 1))
    pg.allreduce([t], dist.ReduceOp.MAX).wait()  # a ReduceOp for the options
    assert torch.equal(t, torch.full((3,), float(p))), t
    opts = dist.AllreduceOptions()
    opts.asyncOp = False
    t = torch.full((3,), float(r))
    w = pg.allreduce([t], opts)  # blocking: done on return
    assert (w is None) == want_pg, w
    assert torch.equal(t, torch.full((3,), p * (p - 1) / 2)), t
    import torch.distributed._functional_collectives as fc

    got = fc.all_reduce(torch.full((2,), float(r)), "sum", pg)
    assert torch.equal(got, torch.full((2,), p * (p - 1) / 2)), got
    # the blocking path's cached wrappers: a new tensor at a reused address
    for k in range(20):
        t = torch.full((5 + k % 3,), float(k + r))
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((5 + k % 3,), float(p * k + p * (p - 1) / 2))), (k, t)


def future_then_exit():
    """A future completed by the background thread, then a plain exit: the
    thread ends first (a daemon thread unwound at finalization after
    running torch's futures used to abort the process)."""
    dist.init_process_group("hccl_rs")
    t = torch.ones(1000)
    (got,) = dist.all_reduce(t, async_op=True).get_future().wait()
    assert torch.equal(got, torch.full((1000,), float(dist.get_world_size())))
    dist.destroy_process_group()


def torchrun_env():
    """Under torchrun: the backend, and Comm.from_env() beside its store."""
    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size
    assert (r, p) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    t = torch.full((4,), float(r + 1))
    comm.all_reduce(t)
    assert torch.equal(t, torch.full((4,), p * (p + 1) / 2)), t
    comm.destroy()
    collectives()


def errors():
    dist.init_process_group("hccl_rs")
    r = dist.get_rank()
    try:
        dist.all_reduce(torch.ones(8)[::2])
    except hccl_rs.ParameterError as e:
        assert "not contiguous" in str(e)
    else:
        raise AssertionError("a non-contiguous tensor was taken")
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.AVG)
    except hccl_rs.NotSupportedError as e:
        assert "AVG" in str(e)
    else:
        raise AssertionError("AVG on integers was taken")
    try:
        dist.all_reduce(torch.zeros(2, dtype=torch.float8_e4m3fn))
    except hccl_rs.ParameterError as e:
        assert "unsupported element type" in str(e)
    else:
        raise AssertionError("an fp8 tensor was taken")
    # nothing was enqueued by those
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), 2.0))
    # last: ranks that disagree (the communicator is not used after it)
    try:
        dist.all_reduce(torch.ones(4 + r))
    except hccl_rs.ParameterError as e:
        assert "inconsistent between ranks" in str(e), e
        assert e.peer == 1 - r, e.peer
    else:
        raise AssertionError("mismatched counts were not reported")
    print(f"rank {r} ok: errors", flush=True)
    os._exit(0)


def ddp(backend, out_path, steps="30"):
    """Trains a small model with DDP on ``backend``; writes the weights."""
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group(backend)
    r, p = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    ddp_model = DDP(model, bucket_cap_mb=0.01)  # several buckets
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1234 + r)
    for _ in range(int(steps)):
        x = torch.randn(16, 32, generator=g)
        y = torch.randn(16, 4, generator=g)
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp_model(x), y)
        loss.backward()
        opt.step()
    if r == 0:
        torch.save({k: v.clone() for k, v in model.state_dict().items()}, out_path)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    scenario({"future_then_exit": future_then_exit, "collectives": collectives, "torchrun_env": torchrun_env, "errors": errors, "ddp": ddp})
    sys.stdout.flush()
