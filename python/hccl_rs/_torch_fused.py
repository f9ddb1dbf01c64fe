"""CPU kernels of PyTorch's fused symmetric-memory ops over hccl-rs.

``import hccl_rs.torch`` registers (``torch.library.impl`` for the CPU
dispatch key of the ``symm_mem`` namespace, which
``torch.distributed._symmetric_memory`` defines):

- ``torch.ops.symm_mem.fused_matmul_reduce_scatter(A, B, reduce_op,
  scatter_dim, group_name)`` = ``reduce_scatter(A @ B, reduce_op,
  scatter_dim)`` over the group, through :func:`hccl_rs.matmul_reduce_scatter`
  (``reduce_op`` ``"sum"`` or ``"avg"``; any ``scatter_dim`` of A, whose
  size must divide by the group size — the last one through the
  transposed product);
- ``torch.ops.symm_mem.fused_all_gather_matmul(A_shard, Bs, gather_dim,
  group_name, *, return_A=True)`` = ``(A, [A @ B for B in Bs])`` with A the
  shards gathered along ``gather_dim``, through
  :func:`hccl_rs.all_gather_matmul` (the first B; the others multiply the
  gathered A locally) or, for the last ``gather_dim`` (K gathered),
  :func:`hccl_rs.matmul_all_reduce` of the shard with its rows of each B;

and CPU kernels of the scaled (FP8) variants that refuse, naming the
scales. The group must be of the ``"hccl_rs"`` backend; its communicator
runs the op. Operands: CPU tensors of float32, bfloat16 or float16, one
type throughout. PyTorch's symmetric memory itself (``symm_mem.empty``,
``rendezvous``) has no CPU backend and is not needed: the kernels take
plain CPU tensors, and hccl-rs keeps its own symmetric window per
communicator (see docs/python.md).
"""

from __future__ import annotations

import torch
import torch.distributed.distributed_c10d as c10d

from . import _native
from .errors import NotSupportedError, ParameterError
from .fused import all_gather_matmul, matmul_all_reduce, matmul_reduce_scatter

__all__ = ["register", "comm_of_group"]

_TYPES = (torch.float32, torch.bfloat16, torch.float16)
_LIB = None


def comm_of_group(group_name: str, op: str) -> tuple[_native.Comm, int]:
    """The hccl_rs communicator of the process group called
    ``group_name``, and the group's size. A group of another backend:
    :class:`NotSupportedError` naming it."""
    pg = c10d._resolve_process_group(group_name)
    comm = getattr(pg, "comm", None)
    if not isinstance(comm, _native.Comm):
        # a plain ProcessGroup (HCCL_RS_TORCH_PG=0): its CPU backend
        try:
            comm = getattr(pg._get_backend(torch.device("cpu")), "comm", None)
        except RuntimeError:
            comm = None
    if not isinstance(comm, _native.Comm):
        try:
            name = pg._get_backend_name()
        except (AttributeError, RuntimeError):
            name = type(pg).__name__
        raise NotSupportedError(
            f"symm_mem::{op}: group {group_name!r} is of backend {name!r}; the CPU kernel "
            "runs on hccl_rs communicators: use a group of the 'hccl_rs' backend",
            5,
        )
    return comm, pg.size()


