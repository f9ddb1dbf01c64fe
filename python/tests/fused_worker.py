"""Test scenarios of the fused ops (hccl_rs.matmul_reduce_scatter,
all_gather_matmul, matmul_all_reduce), run by each rank
(``python fused_worker.py SCENARIO [ARGS]``; see test_fused.py).

Every rank regenerates every rank's operands from seeds, so each checks
its result against a NumPy reference of the whole computation. Operands
are small integers: every product and sum is exact in float32, float16
and (with smaller values) bfloat16, so results are compared exactly."""

import os

import numpy as np
from worker_common import scenario

import hccl_rs
from hccl_rs import ParameterError
from hccl_rs.fused import _run, split_rows

# (M, K, N): odd sizes, a single row, fewer rows than ranks, several blocks
SHAPES = [(37, 19, 23), (1, 5, 3), (2, 7, 4), (130, 33, 17)]


def ints(seed, rows, cols, span=4):
    rng = np.random.default_rng(seed)
    return rng.integers(-span, span + 1, (rows, cols)).astype(np.float64)


def padded_np(x, dtype, pad):
    """``x`` as a ``dtype`` array whose rows are ``pad`` elements longer
    than the row (a column slice of a wider array, not at its start)."""
    rows, cols = x.shape
    big = np.full((rows, cols + pad + 1), np.nan, dtype=dtype)
    big[:, 1:1 + cols] = x
    v = big[:, 1:1 + cols]
    assert not v.flags.c_contiguous or rows <= 1
    return v


def eq(got, want, what):
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    assert np.array_equal(got, want), f"{what}: got\n{got}\nwant\n{want}"


def numpy_ops():
    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size
    for dtype in (np.float32, np.float16):
        for si, (m, k, n) in enumerate(SHAPES):
            tag = f"{np.dtype(dtype).name} {m}x{k}x{n}"
            As = [ints(1000 * si + q, m, k) for q in range(p)]
            Bs = [ints(2000 * si + q, k, n) for q in range(p)]
            total = sum(a @ b for a, b in zip(As, Bs))
            a = padded_np(As[r], dtype, 3)
            b = np.ascontiguousarray(Bs[r].astype(dtype))
            # MatMul+ReduceScatter: allocated output, then a padded given one
            off, rows = split_rows(m, p, r)
            out = hccl_rs.matmul_reduce_scatter(comm, a, b)
            assert isinstance(out, np.ndarray) and out.dtype == dtype
            eq(out, total[off:off + rows], f"matmul_reduce_scatter {tag}")
            given = padded_np(np.zeros((rows, n)), dtype, 2)
            got = hccl_rs.matmul_reduce_scatter(comm, a, b, out=given)
            assert got is given
            eq(given, total[off:off + rows], f"matmul_reduce_scatter out= {tag}")
            # MatMul+AllReduce
            eq(hccl_rs.matmul_all_reduce(comm, a, b), total, f"matmul_all_reduce {tag}")
            given = np.zeros((m, n), dtype=dtype)
            assert hccl_rs.matmul_all_reduce(comm, a, b, given) is given
            eq(given, total, f"matmul_all_reduce out= {tag}")
            # AllGather+MatMul: uneven shards (rank q has m + 2q - 1 rows,
            # rank 0 none when m is 1), B the same everywhere
            shard = [max(0, m + 2 * q - 1) for q in range(p)]
            shards = [ints(3000 * si + q, shard[q], k) for q in range(p)]
            gathered = np.concatenate(shards)
            want = gathered @ Bs[0]
            b0 = np.ascontiguousarray(Bs[0].astype(dtype))
            mine = padded_np(shards[r], dtype, 1)
            eq(hccl_rs.all_gather_matmul(comm, mine, b0), want, f"all_gather_matmul {tag}")
            g, out = hccl_rs.all_gather_matmul(comm, mine, b0, gathered=True)
            eq(g, gathered, f"gathered A {tag}")
            eq(out, want, f"all_gather_matmul with A {tag}")
            g2 = padded_np(np.zeros(gathered.shape), dtype, 4)
            o2 = np.zeros(want.shape, dtype=dtype)
            g3, o3 = hccl_rs.all_gather_matmul(comm, mine, b0, out=o2, gathered=g2)
            assert g3 is g2 and o3 is o2
            eq(g2, gathered, f"gathered A given {tag}")
            eq(o2, want, f"all_gather_matmul given {tag}")
    # random floats (not exact): float32 against a float64 reference
    m, k, n = 61, 45, 29
    rng = [np.random.default_rng(77 + q) for q in range(p)]
    As = [g.standard_normal((m, k)) for g in rng]
    Bs = [g.standard_normal((k, n)) for g in rng]
    total = sum(a @ b for a, b in zip(As, Bs))
    out = hccl_rs.matmul_all_reduce(comm, As[r].astype(np.float32), Bs[r].astype(np.float32))
    assert np.allclose(out, total, rtol=1e-4, atol=1e-4), np.abs(out - total).max()
    comm.destroy()


