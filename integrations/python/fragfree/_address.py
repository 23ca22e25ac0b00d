"""``address_range(ptr)``: the whole fragfree block around a device pointer.

fragfree may place one block over several physical pages, each its own CUDA
allocation, so the driver's cuMemGetAddressRange / RANGE_START_ADDR answer for
one page only; registration code (RDMA, NCCL user buffers) should ask here in
native and pluggable mode (docs/ipc.md, "Address ranges"). Owns nothing but
the call; thread-safe (the library call is).
"""

from __future__ import annotations

import ctypes
from typing import Any

from ._library import Library, load_library
from ._state import STATE

__all__ = ["address_range"]


def _pointer(obj: Any) -> int:
    if isinstance(obj, int):
        return obj
    data_ptr = getattr(obj, "data_ptr", None)
    if callable(data_ptr):
        return int(data_ptr())
    raise TypeError(f"address_range: expected an int pointer or a tensor, got {type(obj).__name__}")


def address_range(obj: Any, *, lib: Library | None = None) -> tuple[int, int]:
    """(base, size) of the fragfree block containing ``obj`` (an int device
    pointer, or a tensor: its data_ptr()). Raises FragfreeValueError for a
    pointer fragfree does not own (memory of another allocator)."""
    library = lib or (STATE.lib if STATE.lib is not None else load_library())
    base = ctypes.c_void_p()
    size = ctypes.c_size_t()
    status = library._require("ff_get_address_range", "fragfree.address_range")(_pointer(obj), ctypes.byref(base), ctypes.byref(size))
    library._check(status, "fragfree.address_range")
    return int(base.value or 0), int(size.value)
