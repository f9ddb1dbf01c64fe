"""Fused compute/communication ops (hccl-fused, HCCL's MC2 ops on CPUs).

Three collective ops on 2-D matrices — NumPy arrays (float32, float16)
or CPU torch tensors (float32, bfloat16, float16) — every rank calling
the same op::

    out = hccl_rs.matmul_reduce_scatter(comm, a, b)        # my rows of Σ A_q·B_q
    out = hccl_rs.all_gather_matmul(comm, a, b)            # gather(A)·B
    gathered, out = hccl_rs.all_gather_matmul(comm, a, b, gathered=True)
    out = hccl_rs.matmul_all_reduce(comm, a, b)            # Σ A_q·B_q

Matrices may have padded rows (a row stride larger than the row, e.g. a
column slice ``x[:, 2:9]``), but the elements of a row must be adjacent
(column stride 1); anything else is a :class:`ParameterError`. ``a``,
``b`` and the outputs share one element type; products accumulate in
float32. ``out`` (and ``gathered``) are allocated like ``a`` (a NumPy array
or a torch tensor) when not given; a given one is written in place and
returned.

The ops are synchronous: each first waits for the ops the communicator
still has in flight (earlier ``*_async`` calls), then runs with the GIL
released and returns once the output is written. An argument this rank
cannot use (wrong type, dimensions, strides, read-only output) fails the
op on every rank: this rank raises its own :class:`ParameterError`, the
others one naming it, and no rank writes its output. The pipeline comes
from ``HCCL_RS_FUSED_PATH`` / ``_BLOCK_ROWS`` / ``_STAGES`` / ``_THREADS``,
read at the communicator's first fused op.
"""

from __future__ import annotations

import array
import sys
from typing import Any

from . import _native
from .errors import ParameterError

__all__ = ["matmul_reduce_scatter", "all_gather_matmul", "matmul_all_reduce", "split_rows"]

#: A 2-D NumPy array or CPU torch tensor.
Matrix = Any

_TORCH_TYPES = ("float32", "bfloat16", "float16")
_NUMPY_TYPES = ("float32", "float16")


def split_rows(m: int, p: int, r: int) -> tuple[int, int]:
    """Rows ``(offset, count)`` of an ``m``-row matrix that rank ``r`` of
    ``p`` gets from :func:`matmul_reduce_scatter`: the first ``m % p``
    ranks get one row more."""
    q, extra = divmod(m, p)
    return r * q + min(r, extra), q + (1 if r < extra else 0)


def _describe(x: Any, what: str, written: bool):
    """``x`` as ``(RawBuffer, rows, cols, ld)``, or a string saying why this
    rank cannot use it (raised after the op's agreement, see the module
    docs)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        if x.dim() != 2:
            return f"{what} must be a 2-D matrix; it has {x.dim()} dimensions"
        if x.device.type != "cpu":
            return f"{what} is on {x.device}; hccl_rs takes CPU tensors"
        name = str(x.dtype).removeprefix("torch.")
        if name not in _TORCH_TYPES:
            return f"{what} is {x.dtype}; fused ops take float32, bfloat16 and float16"
        rows, cols = x.shape
        row_stride, col_stride = x.stride()
        esize = x.element_size()
        addr = x.data_ptr()
        readonly = False
    else:
        np = sys.modules.get("numpy")
        if np is None or not isinstance(x, np.ndarray):
            return (
                f"{what} must be a 2-D NumPy array or a CPU torch tensor, "
                f"not {type(x).__name__}"
            )
        if x.ndim != 2:
            return f"{what} must be a 2-D matrix; it has {x.ndim} dimensions"
        name = x.dtype.name
        if name not in _NUMPY_TYPES or not x.dtype.isnative:
            return (
                f"{what} is {x.dtype}; fused ops take float32 and float16 NumPy arrays "
                "(bfloat16 as torch tensors)"
            )
        rows, cols = x.shape
        esize = x.itemsize
        if x.strides[0] % esize or x.strides[1] % esize:
            return f"{what} has strides {x.strides} that are not whole elements"
        row_stride, col_stride = x.strides[0] // esize, x.strides[1] // esize
        addr = x.__array_interface__["data"][0]
        readonly = not x.flags.writeable
    if cols > 1 and rows > 0 and col_stride != 1:
        return (
            f"{what} has column stride {col_stride}; fused ops need the elements of a row "
            f"adjacent (column stride 1): pass a contiguous copy"
        )
    ld = row_stride if rows > 1 else cols
    if rows > 1 and ld < cols:
        return f"{what} has row stride {row_stride}, less than its {cols} columns (rows overlap)"
    if written and readonly:
        return f"{what} is read-only but the op writes it"
    nbytes = ((rows - 1) * ld + cols) * esize if rows and cols else 0
    raw = _native.RawBuffer(addr if nbytes else 0, nbytes, name, x, readonly)
    return (raw, rows, cols, ld)


def _rows_cols(x: Any) -> tuple[int, int] | None:
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) != 2:
        return None
    return int(shape[0]), int(shape[1])


def _empty_like(a: Any, rows: int, cols: int):
    """A new ``rows × cols`` matrix of ``a``'s kind and type, or None."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        return torch.empty((rows, cols), dtype=a.dtype)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(a, np.ndarray):
        return np.empty((rows, cols), dtype=a.dtype)
    return None


