"""hccl_rs: hccl-rs collectives from Python.

A :class:`Comm` is one rank's communicator. Make one per process with
``Comm.from_env()`` under torchrun / mpirun / srun, or with root info::

    import numpy as np, hccl_rs
    comm = hccl_rs.Comm.from_env()
    x = np.full(1024, comm.rank, dtype=np.float32)
    comm.all_reduce(x)                    # in place, sum
    y = np.empty(1024 * comm.size, dtype=np.float32)
    comm.all_gather(x, y)                 # out of place
    w = comm.all_reduce_async(x, op="max")
    w.wait()

Every op takes buffer-protocol objects (NumPy arrays, ``bytearray``,
``memoryview``) or contiguous torch CPU tensors, with the element type
taken from the buffer. Blocking calls return once the op completed;
``*_async`` calls return a :class:`Work` (``wait()``, ``is_completed()``).
The GIL is released while an op runs; Ctrl-C interrupts a wait (and aborts
the communicator). Failures raise :class:`HcclError` subclasses carrying
HCCL's code, message, rank and peer.

Fused compute/communication ops on 2-D matrices (see :mod:`hccl_rs.fused`):
``matmul_reduce_scatter(comm, a, b)``, ``all_gather_matmul(comm, a, b)``,
``matmul_all_reduce(comm, a, b)``.

``import hccl_rs.torch`` registers the ``"hccl_rs"`` torch.distributed
backend (and CPU kernels of ``torch.ops.symm_mem.fused_matmul_reduce_scatter``
and ``fused_all_gather_matmul``).
"""

from . import errors
from ._native import ROOT_INFO_BYTES, Comm, RawBuffer, Work, __version__, get_root_info
from .fused import all_gather_matmul, matmul_all_reduce, matmul_reduce_scatter, split_rows
from .errors import (
    CODE_NAMES,
    ConnectError,
    HcclError,
    HcclMemoryError,
    HcclTimeoutError,
    InternalError,
    NotSupportedError,
    ParameterError,
    RemoteError,
    SuspendedError,
    TransferError,
)

__all__ = [
    "Comm",
    "Work",
    "RawBuffer",
    "get_root_info",
    "ROOT_INFO_BYTES",
    "errors",
    "__version__",
    "matmul_reduce_scatter",
    "all_gather_matmul",
    "matmul_all_reduce",
    "split_rows",
]
# the exceptions (and CODE_NAMES), as errors.py lists them
__all__ += errors.__all__
