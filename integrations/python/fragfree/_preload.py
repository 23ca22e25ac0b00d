"""LD_PRELOAD=libfragfree.so into a Python program: what happens when ``torch``
has finished importing (docs/preload.md, "Python programs").

The library's bootstrap (a ``sitecustomize`` embedded in libfragfree.so,
shim/preload_python.cc) calls ``activate()`` right after ``import torch``
completes, before anything can have initialised CUDA. It makes the native
adapter PyTorch's allocator over the *preloaded* libfragfree.so (the same
engine the interposed cudaMalloc of NCCL, cuBLAS, ... reaches), and returns the
one notice line the bootstrap prints on stderr:

* ``fragfree: LD_PRELOAD: PyTorch's allocator is fragfree (native adapter)``
* ``fragfree: LD_PRELOAD: interposing cudaMalloc/cudaMallocAsync (<why>)``
  -- the adapter is not used: PyTorch's cudaMallocAsync backend, which the
  library's constructor chose through PYTORCH_CUDA_ALLOC_CONF before torch
  read it, allocates through the interposer, as without the bootstrap.

The constructor's PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync stays in
place either way: PyTorch picks its backend while ``import torch`` loads
libc10_cuda.so, before this runs, so interposition must already be configured
when the adapter turns out not to be loadable. The adapter replaces that
backend's allocator before it is initialised (nothing of it was used).

Thread-safety: activate() takes _state.LOCK (the same lock enable() holds).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ._state import LOCK, STATE

__all__ = ["activate", "print_notice", "NATIVE_NOTICE", "INTERPOSING_NOTICE"]

NATIVE_NOTICE = "fragfree: LD_PRELOAD: PyTorch's allocator is fragfree (native adapter)"
INTERPOSING_NOTICE = "fragfree: LD_PRELOAD: interposing cudaMalloc/cudaMallocAsync ({})"

# What the library's constructor sets when the program set no PyTorch
# allocator variable (shim/preload.cc); the same value set by the user is
# equally fragfree's choice.
_OUR_TORCH_CONF = "backend:cudaMallocAsync"
_TORCH_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def _env_false(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("0", "false", "no", "n", "off")


def _reason_not_native(torch: Any) -> str | None:
    """Why the native adapter is not to be installed, or None."""
    if _env_false("FRAGFREE_PRELOAD_NATIVE"):
        return "FRAGFREE_PRELOAD_NATIVE is false"
    if getattr(getattr(torch, "version", None), "cuda", None) is None:
        return "this PyTorch has no CUDA support"
    for var in _TORCH_CONF_VARS:
        value = os.environ.get(var, "")
        if value:
            if var == _TORCH_CONF_VARS[0] and value.strip() == _OUR_TORCH_CONF:
                return None
            return (
                f"{var}={value} is set, so PyTorch's allocator runs as configured; "
                f"unset it for fragfree's native adapter"
            )
    return None


def activate() -> str | None:
    """Installs the native adapter over the preloaded library (once per
    process) and returns the notice line to print, or None when
    fragfree.enable() is what imported torch (it prints the line itself once it
    has chosen)."""
    from . import _first_line, _install
    from ._library import load_library, preloaded_library_path

    torch = sys.modules.get("torch")
    with LOCK:
        if STATE.enabling:
            STATE.preload_notice_pending = True
            return None
        if STATE.mode is not None:  # enabled by the program's sitecustomize
            return _notice_for(STATE.mode)
        reason = _reason_not_native(torch)
        path = preloaded_library_path()
        if reason is None and path is None:
            reason = "libfragfree.so is not in the process's global scope"
        if reason is not None:
            return INTERPOSING_NOTICE.format(reason)
        try:
            if torch.cuda.is_initialized():
                return INTERPOSING_NOTICE.format("CUDA was initialised before torch was imported")
            # No ff_init: the engine configures itself from $FRAGFREE_CONF on
            # first use, as for the interposer (which may already have used it).
            lib = load_library(path)
            from ._config import merge_conf

            _install(lib, merge_conf(os.environ.get("FRAGFREE_CONF"), {}), "native")
        except Exception as e:  # any failure leaves interposition in place
            return INTERPOSING_NOTICE.format(
                f"the native adapter could not be loaded: {_first_line(e)}"
            )
        STATE.preloaded = True
        _forget_interposition_backend()
        return NATIVE_NOTICE


def _forget_interposition_backend() -> None:
    """Unsets the constructor's PYTORCH_CUDA_ALLOC_CONF once the adapter is
    PyTorch's allocator. PyTorch parses the variable a second time, lazily, on
    the first use of an allocator setting (graph capture, torch.compile) and
    asserts that a "backend" named there is the installed allocator's name:
    left in place it would fail there. Child processes get it again from the
    constructor (they inherit LD_PRELOAD)."""
    if os.environ.get(_TORCH_CONF_VARS[0], "").strip() == _OUR_TORCH_CONF:
        del os.environ[_TORCH_CONF_VARS[0]]


def _notice_for(mode: str | None) -> str:
    if mode == "native":
        return NATIVE_NOTICE
    if mode == "pluggable":
        return "fragfree: LD_PRELOAD: PyTorch's allocator is fragfree (pluggable mode, " \
               "chosen by fragfree.enable())"
    return INTERPOSING_NOTICE.format("fragfree.enable() did not complete")


def print_notice(mode: str | None) -> None:
    """Prints the notice for ``mode`` (called by enable() when it imported
    torch under LD_PRELOAD)."""
    if sys.stderr is not None:
        sys.stderr.write(_notice_for(mode) + "\n")
        sys.stderr.flush()
