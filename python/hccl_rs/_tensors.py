"""Objects without the buffer protocol (torch tensors) as RawBuffers.

The Rust half calls :func:`raw_buffer` for any buffer argument that does
not export the buffer protocol; torch tensors (bfloat16 and bool ones have
no buffer protocol at all) are described by their ``data_ptr()`` and size.
"""

from __future__ import annotations

import sys

from ._native import RawBuffer
from .errors import ParameterError

_TORCH_NAMES: dict = {}


def _torch_name(torch, dtype) -> str | None:
    if not _TORCH_NAMES:
        for name in (
            "float32", "float64", "float16", "bfloat16", "int8", "int16", "int32",
            "int64", "uint8", "uint16", "uint32", "uint64", "bool",
        ):
            t = getattr(torch, name, None)
            if t is not None:
                _TORCH_NAMES[t] = name
    return _TORCH_NAMES.get(dtype)


def raw_buffer(obj, what: str = "buffer") -> RawBuffer:
    """``obj`` (a contiguous CPU torch tensor) as a :class:`RawBuffer`.

    Raises :class:`ParameterError` for tensors the library cannot use
    (not on the CPU, not contiguous, an unsupported dtype) and TypeError
    for anything that is neither a tensor nor a buffer.
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        if obj.device.type != "cpu":
            raise ParameterError(f"{what} is on {obj.device}; hccl_rs takes CPU tensors", 1)
        if not obj.is_contiguous():
            raise ParameterError(
                f"{what} is not contiguous (pass tensor.contiguous())", 1
            )
        name = _torch_name(torch, obj.dtype)
        if name is None:
            raise ParameterError(f"{what}: unsupported element type {obj.dtype}", 1)
        return RawBuffer(obj.data_ptr(), obj.numel() * obj.element_size(), name, obj)
    raise TypeError(
        f"{what}: expected a buffer (NumPy array, bytearray, memoryview) or a torch "
        f"CPU tensor, got {type(obj).__name__}"
    )