def torch_ops():
    import torch

    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        # bfloat16 holds integers up to 256 exactly: smaller values there
        span = 2 if dtype == torch.bfloat16 else 4
        for si, (m, k, n) in enumerate(SHAPES[:3] + [(70, 11, 9)]):
            tag = f"{dtype} {m}x{k}x{n}"
            As = [ints(1000 * si + q, m, k, span) for q in range(p)]
            Bs = [ints(2000 * si + q, k, n, span) for q in range(p)]
            total = sum(a @ b for a, b in zip(As, Bs))
            # a strided view: the columns 2..2+k of a wider tensor
            wide = torch.zeros((m, k + 5), dtype=dtype)
            wide[:, 2:2 + k] = torch.from_numpy(As[r]).to(dtype)
            a = wide[:, 2:2 + k]
            assert not a.is_contiguous() or m <= 1
            b = torch.from_numpy(Bs[r]).to(dtype)
            off, rows = split_rows(m, p, r)
            out = hccl_rs.matmul_reduce_scatter(comm, a, b)
            assert isinstance(out, torch.Tensor) and out.dtype == dtype
            eq(out.double().numpy(), total[off:off + rows], f"matmul_reduce_scatter {tag}")
            out = hccl_rs.matmul_all_reduce(comm, a, b)
            eq(out.double().numpy(), total, f"matmul_all_reduce {tag}")
            shard = [max(0, m + 2 * q - 1) for q in range(p)]
            shards = [ints(3000 * si + q, shard[q], k, span) for q in range(p)]
            gathered = np.concatenate(shards)
            b0 = torch.from_numpy(Bs[0]).to(dtype)
            g, out = hccl_rs.all_gather_matmul(
                comm, torch.from_numpy(shards[r]).to(dtype), b0, gathered=True
            )
            eq(g.double().numpy(), gathered, f"gathered A {tag}")
            eq(out.double().numpy(), gathered @ Bs[0], f"all_gather_matmul {tag}")
    comm.destroy()


def expect_para(f, *needles):
    try:
        f()
    except ParameterError as e:
        for s in needles:
            assert s in str(e), f"{s!r} not in {e}"
        return str(e)
    raise AssertionError(f"no ParameterError (wanted {needles})")


def errors():
    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size
    m, k, n = 6, 4, 5
    a = np.ones((m, k), dtype=np.float32)
    b = np.ones((k, n), dtype=np.float32)
    refused = "refused their operands"
    # rank 1's A has column stride 2: it says so, the others name rank 1
    wide = np.ones((m, 2 * k), dtype=np.float32)
    mine = wide[:, ::2] if r == 1 else a
    want = ("column stride 2",) if r == 1 else (refused, "[1]")
    expect_para(lambda: hccl_rs.matmul_reduce_scatter(comm, mine, b), *want)
    # a torch-style transposed matrix too (column stride != 1)
    expect_para(lambda: hccl_rs.matmul_all_reduce(comm, np.ones((k, m), np.float32).T if r == 0
                                                  else a, b),
                *(("column stride",) if r == 0 else (refused, "[0]")))
    # M differs across ranks: every rank refuses, naming the mismatch
    am = np.ones((m + r, k), dtype=np.float32)
    expect_para(lambda: hccl_rs.matmul_reduce_scatter(comm, am, b), "disagree on M")
    expect_para(lambda: hccl_rs.matmul_all_reduce(comm, am, b), "disagree on M")
    # K differs across ranks
    ak = np.ones((m, k + r), dtype=np.float32)
    bk = np.ones((k + r, n), dtype=np.float32)
    expect_para(lambda: hccl_rs.matmul_all_reduce(comm, ak, bk), "disagree on K")
    expect_para(lambda: hccl_rs.all_gather_matmul(comm, ak, bk), "disagree on K")
    # N differs across ranks
    bn = np.ones((k, n + r), dtype=np.float32)
    expect_para(lambda: hccl_rs.all_gather_matmul(comm, a, bn), "disagree on N")
    # an unsupported type on every rank
    expect_para(lambda: hccl_rs.matmul_all_reduce(comm, a.astype(np.float64), b.astype(np.float64)),
                "a is float64; fused ops take float32 and float16")
    # mixed types on one rank
    b16 = b.astype(np.float16) if r == 0 else b
    expect_para(lambda: hccl_rs.matmul_all_reduce(comm, a, b16),
                *(("all operands must share one type",) if r == 0 else (refused,)))
    # shapes that do not chain (A's columns against B's rows) on every rank
    expect_para(lambda: hccl_rs.matmul_all_reduce(comm, a, np.ones((k + 1, n), np.float32)),
                "A's columns must equal B's rows")
    # an output of the wrong shape on the last rank
    bad_out = np.zeros((m + 1 if r == p - 1 else m, n), np.float32)
    expect_para(lambda: hccl_rs.matmul_all_reduce(comm, a, b, bad_out),
                *(("the output has 7 rows, A has 6",) if r == p - 1 else (refused,)))
    # a read-only output on rank 0
    ro = np.zeros((m, n), np.float32)
    if r == 0:
        ro.flags.writeable = False
    expect_para(lambda: hccl_rs.matmul_all_reduce(comm, a, b, ro),
                *(("read-only",) if r == 0 else (refused,)))
    # AllGather+MatMul: a 1-D shard on rank 0
    shard = np.ones(k, np.float32) if r == 0 else a
    expect_para(lambda: hccl_rs.all_gather_matmul(comm, shard, b),
                *(("2-D",) if r == 0 else (refused, "[0]")))
    # a gathered A of the wrong rows
    g = np.zeros((p * m - (1 if r == 0 else 0), k), np.float32)
    expect_para(lambda: hccl_rs.all_gather_matmul(comm, a, b, gathered=g), "gathered A has")
    # not a matrix at all
    expect_para(lambda: hccl_rs.matmul_all_reduce(comm, [1, 2] if r == 1 else a, b),
                *(("NumPy array",) if r == 1 else (refused,)))
    # the communicator still works, and the outputs of refused ops were not
    # written
    assert not ro.any()
    out = hccl_rs.matmul_all_reduce(comm, a, b)
    eq(out, np.full((m, n), float(k * p)), "after the errors")
    comm.destroy()
    expect_para(lambda: hccl_rs.matmul_all_reduce(comm, a, b), "destroyed")