def _check_operands(op: str, A: torch.Tensor, Bs) -> None:
    for what, t in [("A", A)] + [(f"B{'' if len(Bs) == 1 else f'[{i}]'}", b) for i, b in
                                 enumerate(Bs)]:
        if t.device.type != "cpu":
            raise ParameterError(f"symm_mem::{op}: {what} is on {t.device}; this kernel is for "
                                 "CPU tensors", 1)
        if t.dtype not in _TYPES:
            raise NotSupportedError(
                f"symm_mem::{op}: {what} is {t.dtype}; hccl-rs fused ops take float32, "
                "bfloat16 and float16", 5)
        if t.dtype != A.dtype:
            raise ParameterError(f"symm_mem::{op}: {what} is {t.dtype} but A is {A.dtype}", 1)
    if A.dim() < 2:
        raise ParameterError(f"symm_mem::{op}: A must be a matrix (2 or more dimensions), "
                             f"got {A.dim()}", 1)
    for i, b in enumerate(Bs):
        if b.dim() != 2:
            raise ParameterError(f"symm_mem::{op}: B{'' if len(Bs) == 1 else f'[{i}]'} must be "
                                 f"a matrix, got {b.dim()} dimensions", 1)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` (2-D) with adjacent elements in each row (a copy if needed)."""
    return t if t.shape[1] <= 1 or t.stride(1) == 1 else t.contiguous()


def fused_matmul_reduce_scatter(
    A: torch.Tensor, B: torch.Tensor, reduce_op: str, scatter_dim: int, group_name: str
) -> torch.Tensor:
    """The CPU kernel of ``symm_mem::fused_matmul_reduce_scatter``."""
    op = "fused_matmul_reduce_scatter"
    _check_operands(op, A, [B])
    if reduce_op not in ("sum", "avg"):
        raise ParameterError(f"symm_mem::{op}: reduce_op {reduce_op!r}: only 'sum' and 'avg' "
                             "are supported", 1)
    if scatter_dim < 0 or scatter_dim >= A.dim():
        raise ParameterError(f"symm_mem::{op}: scatter_dim {scatter_dim} is out of range for "
                             f"A of {A.dim()} dimensions", 1)
    if A.shape[-1] != B.shape[0]:
        raise ParameterError(f"symm_mem::{op}: A's last dimension ({A.shape[-1]}) must equal "
                             f"B's rows ({B.shape[0]})", 1)
    comm, p = comm_of_group(group_name, op)
    last = scatter_dim == A.dim() - 1
    size = B.shape[1] if last else A.shape[scatter_dim]
    if size % p:
        raise ParameterError(
            f"symm_mem::{op}: scatter_dim {scatter_dim} has size {size}, not divisible by the "
            f"group size {p}", 1)
    if last:
        # the columns of A @ B scattered: rows of (A @ B)^T = B^T A^T
        a_flat = A.reshape(-1, A.shape[-1])
        out_t = matmul_reduce_scatter(comm, B.t().contiguous(), a_flat.t().contiguous())
        res = out_t.t().reshape(*A.shape[:-1], size // p)
    else:
        x = A.movedim(scatter_dim, 0)
        lead = list(x.shape[:-1])
        x = _rows(x.reshape(-1, x.shape[-1]))
        out = matmul_reduce_scatter(comm, x, _rows(B))
        res = out.view(lead[0] // p, *lead[1:], B.shape[1]).movedim(0, scatter_dim)
    res = res.contiguous()
    if reduce_op == "avg":
        res.div_(p)
    return res


def fused_all_gather_matmul(
    A_shard: torch.Tensor,
    Bs: list[torch.Tensor],
    gather_dim: int,
    group_name: str,
    *,
    return_A: bool = True,
) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
    """The CPU kernel of ``symm_mem::fused_all_gather_matmul``."""
    op = "fused_all_gather_matmul"
    _check_operands(op, A_shard, list(Bs))
    if gather_dim < 0 or gather_dim >= A_shard.dim():
        raise ParameterError(f"symm_mem::{op}: gather_dim {gather_dim} is out of range for "
                             f"A_shard of {A_shard.dim()} dimensions", 1)
    comm, p = comm_of_group(group_name, op)
    r = comm.rank
    if gather_dim == A_shard.dim() - 1:
        # K gathered: A = [A_0 | A_1 | ...], A @ B = Σ_q A_q @ B[q-th K rows]
        k = A_shard.shape[-1]
        for i, b in enumerate(Bs):
            if b.shape[0] != p * k:
                raise ParameterError(
                    f"symm_mem::{op}: Bs[{i}] has {b.shape[0]} rows; A gathered along its last "
                    f"dimension has {p} x {k}", 1)
        a_flat = _rows(A_shard.reshape(-1, k))
        outs = [
            matmul_all_reduce(comm, a_flat, _rows(b[r * k:(r + 1) * k]))
            .view(*A_shard.shape[:-1], b.shape[1])
            for b in Bs
        ]
        a_full = None
        if return_A:
            parts = torch.empty((p, *A_shard.shape), dtype=A_shard.dtype)
            comm.all_gather(A_shard.contiguous(), parts)
            a_full = torch.cat(list(parts.unbind(0)), dim=-1)
        return a_full, outs
    x = A_shard.movedim(gather_dim, 0)
    leading = [p] + list(x.shape[:-1])
    x = _rows(x.reshape(-1, x.shape[-1]))

    def unflatten(t: torch.Tensor) -> torch.Tensor:
        return t.view(*leading, -1).flatten(0, 1).movedim(0, gather_dim)

    if not Bs:
        if not return_A:
            return None, []
        parts = torch.empty((p, *x.shape), dtype=x.dtype)
        comm.all_gather(x.contiguous(), parts)
        return unflatten(parts.reshape(-1, x.shape[1])), []
    for i, b in enumerate(Bs):
        if b.shape[0] != x.shape[1]:
            raise ParameterError(f"symm_mem::{op}: Bs[{i}] has {b.shape[0]} rows, A_shard's "
                                 f"last dimension is {x.shape[1]}", 1)
    want_a = return_A or len(Bs) > 1
    res = all_gather_matmul(comm, x, _rows(Bs[0]), gathered=True if want_a else None)
    gathered, out0 = res if want_a else (None, res)
    if out0.shape[0] != p * x.shape[0]:
        raise ParameterError(
            f"symm_mem::{op}: the ranks' A_shard shapes differ ({out0.shape[0]} rows gathered, "
            f"{p} x {x.shape[0]} here); the op gathers equal shards", 1)
    outs = [out0] + [torch.matmul(gathered, b) for b in Bs[1:]]
    return (unflatten(gathered) if return_A else None), [unflatten(o) for o in outs]


def _refuse_scaled(op: str):
    def kernel(*args, **kwargs):
        raise NotSupportedError(
            f"symm_mem::{op} on CPU: A_scale / B_scale (scaled FP8 matmuls) are not supported "
            "by hccl-rs fused ops, which take float32, bfloat16 and float16 operands; use "
            f"symm_mem::{op.replace('_scaled', '')} and scale the result", 5)

    return kernel


def register() -> bool:
    """Registers the CPU kernels (idempotent). False when this torch has no
    ``symm_mem`` fused ops, or when they have CPU kernels already (from
    elsewhere); then nothing is registered."""
    global _LIB
    if _LIB is not None:
        return True
    try:
        import torch.distributed._symmetric_memory  # noqa: F401  (defines the symm_mem ops)
    except ImportError:
        return False
    ops = {
        "fused_matmul_reduce_scatter": fused_matmul_reduce_scatter,
        "fused_all_gather_matmul": fused_all_gather_matmul,
        "fused_scaled_matmul_reduce_scatter": _refuse_scaled("fused_scaled_matmul_reduce_scatter"),
        "fused_all_gather_scaled_matmul": _refuse_scaled("fused_all_gather_scaled_matmul"),
    }
    present = {n: f for n, f in ops.items() if hasattr(torch.ops.symm_mem, n)}
    if not {"fused_matmul_reduce_scatter", "fused_all_gather_matmul"} <= set(present):
        return False
    if any(torch._C._dispatch_has_kernel_for_dispatch_key(f"symm_mem::{n}", "CPU")
           for n in present):
        return False
    lib = torch.library.Library("symm_mem", "IMPL")
    for name, fn in present.items():
        torch.library.impl(f"symm_mem::{name}", "CPU", fn, lib=lib)
    _LIB = lib
    return True
