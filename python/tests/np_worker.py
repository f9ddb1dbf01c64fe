"""Test scenarios of the NumPy-buffer API, run by each rank
(``python np_worker.py SCENARIO``; see test_numpy.py)."""

import os
import signal
import threading
import time

import numpy as np
from worker_common import scenario

import hccl_rs

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8]


def data(r, n, dtype):
    """Rank r's input: small values every type holds, summed over 4 ranks."""
    return ((np.arange(n) + r) % 5 + 1).astype(dtype)


def eq(got, want, what):
    assert np.array_equal(got, want), f"{what}: got {got!r}, want {want!r}"


def primitives(lib="numpy"):
    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size
    n = 37
    if lib == "torch":
        import torch

        conv = {np.float32: torch.float32, np.int32: torch.int32, np.float64: torch.float64}
        dtypes = list(conv)

        def mk(a):
            return torch.from_numpy(np.ascontiguousarray(a)).clone()

        def empty(shape, dt):
            return torch.zeros(shape, dtype=conv[dt])

        def npy(t):
            return t.numpy()
    else:
        dtypes = DTYPES

        def mk(a):
            return np.ascontiguousarray(a)

        def empty(shape, dt):
            return np.zeros(shape, dtype=dt)

        def npy(a):
            return a

    for dt in dtypes:
        every = [data(q, n, dt) for q in range(p)]
        total = np.sum(every, axis=0).astype(dt)
        # AllReduce out of place and in place, every operator
        out = empty(n, dt)
        comm.all_reduce(mk(data(r, n, dt)), out)
        eq(npy(out), total, f"all_reduce {dt}")
        for op, f in [("max", np.max), ("min", np.min)] + (
            [("prod", np.prod)] if dt in (np.float32, np.float64, np.int32, np.int64) else []
        ):
            x = mk(data(r, n, dt))
            comm.all_reduce(x, op=op)
            eq(npy(x), f(every, axis=0).astype(dt), f"all_reduce {op} {dt}")
        # AllGather
        out = empty(n * p, dt)
        comm.all_gather(mk(data(r, n, dt)), out)
        eq(npy(out), np.concatenate(every), f"all_gather {dt}")
        # AllGatherV: rank q gives q + 1 elements
        counts = [q + 1 for q in range(p)]
        out = empty(sum(counts), dt)
        comm.all_gather_v(mk(data(r, r + 1, dt)), out, counts)
        eq(npy(out), np.concatenate([data(q, q + 1, dt) for q in range(p)]), f"all_gather_v {dt}")
        # ReduceScatter
        big = [data(q, n * p, dt) for q in range(p)]
        out = empty(n, dt)
        comm.reduce_scatter(mk(data(r, n * p, dt)), out)
        eq(npy(out), np.sum(big, axis=0).astype(dt)[r * n : (r + 1) * n], f"reduce_scatter {dt}")
        # ReduceScatterV: rank q gets q + 1 elements
        counts = [q + 1 for q in range(p)]
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
        m = sum(counts)
        out = empty(r + 1, dt)
        comm.reduce_scatter_v(mk(data(r, m, dt)), out, counts)
        want = np.sum([data(q, m, dt) for q in range(p)], axis=0).astype(dt)
        eq(npy(out), want[displs[r] : displs[r] + r + 1], f"reduce_scatter_v {dt}")
        # Broadcast from the last rank
        x = mk(data(r, n, dt))
        comm.broadcast(x, root=p - 1)
        eq(npy(x), data(p - 1, n, dt), f"broadcast {dt}")
        # Reduce to rank 1 % p, out of place and in place
        root = 1 % p
        out = empty(n, dt)
        comm.reduce(mk(data(r, n, dt)), out, root=root)
        if r == root:
            eq(npy(out), total, f"reduce {dt}")
        x = mk(data(r, n, dt))
        comm.reduce(x, op="max", root=root)
        if r == root:
            eq(npy(x), np.max(every, axis=0), f"reduce in place {dt}")
        # Scatter from 0
        out = empty(n, dt)
        comm.scatter(mk(data(0, n * p, dt)) if r == 0 else None, out, root=0)
        eq(npy(out), data(0, n * p, dt)[r * n : (r + 1) * n], f"scatter {dt}")
        # Gather to the last rank
        out = empty(n * p, dt) if r == p - 1 else None
        comm.gather(mk(data(r, n, dt)), out, root=p - 1)
        if r == p - 1:
            eq(npy(out), np.concatenate(every), f"gather {dt}")
        # AllToAll: block q of rank r is data(r*p+q)
        send = np.concatenate([data(r * p + q, n, dt) for q in range(p)])
        out = empty(n * p, dt)
        comm.all_to_all(mk(send), out)
        eq(npy(out), np.concatenate([data(q * p + r, n, dt) for q in range(p)]), f"all_to_all {dt}")
        # AllToAllV: rank r sends r + q + 1 elements to rank q
        sc = [r + q + 1 for q in range(p)]
        rc = [q + r + 1 for q in range(p)]
        send = np.concatenate([data(r * p + q, sc[q], dt) for q in range(p)])
        out = empty(sum(rc), dt)
        comm.all_to_all_v(mk(send), out, sc, rc)
        want = np.concatenate([data(q * p + r, rc[q], dt) for q in range(p)])
        eq(npy(out), want, f"all_to_all_v {dt}")
        # Send / receive around the ring (both in flight at once)
        out = empty(n, dt)
        ws = comm.send_async(mk(data(r, n, dt)), (r + 1) % p)
        wr = comm.recv_async(out, (r - 1) % p)
        ws.wait()
        wr.wait()
        eq(npy(out), data((r - 1) % p, n, dt), f"send/recv {dt}")
        # Batched: both directions
        left, right = empty(n, dt), empty(n, dt)
        comm.batch_send_recv(
            [
                ("send", mk(data(r, n, dt)), (r + 1) % p),
                ("send", mk(data(r + 10, n, dt)), (r - 1) % p),
                ("recv", left, (r - 1) % p),
                ("recv", right, (r + 1) % p),
            ]
        )
        eq(npy(left), data((r - 1) % p, n, dt), f"batch left {dt}")
        eq(npy(right), data((r + 1) % p + 10, n, dt), f"batch right {dt}")
    comm.barrier()
    comm.destroy()