def path(expected):
    """Under HCCL_RS_FUSED_PATH=expected: each op reports that path and is
    right, with shapes of several blocks."""
    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size
    m, k, n = 301, 21, 37
    As = [ints(q, m, k) for q in range(p)]
    Bs = [ints(50 + q, k, n) for q in range(p)]
    total = sum(a @ b for a, b in zip(As, Bs))
    a, b = As[r].astype(np.float32), Bs[r].astype(np.float32)
    off, rows = split_rows(m, p, r)
    for _ in range(3):  # repeated: the workspace is reused
        out = np.zeros((rows, n), np.float32)
        rep = _run(comm, "matmul_reduce_scatter", a, b, out)
        # the pipelines cut the op into blocks; unfused runs it whole
        want_blocks = (lambda b: b == 1) if expected == "unfused" else (lambda b: b >= 2)
        assert rep["path"] == expected and want_blocks(rep["blocks"]), rep
        eq(out, total[off:off + rows], f"matmul_reduce_scatter on {expected}")
        out = np.zeros((m, n), np.float32)
        rep = _run(comm, "matmul_all_reduce", a, b, out)
        assert rep["path"] == expected, rep
        eq(out, total, f"matmul_all_reduce on {expected}")
        ag_path(comm, expected, 100)
    assert os.environ["HCCL_RS_FUSED_PATH"] == expected
    comm.destroy()


def ag_path(comm, expected, rows):
    """AllGather+MatMul on path ``expected`` with shards of ``rows`` rows
    (and one more on each later rank)."""
    r, p = comm.rank, comm.size
    k, n = 21, 37
    shards = [ints(90 + q, rows + q, k) for q in range(p)]
    B = ints(50, k, n)
    want = np.concatenate(shards) @ B
    b = B.astype(np.float32)
    for _ in range(10):
        out = np.zeros(want.shape, np.float32)
        g = np.zeros((sum(x.shape[0] for x in shards), k), np.float32)
        rep = _run(comm, "all_gather_matmul", shards[r].astype(np.float32), b, out, g)
        assert rep["path"] == expected, rep
        bad = np.where((out != want).any(axis=1))[0]
        assert not len(bad), f"all_gather_matmul on {expected} ({rep}): rows {bad} wrong"
        eq(g, np.concatenate(shards), f"gathered on {expected}")


def ag_stream_blocks(rows):
    """The stream path's AllGather+MatMul with shards of ``rows`` rows."""
    comm = hccl_rs.Comm.from_env()
    ag_path(comm, "stream", int(rows))
    comm.destroy()


def after_async():
    """A fused op waits for the communicator's async ops in flight: the
    AllReduce producing A completes before the op reads A."""
    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size
    m, k, n = 40, 8, 6
    a = np.full((m, k), float(r + 1), np.float32)
    w = comm.all_reduce_async(a)  # a becomes Σ(r+1) everywhere
    b = np.ones((k, n), np.float32)
    out = hccl_rs.matmul_all_reduce(comm, a, b)
    s = p * (p + 1) / 2
    eq(out, np.full((m, n), s * k * p), "fused op after an async AllReduce")
    w.wait()
    comm.destroy()


if __name__ == "__main__":
    scenario({
        "numpy": numpy_ops,
        "torch": torch_ops,
        "errors": errors,
        "path": path,
        "ag_stream_blocks": ag_stream_blocks,
        "after_async": after_async,
    })
