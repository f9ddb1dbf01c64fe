"""Type stubs of hccl_rs._native (the Rust half of hccl_rs)."""

from collections.abc import Iterable, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, List, Literal, Optional, Tuple, TypedDict, Union

from typing_extensions import Buffer

from .errors import HcclError

#: A buffer-protocol object (NumPy array, bytearray, memoryview), a
#: contiguous CPU torch tensor, or a RawBuffer.
BufferLike = Union[Buffer, "RawBuffer", Any]
#: "sum", "prod" ("product"), "max", "min" (any case), or HCCL's code 0-3.
OpLike = Union[str, int, None]
#: Seconds or a timedelta.
Timeout = Union[float, timedelta]

__version__: str
ROOT_INFO_BYTES: int

def get_root_info() -> bytes:
    """HCCL's HcclGetRootInfo: call on the root rank, give the bytes to
    every rank, which then build ``Comm(n_ranks, root_info, rank)``."""

class FusedReport(TypedDict):
    """What a fused op did (``_fused_op``'s result)."""

    #: "window", "stream" or "unfused"
    path: str
    blocks: int
    block_rows: int
    stages: int
    threads: int
    #: seconds this rank waited for its peers' blocks (window path)
    waited: float

#: A matrix for ``_fused_op``: (memory, rows, cols, leading dimension in
#: elements), or why this rank cannot use its argument (raised on this
#: rank as a ParameterError after the op's agreement, its peers failing too).
MatDesc = Union[tuple["RawBuffer", int, int, int], str]

def _fused_op(
    comm: "Comm",
    op: Literal["matmul_reduce_scatter", "all_gather_matmul", "matmul_all_reduce"],
    a: MatDesc,
    b: MatDesc,
    out: MatDesc,
    gathered: Optional[MatDesc] = None,
) -> FusedReport:
    """Runs a fused op (hccl_rs.fused calls it; use the functions there):
    waits for the communicator's ops in flight, then runs the op with the
    GIL released and returns when ``out`` (and ``gathered``) are written."""