def views():
    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size
    b = bytearray([r + 1] * 16)
    comm.all_reduce(b)
    assert b == bytearray([p * (p + 1) // 2] * 16), b
    m = memoryview(bytearray(np.full(4, r + 1, np.float32).tobytes())).cast("f")
    comm.all_reduce(m, op="max")
    assert list(m) == [float(p)] * 4, list(m)
    # a contiguous slice of a bigger array, in place
    big = np.zeros(100, np.float64)
    big[10:20] = r + 1
    comm.all_reduce(big[10:20])
    assert (big[10:20] == p * (p + 1) / 2).all() and (big[:10] == 0).all() and (big[20:] == 0).all()
    # a big array (crosses the CCL buffer: chunked or single-copy paths)
    x = np.full(3 << 20, r + 1, np.float32)
    y = np.empty_like(x)
    comm.all_reduce(x, y)
    assert (y == p * (p + 1) / 2).all()
    comm.destroy()


def torch_tensors():
    import torch

    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size
    t = torch.full((5,), float(r + 1), dtype=torch.bfloat16)
    comm.all_reduce(t)
    assert (t == float(p * (p + 1) // 2)).all(), t
    b = torch.tensor([r == 0, False, True])
    comm.all_reduce(b)  # SUM on bools is OR
    assert b.tolist() == [True, False, True], b
    b = torch.tensor([r == 0, True])
    comm.all_reduce(b, op="prod")  # PRODUCT is AND
    assert b.tolist() == [False, True], b
    comm.destroy()


def asyncs():
    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size
    xs = [np.full(1000 * (i + 1), r + i, np.float32) for i in range(3)]
    ws = [comm.all_reduce_async(x) for x in xs]
    y = np.empty(1000 * p, np.float32)
    wg = comm.all_gather_async(np.full(1000, r, np.float32), y)
    # the handles hold the buffers: drop the last references to the input
    wt = comm.all_reduce_async(np.full(8, 1.0, np.float32))
    assert wt.wait() is True
    for i, (w, x) in enumerate(zip(ws, xs)):
        assert w.wait() is True
        assert w.is_completed()
        assert (x == sum(q + i for q in range(p))).all()
    wg.wait()
    assert (y == np.repeat(np.arange(p), 1000)).all()
    # is_completed drives the op: polling alone completes it
    x = np.ones(4, np.float32)
    w = comm.all_reduce_async(x)
    t0 = time.monotonic()
    while not w.is_completed():
        assert time.monotonic() - t0 < 30, "is_completed never became true"
    assert (x == p).all()
    # wait with a timeout on an op a peer joins late
    x = np.ones(4, np.float32)
    if r == 0:
        w = comm.all_reduce_async(x)
        assert w.wait(timeout=0.05) is False
        assert w.wait() is True
    else:
        time.sleep(0.3)
        comm.all_reduce(x)
    assert (x == p).all()
    # with: destroyed at the end; later calls raise
    with comm:
        comm.barrier()
    try:
        comm.barrier()
    except hccl_rs.ParameterError as e:
        assert "destroyed" in str(e)
    else:
        raise AssertionError("a destroyed communicator ran an op")


def bad_input():
    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size

    def refused(f, *words):
        try:
            f()
        except hccl_rs.ParameterError as e:
            assert isinstance(e, ValueError) and e.code == 1 and e.code_name == "HCCL_E_PARA"
            for w in words:
                assert w in str(e), (w, str(e))
        else:
            raise AssertionError(f"not refused: {words}")

    x = np.ones(8, np.float32)
    refused(lambda: comm.all_reduce(x, np.ones(8, np.int32)), "mixed element types", "int32")
    refused(lambda: comm.all_reduce(np.ones(16, np.float32)[::2]), "not contiguous")
    ro = np.ones(8, np.float32)
    ro.flags.writeable = False
    refused(lambda: comm.all_reduce(x, ro), "read-only")
    refused(lambda: comm.all_reduce(ro), "read-only")
    refused(lambda: comm.broadcast(ro), "read-only")
    refused(lambda: comm.all_reduce(x, op="avg"), "unknown reduction 'avg'")
    refused(lambda: comm.all_reduce(x, op=42), "reduction code 42")
    refused(lambda: comm.broadcast(x, root=p), f"root {p} is out of range")
    refused(lambda: comm.reduce(x, root=p + 5), "out of range")
    refused(lambda: comm.send(x, r), "itself")
    refused(lambda: comm.all_to_all(np.ones(p * 3 + 1, np.float32), np.ones(p * 3 + 1, np.float32)), "equal blocks")
    refused(lambda: comm.all_gather(x, np.ones(8 * p - 1, np.float32)))
    refused(lambda: comm.all_reduce(np.ones(4, ">f4")), "unsupported element format")
    refused(lambda: comm.batch_send_recv([("sned", x, 0)]), "neither")
    try:
        comm.all_reduce("not a buffer")
    except TypeError as e:
        assert "expected a buffer" in str(e), e
    else:
        raise AssertionError("a str was taken as a buffer")
    # nothing was enqueued by any of them: the next op is the first
    y = np.full(8, r + 1, np.float32)
    comm.all_reduce(y)
    assert (y == p * (p + 1) / 2).all(), y
    comm.destroy()


def mismatch():
    comm = hccl_rs.Comm.from_env()
    r = comm.rank
    try:
        comm.all_reduce(np.ones(4 + r, np.float32))
    except hccl_rs.ParameterError as e:
        assert "inconsistent between ranks" in str(e), e
        assert e.rank == r and e.peer is not None and e.peer != r, (e.rank, e.peer)
        assert e.tag and e.tag.startswith("AllReduce_"), e.tag
        print(f"rank {r} saw: {e}")
    else:
        raise AssertionError("mismatched counts were not reported")


def killed_peer():
    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size
    comm.all_reduce(np.ones(4, np.float32))
    if r == p - 1:
        os._exit(7)  # dies without a word
    t0 = time.monotonic()
    try:
        comm.all_reduce(np.ones(1 << 16, np.float32))
        comm.all_reduce(np.ones(4, np.float32))
    except hccl_rs.HcclError as e:
        took = time.monotonic() - t0
        assert f"rank {p - 1}" in str(e), str(e)
        print(f"rank {r} noticed after {took:.2f}s: {type(e).__name__}: {e}")
        assert took < 20, took
    else:
        raise AssertionError("the lost peer went unnoticed")


def interrupt():
    comm = hccl_rs.Comm.from_env()
    r = comm.rank
    comm.barrier()
    if r == 0:
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        t0 = time.monotonic()
        try:
            comm.all_reduce(np.ones(4, np.float32))  # rank 1 never joins
        except KeyboardInterrupt:
            took = time.monotonic() - t0
            assert took < 3, f"Ctrl-C took {took:.2f}s"
            print(f"interrupted after {took:.2f}s", flush=True)
        else:
            raise AssertionError("the op completed without its peer")
        # the communicator was aborted: later ops are refused, not hung
        try:
            comm.all_reduce(np.ones(4, np.float32))
        except hccl_rs.HcclError as e:
            print(f"after the abort: {type(e).__name__}: {e}", flush=True)
        else:
            raise AssertionError("an aborted communicator ran an op")
    else:
        time.sleep(2)
    # no destroy: the peer of an aborted communicator just leaves
    print(f"rank {r} ok: interrupt", flush=True)
    os._exit(0)


def split():
    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size
    members = list(range(p - 1, 0, -1))  # every rank but 0, reversed
    sub = comm.split(members)
    if r == 0:
        assert sub is None
    else:
        assert sub.size == p - 1 and sub.rank == members.index(r), (sub.rank, sub.size)
        x = np.full(3, r, np.float32)
        sub.all_reduce(x)
        assert (x == sum(members)).all(), x
        sub.destroy()
    comm.barrier()
    comm.destroy()


def in_place():
    """all_gather with the send buffer a view of this rank's block of the
    receive buffer, reduce_scatter with the receive buffer a view of this
    rank's block of the send buffer (NCCL's and MPI_IN_PLACE's forms), in
    one call and async; a misplaced view is refused."""
    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size
    for n in (1, 1003, 300_001):
        out = np.full(p * n, -1, np.int32)
        out[r * n:(r + 1) * n] = data(r, n, np.int32)
        comm.all_gather(out[r * n:(r + 1) * n], out)
        eq(out, np.concatenate([data(q, n, np.int32) for q in range(p)]), f"all_gather {n}")
        buf = np.concatenate([data(q * r, n, np.float32) for q in range(p)])
        keep = buf.copy()
        comm.reduce_scatter_async(buf, buf[r * n:(r + 1) * n], "sum").wait()
        # rank s's block q is data(q * s): block r summed over the ranks
        want = sum(data(r * s, n, np.float32) for s in range(p))
        eq(buf[r * n:(r + 1) * n], want.astype(np.float32), f"reduce_scatter {n}")
        others = [q for q in range(p) if q != r]
        for q in others:
            eq(buf[q * n:(q + 1) * n], keep[q * n:(q + 1) * n], "other blocks untouched")
    out = np.zeros(4 * p, np.float32)
    wrong = out[((r + 1) % p) * 4:((r + 1) % p) * 4 + 4]
    try:
        comm.all_gather(wrong, out)
    except hccl_rs.ParameterError as e:
        assert "not in place" in str(e), e
    else:
        raise AssertionError("a misplaced in-place view was accepted")
    comm.barrier()
    comm.destroy()


if __name__ == "__main__":
    scenario(
        {
            "primitives": primitives,
            "views": views,
            "torch_tensors": torch_tensors,
            "asyncs": asyncs,
            "bad_input": bad_input,
            "mismatch": mismatch,
            "killed_peer": killed_peer,
            "interrupt": interrupt,
            "split": split,
            "in_place": in_place,
        }
    )
