"""Device arguments as torch accepts them: None, int, "cuda", "cuda:1",
torch.device. Owns only ``device_index``; never imports torch itself (it uses
torch only if the program already imported it), so that fragfree.stats() works
without PyTorch and never initialises CUDA by accident.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["device_index", "current_device"]


def current_device() -> int:
    """torch.cuda.current_device() if CUDA is already initialised, else 0
    (asking torch would initialise CUDA)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        cuda = getattr(torch, "cuda", None)
        try:
            if cuda is not None and cuda.is_initialized():
                return int(cuda.current_device())
        except Exception:  # pragma: no cover - torch without CUDA support
            return 0
    return 0


def device_index(device: Any = None) -> int:
    """The CUDA device index ``device`` names, like torch's
    ``_get_device_index(device, optional=True)``: None and "cuda" mean the
    current device. Non-CUDA devices raise ValueError."""
    if device is None:
        return current_device()
    if isinstance(device, bool):
        raise TypeError(f"invalid device {device!r}: expected int, str or torch.device")
    if isinstance(device, int):
        if device < 0:
            raise ValueError(f"invalid device index {device}: must be >= 0")
        return device
    if isinstance(device, str):
        text = device.strip()
        kind, _, index = text.partition(":")
        if kind != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        if not index:
            return current_device()
        if not index.isdigit():
            raise ValueError(f"invalid device string {device!r}")
        return int(index)
    kind = getattr(device, "type", None)
    if kind is not None and hasattr(device, "index"):
        if kind != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        return current_device() if device.index is None else int(device.index)
    if hasattr(device, "__index__"):
        return device_index(int(device.__index__()))
    raise TypeError(f"invalid device {device!r}: expected int, str or torch.device")
