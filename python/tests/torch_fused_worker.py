"""torch.ops.symm_mem.fused_matmul_reduce_scatter and fused_all_gather_matmul
on CPU tensors over the "hccl_rs" backend, run by each rank
(``python torch_fused_worker.py SCENARIO`` with torch's env:// variables,
or under torchrun; see test_torch_fused.py).

Every rank regenerates every rank's inputs from seeds and checks its
result against plain torch math on them (float64), and against the
unfused collectives (reduce_scatter_tensor / all_gather_into_tensor of
the backend, then matmul). Inputs are small integers, so float32 results
are exact."""

import os

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from worker_common import scenario

import hccl_rs.torch  # noqa: F401  (the backend and the symm_mem CPU kernels)
from hccl_rs import NotSupportedError, ParameterError


def ints(seed, shape, span=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-span, span + 1, shape, generator=g).to(torch.float64)


def eq(got, want, what):
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    assert torch.equal(got.to(torch.float64), want), f"{what}: got\n{got}\nwant\n{want}"


def setup():
    dist.init_process_group("hccl_rs")
    return dist.get_rank(), dist.get_world_size(), dist.group.WORLD.group_name


def matmul_reduce_scatter():
    r, p, gname = setup()
    mrs = torch.ops.symm_mem.fused_matmul_reduce_scatter
    # (A's shape, scatter_dim), N
    cases = [((6 * p, 11), 0), ((3 * p + 0, 5, 7), 0), ((4, 2 * p, 9), 1), ((3, 5, 8), 2),
             ((5 * p, 13), 1)]
    n = 4 * p
    for ci, (shape, sd) in enumerate(cases):
        for dtype in (torch.float32, torch.bfloat16):
            span = 2 if dtype == torch.bfloat16 else 4
            As = [ints(100 * ci + q, shape, span) for q in range(p)]
            Bs = [ints(200 * ci + q, (shape[-1], n), span) for q in range(p)]
            full = sum(a @ b for a, b in zip(As, Bs))
            want = full.chunk(p, dim=sd)[r]
            for op in ("sum", "avg"):
                got = mrs(As[r].to(dtype), Bs[r].to(dtype), op, sd, gname)
                assert got.dtype == dtype and got.is_contiguous()
                tag = f"{op} {shape} dim {sd} {dtype}"
                if op == "sum":
                    eq(got, want, tag)
                else:  # a division: rounded
                    tol = 1e-2 if dtype == torch.bfloat16 else 1e-6
                    assert got.shape == want.shape, tag
                    assert torch.allclose(got.double(), want / p, rtol=tol, atol=tol), tag
            # against the unfused collective of the backend
            if dtype == torch.float32:
                prod = (As[r] @ Bs[r]).float().movedim(sd, 0).contiguous()
                rs = torch.empty((prod.shape[0] // p, *prod.shape[1:]), dtype=torch.float32)
                dist.reduce_scatter_tensor(rs, prod)
                eq(mrs(As[r].float(), Bs[r].float(), "sum", sd, gname),
                   rs.movedim(0, sd).double(), f"against reduce_scatter_tensor {shape} {sd}")
    # a strided A (a transposed view): copied as needed
    a = ints(7 + r, (9, 4 * p)).float()
    b = ints(8 + r, (9, 5)).float()
    full = sum(ints(7 + q, (9, 4 * p)).t() @ ints(8 + q, (9, 5)) for q in range(p))
    eq(mrs(a.t(), b, "sum", 0, gname), full.chunk(p)[r], "transposed A")
    dist.destroy_process_group()


def all_gather_matmul():
    r, p, gname = setup()
    agm = torch.ops.symm_mem.fused_all_gather_matmul
    # A_shard's shape, gather_dim
    cases = [((7, 10), 0), ((3, 4, 6), 0), ((2, 5, 6), 1), ((3, 5), 1), ((2, 3, 4), 2)]
    for ci, (shape, gd) in enumerate(cases):
        for dtype in (torch.float32, torch.bfloat16):
            span = 2 if dtype == torch.bfloat16 else 4
            shards = [ints(300 * ci + q, shape, span) for q in range(p)]
            a_full = torch.cat(shards, dim=gd)
            k = a_full.shape[-1]
            Bs = [ints(400 * ci + i, (k, 3 + i), span) for i in range(2)]
            for return_A in (True, False):
                for nb in (1, 2):
                    A, outs = agm(shards[r].to(dtype), [b.to(dtype) for b in Bs[:nb]], gd, gname,
                                  return_A=return_A)
                    tag = f"{shape} dim {gd} {dtype} return_A={return_A} Bs={nb}"
                    if return_A:
                        eq(A, a_full, f"A {tag}")
                    else:
                        assert A is None, tag
                    assert len(outs) == nb
                    for i in range(nb):
                        assert outs[i].dtype == dtype
                        eq(outs[i], a_full @ Bs[i], f"out[{i}] {tag}")
        # against the unfused collective of the backend (gather_dim 0 cases)
        if gd == 0:
            x = shards[r].float().contiguous()
            g = torch.empty((p * x.shape[0], *x.shape[1:]))
            dist.all_gather_into_tensor(g, x)
            _, (o,) = agm(x, [Bs[0].float()], 0, gname, return_A=False)
            eq(o, (g @ Bs[0].float()).double(), f"against all_gather_into_tensor {shape}")
    # no Bs: only the gathered A
    A, outs = agm(ints(5 + r, (2, 3)).float(), [], 0, gname)
    eq(A, torch.cat([ints(5 + q, (2, 3)) for q in range(p)]), "A without Bs")
    assert outs == []
    dist.destroy_process_group()


def errors():
    r, p, gname = setup()
    mrs = torch.ops.symm_mem.fused_matmul_reduce_scatter
    agm = torch.ops.symm_mem.fused_all_gather_matmul
    a, b = torch.ones(2 * p, 3), torch.ones(3, 4)

    def expect(exc, f, *needles):
        try:
            f()
        except exc as e:
            for s in needles:
                assert s in str(e), f"{s!r} not in {e}"
            return
        raise AssertionError(f"no {exc.__name__} ({needles})")

    expect(ParameterError, lambda: mrs(a, b, "max", 0, gname), "reduce_op 'max'")
    expect(ParameterError, lambda: mrs(a, b, "sum", 2, gname), "scatter_dim 2")
    expect(ParameterError, lambda: mrs(torch.ones(2 * p + 1, 3), b, "sum", 0, gname),
           "not divisible by the group size")
    expect(NotSupportedError, lambda: mrs(a.double(), b.double(), "sum", 0, gname),
           "torch.float64")
    expect(ParameterError, lambda: mrs(a, b.half(), "sum", 0, gname), "torch.float16 but A")
    expect(ParameterError, lambda: agm(a, [b], 3, gname), "gather_dim 3")
    expect(ParameterError, lambda: agm(a, [torch.ones(4, 4)], 0, gname), "Bs[0] has 4 rows")
    # K differs across ranks: every rank's op refuses (the fused layer's agreement)
    ak, bk = torch.ones(2 * p, 3 + r), torch.ones(3 + r, 4)
    expect(ParameterError, lambda: mrs(ak, bk, "sum", 0, gname), "disagree on K")
    # the scaled (FP8) variant is refused naming the scales
    expect(NotSupportedError,
           lambda: torch.ops.symm_mem.fused_scaled_matmul_reduce_scatter(
               a, b, torch.ones(()), torch.ones(()), "sum", 0, 0, gname, None),
           "A_scale / B_scale")
    # a group of another backend
    gloo = dist.new_group(backend="gloo")
    expect(NotSupportedError, lambda: mrs(a, b, "sum", 0, gloo.group_name),
           "'hccl_rs' backend", "gloo")
    # after all that, the op runs
    out = mrs(a, b, "sum", 0, gname)
    eq(out, torch.full((2, 4), 3.0 * p, dtype=torch.float64), "after the errors")
    dist.destroy_process_group()


def subgroup():
    """A new_group of the hccl_rs backend (ranks 1.. of the world)."""
    r, p, _ = setup()
    ranks = list(range(1, p))
    g = dist.new_group(ranks)
    if r in ranks:
        q, s = ranks.index(r), len(ranks)
        a = ints(60 + r, (2 * s, 5)).float()
        b = ints(70 + r, (5, 3)).float()
        full = sum(ints(60 + x, (2 * s, 5)) @ ints(70 + x, (5, 3)) for x in ranks)
        got = torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b, "sum", 0, g.group_name)
        eq(got, full.chunk(s)[q], "subgroup")
        assert c10d._resolve_process_group(g.group_name) is not None
    dist.barrier()
    dist.destroy_process_group()


def torchrun_env():
    """Under torchrun: both ops once, on the default group."""
    r, p, gname = setup()
    assert os.environ.get("TORCHELASTIC_RUN_ID") is not None or os.environ.get("LOCAL_RANK")
    a = ints(r, (4 * p, 6)).float()
    b = ints(10 + r, (6, 5)).float()
    full = sum(ints(q, (4 * p, 6)) @ ints(10 + q, (6, 5)) for q in range(p))
    eq(torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b, "sum", 0, gname),
       full.chunk(p)[r], "fused_matmul_reduce_scatter under torchrun")
    shard = ints(20 + r, (3, 6)).float()
    b0 = ints(30, (6, 4)).float()
    A, (o,) = torch.ops.symm_mem.fused_all_gather_matmul(shard, [b0], 0, gname)
    a_full = torch.cat([ints(20 + q, (3, 6)) for q in range(p)])
    eq(A, a_full, "gathered A under torchrun")
    eq(o, a_full @ b0.double(), "fused_all_gather_matmul under torchrun")
    dist.destroy_process_group()


if __name__ == "__main__":
    scenario({
        "matmul_reduce_scatter": matmul_reduce_scatter,
        "all_gather_matmul": all_gather_matmul,
        "errors": errors,
        "subgroup": subgroup,
        "torchrun_env": torchrun_env,
    })
