"""Exceptions raised by hccl_rs.

Every failure of the library is an :class:`HcclError` carrying HCCL's
result code (``code``, e.g. 1 for ``HCCL_E_PARA``; ``code_name``), the
message, and where known the ``rank`` that saw it, the ``peer`` rank
involved and the op ``tag``. :class:`HcclError` is a :class:`RuntimeError`
(what PyTorch's own communication errors are, so ``except RuntimeError``
catches every hccl_rs failure). Families have their own subclasses, some
of which also derive from the matching built-in exception so that
ordinary ``except ValueError`` / ``except TimeoutError`` handlers catch
them.

This module does not import torch (NumPy users need not have it). The
torch backend (:mod:`hccl_rs.torch`) raises the same classes mixed with
``torch.distributed.DistBackendError``, as PyTorch's backends do.
"""

from __future__ import annotations

__all__ = [
    "HcclError",
    "ParameterError",
    "HcclTimeoutError",
    "RemoteError",
    "ConnectError",
    "TransferError",
    "NotSupportedError",
    "HcclMemoryError",
    "SuspendedError",
    "InternalError",
    "CODE_NAMES",
]

#: HCCL's result codes by value.
CODE_NAMES: dict[int, str] = {
    0: "HCCL_SUCCESS",
    1: "HCCL_E_PARA",
    2: "HCCL_E_PTR",
    3: "HCCL_E_MEMORY",
    4: "HCCL_E_INTERNAL",
    5: "HCCL_E_NOT_SUPPORT",
    6: "HCCL_E_NOT_FOUND",
    7: "HCCL_E_UNAVAIL",
    8: "HCCL_E_SYSCALL",
    9: "HCCL_E_TIMEOUT",
    10: "HCCL_E_OPEN_FILE_FAILURE",
    11: "HCCL_E_TCP_CONNECT",
    12: "HCCL_E_ROCE_CONNECT",
    13: "HCCL_E_TCP_TRANSFER",
    14: "HCCL_E_ROCE_TRANSFER",
    15: "HCCL_E_RUNTIME",
    16: "HCCL_E_DRV",
    17: "HCCL_E_PROFILING",
    18: "HCCL_E_CCE",
    19: "HCCL_E_NETWORK",
    20: "HCCL_E_AGAIN",
    21: "HCCL_E_REMOTE",
    22: "HCCL_E_SUSPENDING",
    23: "HCCL_E_OPRETRY_FAIL",
    24: "HCCL_E_OOM",
    1041: "HCCL_E_IN_STATUS",
}


class HcclError(RuntimeError):
    """An hccl-rs failure: HCCL's result ``code`` and what happened.

    Attributes: ``code`` (int), ``code_name`` (``"HCCL_E_PARA"``, ...),
    ``message`` (the library's explanation, without the location),
    ``rank`` / ``peer`` (int or None) and ``tag`` (the op tag or None).
    ``str(e)`` is the full text, location included.
    """

    def __init__(
        self,
        text: str,
        code: int = 4,
        message: str | None = None,
        rank: int | None = None,
        peer: int | None = None,
        tag: str | None = None,
    ) -> None:
        super().__init__(text)
        self.code = code
        self.code_name = CODE_NAMES.get(code, f"HCCL code {code}")
        self.message = text if message is None else message
        self.rank = rank
        self.peer = peer
        self.tag = tag

    def __reduce__(self):  # picklable across processes (multiprocessing)
        return (type(self), (str(self), self.code, self.message, self.rank, self.peer, self.tag))


class ParameterError(HcclError, ValueError):
    """Bad arguments (``HCCL_E_PARA``, ``HCCL_E_PTR``): rejected before
    anything was enqueued, or ranks that disagree on an op (the
    consistency check)."""


class HcclTimeoutError(HcclError, TimeoutError):
    """A peer that never arrived or stayed silent (``HCCL_E_TIMEOUT``:
    ``HCCL_CONNECT_TIMEOUT``, ``HCCL_EXEC_TIMEOUT``)."""


class RemoteError(HcclError):
    """A peer failed or went away (``HCCL_E_REMOTE``); ``peer`` names it
    where known."""


class ConnectError(HcclError, ConnectionError):
    """Connecting to a peer or the rendezvous failed (``HCCL_E_TCP_CONNECT``,
    ``HCCL_E_ROCE_CONNECT``)."""


class TransferError(HcclError, ConnectionError):
    """A transfer broke (``HCCL_E_TCP_TRANSFER``, ``HCCL_E_ROCE_TRANSFER``,
    ``HCCL_E_NETWORK``)."""


class NotSupportedError(HcclError, NotImplementedError):
    """A feature or combination the library does not support
    (``HCCL_E_NOT_SUPPORT``)."""


class HcclMemoryError(HcclError, MemoryError):
    """Out of memory (``HCCL_E_MEMORY``, ``HCCL_E_OOM``)."""


class SuspendedError(HcclError):
    """The communicator was aborted or is suspended (``HCCL_E_SUSPENDING``)."""


class InternalError(HcclError):
    """Any other HCCL code (``HCCL_E_INTERNAL``, ``HCCL_E_SYSCALL``, ...)."""


_BY_CODE: dict[int, type[HcclError]] = {
    1: ParameterError,
    2: ParameterError,
    3: HcclMemoryError,
    5: NotSupportedError,
    9: HcclTimeoutError,
    11: ConnectError,
    12: ConnectError,
    13: TransferError,
    14: TransferError,
    19: TransferError,
    21: RemoteError,
    22: SuspendedError,
    24: HcclMemoryError,
}


def error_class(code: int) -> type[HcclError]:
    """The exception class hccl_rs raises for HCCL result ``code``."""
    return _BY_CODE.get(code, InternalError)


def _from_native(
    code: int, text: str, message: str, rank: int | None, peer: int | None, tag: str | None
) -> HcclError:
    # called by the Rust half for every error it raises
    return error_class(code)(text, code, message, rank, peer, tag)