class RawBuffer:
    """Memory given by address (for tensors without the buffer protocol):
    ``nbytes`` bytes of contiguous ``dtype`` elements at ``address``,
    valid while ``owner`` is alive and not resized."""

    def __init__(
        self, address: int, nbytes: int, dtype: str, owner: object, readonly: bool = False
    ) -> None: ...
    @property
    def address(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def owner(self) -> object: ...

class Work:
    """The handle of an async op."""

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until the op completed (True) and raises its error; with
        ``timeout`` (seconds) returns False if it had not completed. A
        handle dropped before its op completed abandons it without
        waiting: the communicator keeps the buffers until the op ends."""
    def is_completed(self) -> bool:
        """Whether the op completed (drives it a little; never blocks)."""
    def is_success(self) -> bool: ...
    def exception(self) -> Optional[HcclError]: ...

class Comm:
    """One rank's communicator (see the package docs)."""

    def __init__(
        self,
        n_ranks: int,
        root_info: bytes,
        rank: int,
        connect_timeout: Optional[Timeout] = None,
        exec_timeout: Optional[Timeout] = None,
    ) -> None:
        """Timeouts in seconds or a timedelta (millisecond precision);
        None: ``HCCL_CONNECT_TIMEOUT`` / ``HCCL_EXEC_TIMEOUT``."""
    @staticmethod
    def from_env(
        connect_timeout: Optional[Timeout] = None, exec_timeout: Optional[Timeout] = None
    ) -> "Comm":
        """From torchrun / mpirun / MPICH / srun variables."""
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def destroyed(self) -> bool: ...
    def split(self, ranks: Sequence[int]) -> Optional["Comm"]: ...
    def abort(self, reason: Optional[str] = None) -> None: ...
    def revoke(self, reason: Optional[str] = None) -> None:
        """Ends every rank's in-flight ops ("revoked by rank R: reason")
        and refuses later ones."""
    def revoked(self) -> Optional[Tuple[int, str]]:
        """(rank, reason) of the revocation, or None."""
    def recover(self) -> None:
        """After a failed op, every rank calls it: the communicator is
        rebuilt for the same ranks (~10 ms) and this object runs on."""
    def recoveries(self) -> int:
        """How many times ``recover`` rebuilt this communicator."""
    def shrink(self, exclude: Optional[Sequence[int]] = None) -> "Comm":
        """The survivors' communicator (renumbered in order): every rank
        not in ``exclude`` calls it, the excluded never do; None: exclude
        the ranks the survivors agree are lost (``agree_lost``)."""
    def agree_lost(self, timeout: Optional[Timeout] = None) -> List[int]:
        """The lost ranks, the same sorted list on every survivor; each
        round bounded by ``timeout`` (default: the connect timeout)."""
    def grow_id(self) -> bytes:
        """A single-use id for growing (one member makes it)."""
    def grow(self, n_ranks: int, id: Optional[bytes] = None) -> "Comm":
        """Every member: the communicator of ``n_ranks`` (members keep
        their ranks); the id's maker passes it, the others None."""
    @staticmethod
    def join_grown(
        n_ranks: int,
        id: bytes,
        rank: int,
        connect_timeout: Optional[Timeout] = None,
        exec_timeout: Optional[Timeout] = None,
    ) -> "Comm":
        """A new process joins the communicator being grown, as ``rank``
        (one of ``size .. n_ranks``)."""
    def set_exec_timeout(self, timeout: Optional[Timeout]) -> None:
        """Bounds every wait of the ops from now on (None: no bound)."""
    @property
    def exec_timeout(self) -> Optional[float]:
        """The bound in force, seconds (None: no bound)."""
    def async_error(self) -> Optional[HcclError]:
        """A revocation, abort, lost peer or broken link, or None."""
    def destroy(self) -> None: ...
    def __enter__(self) -> "Comm": ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Literal[False]: ...
    def all_reduce(
        self, sendbuf: BufferLike, recvbuf: Optional[BufferLike] = None, op: OpLike = None
    ) -> None: ...
    def all_reduce_async(
        self, sendbuf: BufferLike, recvbuf: Optional[BufferLike] = None, op: OpLike = None
    ) -> Work: ...
    def all_gather(self, sendbuf: BufferLike, recvbuf: BufferLike) -> None: ...
    def all_gather_async(self, sendbuf: BufferLike, recvbuf: BufferLike) -> Work: ...
    def all_gather_v(
        self,
        sendbuf: BufferLike,
        recvbuf: BufferLike,
        recv_counts: Sequence[int],
        recv_displs: Optional[Sequence[int]] = None,
    ) -> None: ...
    def all_gather_v_async(
        self,
        sendbuf: BufferLike,
        recvbuf: BufferLike,
        recv_counts: Sequence[int],
        recv_displs: Optional[Sequence[int]] = None,
    ) -> Work: ...
    def reduce_scatter(self, sendbuf: BufferLike, recvbuf: BufferLike, op: OpLike = None) -> None: ...
    def reduce_scatter_async(
        self, sendbuf: BufferLike, recvbuf: BufferLike, op: OpLike = None
    ) -> Work: ...
    def reduce_scatter_v(
        self,
        sendbuf: BufferLike,
        recvbuf: BufferLike,
        send_counts: Sequence[int],
        send_displs: Optional[Sequence[int]] = None,
        op: OpLike = None,
    ) -> None: ...
    def reduce_scatter_v_async(
        self,
        sendbuf: BufferLike,
        recvbuf: BufferLike,
        send_counts: Sequence[int],
        send_displs: Optional[Sequence[int]] = None,
        op: OpLike = None,
    ) -> Work: ...
    def broadcast(self, buf: BufferLike, root: int = 0) -> None: ...
    def broadcast_async(self, buf: BufferLike, root: int = 0) -> Work: ...
    def reduce(
        self,
        sendbuf: BufferLike,
        recvbuf: Optional[BufferLike] = None,
        op: OpLike = None,
        root: int = 0,
    ) -> None: ...
    def reduce_async(
        self,
        sendbuf: BufferLike,
        recvbuf: Optional[BufferLike] = None,
        op: OpLike = None,
        root: int = 0,
    ) -> Work: ...
    def scatter(self, sendbuf: Optional[BufferLike], recvbuf: BufferLike, root: int = 0) -> None: ...
    def scatter_async(
        self, sendbuf: Optional[BufferLike], recvbuf: BufferLike, root: int = 0
    ) -> Work: ...
    def gather(self, sendbuf: BufferLike, recvbuf: Optional[BufferLike], root: int = 0) -> None: ...
    def gather_async(
        self, sendbuf: BufferLike, recvbuf: Optional[BufferLike], root: int = 0
    ) -> Work: ...
    def all_to_all(self, sendbuf: BufferLike, recvbuf: BufferLike) -> None: ...
    def all_to_all_async(self, sendbuf: BufferLike, recvbuf: BufferLike) -> Work: ...
    def all_to_all_v(
        self,
        sendbuf: BufferLike,
        recvbuf: BufferLike,
        send_counts: Sequence[int],
        recv_counts: Sequence[int],
        send_displs: Optional[Sequence[int]] = None,
        recv_displs: Optional[Sequence[int]] = None,
    ) -> None: ...
    def all_to_all_v_async(
        self,
        sendbuf: BufferLike,
        recvbuf: BufferLike,
        send_counts: Sequence[int],
        recv_counts: Sequence[int],
        send_displs: Optional[Sequence[int]] = None,
        recv_displs: Optional[Sequence[int]] = None,
    ) -> Work: ...
    def send(self, buf: BufferLike, dest: int) -> None: ...
    def send_async(self, buf: BufferLike, dest: int) -> Work: ...
    def recv(self, buf: BufferLike, source: int) -> None: ...
    def recv_async(self, buf: BufferLike, source: int) -> Work: ...
    def batch_send_recv(
        self, items: Iterable[tuple[Literal["send", "recv"], BufferLike, int]]
    ) -> None: ...
    def batch_send_recv_async(
        self, items: Iterable[tuple[Literal["send", "recv"], BufferLike, int]]
    ) -> Work: ...
    def barrier(self) -> None: ...
    def barrier_async(self) -> Work: ...