def _run(comm: _native.Comm, op: str, a: Any, b: Any, out: Any, gathered: Any = None) -> dict:
    descs = [_describe(a, "a", False), _describe(b, "b", False)]
    descs.append(_describe(out, "out", True) if out is not None else "out could not be allocated")
    g = None if gathered is None else _describe(gathered, "gathered", True)
    return _native._fused_op(comm, op, *descs, g)


def matmul_reduce_scatter(comm: _native.Comm, a: Matrix, b: Matrix, out: Matrix | None = None) -> Matrix:
    """MatMul+ReduceScatter: every rank holds ``a`` (M×K) and ``b`` (K×N);
    returns this rank's rows of Σ over ranks of ``a @ b``: rows
    :func:`split_rows` ``(M, size, rank)`` (the first ``M % size`` ranks get
    one more), in ``out`` if given (that many rows × N)."""
    if out is None:
        shape = (_rows_cols(a), _rows_cols(b))
        if shape[0] is not None and shape[1] is not None:
            out = _empty_like(a, split_rows(shape[0][0], comm.size, comm.rank)[1], shape[1][1])
    _run(comm, "matmul_reduce_scatter", a, b, out)
    return out


def matmul_all_reduce(comm: _native.Comm, a: Matrix, b: Matrix, out: Matrix | None = None) -> Matrix:
    """MatMul+AllReduce: every rank holds ``a`` (M×K) and ``b`` (K×N);
    every rank gets Σ over ranks of ``a @ b`` (M×N), in ``out`` if given."""
    if out is None:
        shape = (_rows_cols(a), _rows_cols(b))
        if shape[0] is not None and shape[1] is not None:
            out = _empty_like(a, shape[0][0], shape[1][1])
    _run(comm, "matmul_all_reduce", a, b, out)
    return out


def all_gather_matmul(
    comm: _native.Comm,
    a: Matrix,
    b: Matrix,
    out: Matrix | None = None,
    gathered: Matrix | bool | None = None,
) -> Matrix | tuple[Matrix, Matrix]:
    """AllGather+MatMul: every rank holds its row shard ``a`` (any number
    of rows, K columns; rank order is row order) and ``b`` (K×N); every
    rank gets ``A @ b`` with A the shards stacked (ΣM×N).

    Returns ``out`` — or, when ``gathered`` is given, ``(gathered, out)``
    with the gathered A (ΣM×K) in it, the order torch's
    ``fused_all_gather_matmul`` returns them: ``gathered=True`` allocates
    it, a matrix is written in place. The shards' row counts are exchanged
    first (one small AllGather), so ranks need not know each other's.
    """
    want_g = gathered is not None and gathered is not False
    rc = _rows_cols(a)
    m = rc[0] if rc is not None else -1
    counts = array.array("q", [0] * comm.size)
    comm.all_gather(array.array("q", [m]), counts)
    bad = [q for q, c in enumerate(counts) if c < 0]
    if bad:
        if m < 0:
            # this rank's own error, raised after its peers learnt of it
            desc = _describe(a, "a", False)
            raise ParameterError(desc if isinstance(desc, str) else "a must be a 2-D matrix", 1)
        raise ParameterError(
            f"all_gather_matmul: rank(s) {bad} refused their operands (see their errors); "
            f"no rank ran the op",
            1,
        )
    total = sum(counts)
    kn = _rows_cols(b)
    if out is None and kn is not None:
        out = _empty_like(a, total, kn[1])
    if gathered is True:
        gathered = _empty_like(a, total, rc[1])
    _run(comm, "all_gather_matmul", a, b, out, gathered if want_g else None)
    return (gathered, out) if want_g else out
