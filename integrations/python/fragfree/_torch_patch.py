"""Pluggable mode: fragfree behind torch.cuda.memory.CUDAPluggableAllocator.

Owns (1) ``install_pluggable``: the CUDAPluggableAllocator over
fragfree_malloc/fragfree_free with every hook PyTorch offers registered, made
current with change_current_allocator; and (2) ``patch_torch``: replacing
torch's Python memory APIs, which raise with a bare pluggable allocator
(torch/cuda/memory.py, PyTorch 2.11), with versions that answer from
libfragfree's stats and snapshots. Patched: every function in ``PATCHED`` in
torch.cuda.memory, the same objects re-exported in torch.cuda, and the
torch.accelerator memory functions when the accelerator is CUDA.
torch.cuda.memory_summary is not replaced: torch's own reads memory_stats(),
which is, and libfragfree supplies every key it indexes.

Also owns (3) pluggable mode's OOM translation: PyTorch's pluggable allocator
turns the C++ exception fragfree_malloc throws into a plain RuntimeError
(torch/csrc/cuda/CUDAPluggableAllocator.cpp has no OOM path; pytorch#133280),
so ``translate_oom`` (a context manager and decorator) and the patched
``caching_allocator_alloc`` re-raise fragfree's OOM as
torch.cuda.OutOfMemoryError, and ``adopt_torch_oom`` makes
FragfreeOutOfMemoryError a torch.cuda.OutOfMemoryError once torch is loaded.
"""


from __future__ import annotations

import contextlib
import functools
import re
import sys
import warnings
from typing import Any, Callable

from . import _snapshot, _stats
from ._device import device_index
from ._errors import FragfreeError, FragfreeOutOfMemoryError
from ._state import LOCK, STATE

__all__ = [
    "install_pluggable",
    "patch_torch",
    "unpatch_torch",
    "snapshot_dict",
    "PATCHED",
    "translate_oom",
    "adopt_torch_oom",
]


def _torch() -> Any:
    import torch

    return torch


def _lib() -> Any:
    lib = STATE.lib
    if lib is None:
        raise FragfreeError("fragfree is not enabled; call fragfree.enable() first")
    return lib


def _cuda_initialized() -> bool:
    try:
        return bool(_torch().cuda.is_initialized())
    except Exception:  # pragma: no cover
        return False


# ---------------------------------------------------------------------------
# OOM errors

# libfragfree's out-of-memory messages: the engine's status text, or (through
# PyTorch's entry points) PyTorch's headline followed by fragfree's report
# (shim/oom.cc).
def _is_fragfree_oom(message: str) -> bool:
    return "fragfree: out of memory" in message or (
        "CUDA out of memory" in message and "fragfree" in message)


def _torch_oom_class() -> type | None:
    torch = sys.modules.get("torch")
    cls = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    return cls if isinstance(cls, type) and issubclass(cls, BaseException) else None


def _as_torch_oom(error: BaseException) -> BaseException | None:
    """torch.cuda.OutOfMemoryError with ``error``'s message when ``error`` is
    fragfree's OOM surfacing as a RuntimeError; None otherwise."""
    cls = _torch_oom_class()
    if cls is None or isinstance(error, cls) or not isinstance(error, RuntimeError):
        return None
    if not _is_fragfree_oom(str(error)):
        return None
    return cls(str(error))


class translate_oom(contextlib.ContextDecorator):  # noqa: N801 - used like a function
    """``with fragfree.translate_oom():`` (or ``@fragfree.translate_oom()``):
    fragfree's out-of-memory errors raised inside become
    torch.cuda.OutOfMemoryError (chained to the original). Needed only in
    pluggable mode, where PyTorch raises them as RuntimeError; in native mode
    and under LD_PRELOAD they already are torch.cuda.OutOfMemoryError, and this
    changes nothing. Other exceptions pass unchanged."""

    def __enter__(self) -> "translate_oom":
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is not None:
            translated = _as_torch_oom(exc)
            if translated is not None:
                raise translated.with_traceback(tb) from exc
        return False


def adopt_torch_oom() -> None:
    """Makes FragfreeOutOfMemoryError (raised by fragfree's own allocation
    calls, e.g. library().malloc) also a torch.cuda.OutOfMemoryError, once
    torch is imported. Idempotent; does nothing without torch."""
    cls = _torch_oom_class()
    if cls is None or issubclass(FragfreeOutOfMemoryError, cls):
        return
    try:
        FragfreeOutOfMemoryError.__bases__ = FragfreeOutOfMemoryError.__bases__ + (cls,)
    except TypeError:  # pragma: no cover - an incompatible class layout
        pass


def _make_translating(original: Callable[..., Any]) -> Callable[..., Any]:
    def translating(*args: Any, **kwargs: Any) -> Any:
        with translate_oom():
            return original(*args, **kwargs)

    return translating


# ---------------------------------------------------------------------------
# Registration


def install_pluggable(lib: Any) -> tuple[Any, dict[str, bool]]:
    """Creates the CUDAPluggableAllocator over ``lib``, registers every hook
    PyTorch offers that the library exports, and makes it current. Returns the
    allocator (keep it alive) and {setter: registered}."""
    torch = _torch()
    tcm = torch.cuda.memory
    alloc = tcm.CUDAPluggableAllocator(lib.path, "fragfree_malloc", "fragfree_free")
    raw = alloc.allocator()
    hooks: dict[str, bool] = {}

    def register(setter: str, address: int | None) -> None:
        fn = getattr(raw, setter, None)
        ok = fn is not None and bool(address)
        if ok:
            fn(address)
        hooks[setter] = ok

    register("set_init_fn", lib.address("fragfree_init"))
    register("set_reset_fn", lib.address("fragfree_empty_cache"))
    register("set_memory_fraction_fn", lib.address("fragfree_set_memory_fraction"))
    register("set_base_alloc_fn", lib.address("fragfree_base_alloc"))
    register("set_record_stream_fn", lib.address("fragfree_record_stream"))
    pool = lib.pool_hook_addresses()
    register("set_begin_allocate_to_pool", pool.get("begin_allocate_to_pool"))
    register("set_end_allocate_to_pool_fn", pool.get("end_allocate_to_pool"))
    register("set_release_pool", pool.get("release_pool"))
    try:
        tcm.change_current_allocator(alloc)
    except RuntimeError as e:
        raise FragfreeError(
            f"fragfree.enable(): PyTorch refused to switch allocators ({e}). The CUDA "
            "allocator was already initialised: call fragfree.enable() before any CUDA "
            "work (the first CUDA tensor, torch.cuda.init(), torch.cuda.MemPool())."
        ) from e
    if not all(hooks[s] for s in ("set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn",
                                  "set_release_pool")):
        warnings.warn(
            "fragfree: this libfragfree exports no graph-pool hooks "
            "(fragfree_begin_allocate_to_pool, ...); CUDA graph capture in pluggable mode "
            "may reuse memory a graph still replays into. Use mode='native' or a newer "
            "libfragfree for CUDA graphs.",
            RuntimeWarning,
            stacklevel=3,
        )
    return alloc, hooks


# ---------------------------------------------------------------------------
# Replacements for torch.cuda.memory's functions (pluggable mode)


def _flat(device: Any) -> dict[str, Any]:
    return _lib().stats(device_index(device))


def _stat(device: Any, key: str) -> int:
    """One figure, as torch.cuda.memory_allocated() and its kind read it:
    without the whole stats and without a driver call, as PyTorch's own
    allocator answers them."""
    if not _cuda_initialized():
        return 0
    return _lib().stat(device_index(device), key)


def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    """torch.cuda.memory_stats_as_nested_dict, answered by fragfree."""
    if not _cuda_initialized():
        return {}
    return _stats.nest(_flat(device))


def memory_stats(device: Any = None) -> "dict[str, Any]":
    """torch.cuda.memory_stats, answered by fragfree (flattened and sorted as
    torch does; fragfree's own keys included)."""
    return _stats.flatten(memory_stats_as_nested_dict(device=device))


def memory_allocated(device: Any = None) -> int:
    return _stat(device, "allocated_bytes.all.current")


def max_memory_allocated(device: Any = None) -> int:
    return _stat(device, "allocated_bytes.all.peak")


def memory_reserved(device: Any = None) -> int:
    return _stat(device, "reserved_bytes.all.current")


def max_memory_reserved(device: Any = None) -> int:
    return _stat(device, "reserved_bytes.all.peak")


def reset_peak_memory_stats(device: Any = None) -> None:
    if _cuda_initialized():
        _lib().reset_peak_stats(device_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    if _cuda_initialized():
        _lib().reset_accumulated_stats(device_index(device))


def reset_max_memory_allocated(device: Any = None) -> None:
    warnings.warn(
        "torch.cuda.reset_max_memory_allocated now calls torch.cuda.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats.",
        FutureWarning,
        stacklevel=2,
    )
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: Any = None) -> None:
    warnings.warn(
        "torch.cuda.reset_max_memory_cached now calls torch.cuda.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats.",
        FutureWarning,
        stacklevel=2,
    )
    reset_peak_memory_stats(device)


def _active_devices() -> list[int]:
    """Devices worth asking for a snapshot: those with a CUDA context in this
    process, plus the current one (asking about other devices would make
    libfragfree create an allocator, and a context, there)."""
    torch = _torch()
    devices = {device_index(None)}
    has_ctx = getattr(getattr(torch, "_C", None), "_cuda_hasPrimaryContext", None)
    if has_ctx is not None and _cuda_initialized():
        for d in range(torch.cuda.device_count()):
            try:
                if has_ctx(d):
                    devices.add(d)
            except Exception:  # pragma: no cover
                pass
    return sorted(devices)


def snapshot_dict(include_traces: bool = True) -> dict[str, Any]:
    """The torch.cuda.memory._snapshot()-shaped dict from libfragfree."""
    lib = _lib()
    torch = sys.modules.get("torch")
    if torch is not None and _cuda_initialized():
        devices, count = _active_devices(), int(torch.cuda.device_count())
    else:
        devices, count = [0], 1
    if STATE.history is False:
        include_traces = False
    return _snapshot.build_snapshot(lib, devices, count, include_traces=include_traces)


def memory_snapshot(mempool_id: Any = None, include_traces: bool = True) -> list[dict[str, Any]]:
    """torch.cuda.memory_snapshot: the segments (of one MemPool if given)."""
    segments = snapshot_dict(include_traces=include_traces)["segments"]
    if mempool_id is not None:
        want = tuple(int(x) for x in mempool_id)
        segments = [s for s in segments if tuple(s.get("segment_pool_id", (0, 0))) == want]
    return segments


def _snapshot_fn(device: Any = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
    """torch.cuda.memory._snapshot, answered by fragfree."""
    snap = snapshot_dict()
    if augment_with_fx_traces:
        augment = getattr(_torch()._utils, "_augment_memory_snapshot_stack_traces", None)
        if augment is not None:
            snap = augment(snap)
    return snap


def _dump_snapshot(filename: str = "dump_snapshot.pickle",
                   augment_with_fx_traces: bool = False) -> None:
    """torch.cuda.memory._dump_snapshot: a pickle (protocol 4) MemoryViz reads."""
    snap = _snapshot_fn(augment_with_fx_traces=augment_with_fx_traces)
    import pickle

    with open(filename, "wb") as f:
        pickle.dump(snap, f, protocol=_snapshot.PICKLE_PROTOCOL)


_TRACE_RE = re.compile(r"(?:^|,)\s*trace_entries\s*:\s*(\d+)")


def _conf_traces(conf: str | None) -> bool:
    m = None
    for m in _TRACE_RE.finditer(conf or ""):
        pass
    return bool(m and int(m.group(1)) > 0)


def _record_memory_history(enabled: Any = "all", *args: Any, **kwargs: Any) -> None:
    """torch.cuda.memory._record_memory_history: forwarded to libfragfree's trace
    (ff_record_history) when it has one; always remembered, so a disabled
    history gives snapshots without traces. Stacks are not recorded."""
    if isinstance(enabled, bool):  # the legacy signature
        names = ["record_context", "trace_alloc_max_entries", "trace_alloc_record_context",
                 "device", "record_context_cpp", "clear_history"]
        bound = dict(zip(names, args), **kwargs)
        on = enabled
        max_entries = int(bound.get("trace_alloc_max_entries", 1))
    else:
        if enabled not in (None, "state", "all"):
            raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
        names = ["context", "stacks", "max_entries", "device", "clear_history"]
        bound = dict(zip(names, args), **kwargs)
        on = enabled is not None
        max_entries = int(bound.get("max_entries", sys.maxsize))
    clear = bool(bound.get("clear_history", False))
    lib = _lib()
    with LOCK:
        if lib.has_record_history:
            if clear:
                lib.record_history(False, 0)
            lib.record_history(on, max_entries)
        elif on and not _conf_traces(STATE.conf):
            warnings.warn(
                "fragfree: this libfragfree cannot start its allocation trace at run time "
                "(no ff_record_history); snapshots will have no device_traces. Enable the "
                "trace at start-up: fragfree.enable(trace_entries=100000).",
                RuntimeWarning,
                stacklevel=2,
            )
        STATE.history = on


def _default_fraction() -> float:
    m = None
    for m in re.finditer(r"(?:^|,)\s*per_process_memory_fraction\s*:\s*([0-9.eE+-]+)",
                         STATE.conf or ""):
        pass
    try:
        return float(m.group(1)) if m else 1.0
    except ValueError:  # pragma: no cover
        return 1.0


def _make_set_fraction(original: Callable[..., Any]) -> Callable[..., Any]:
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        original(fraction, device)  # validates, then calls fragfree's hook
        with LOCK:
            STATE.fractions[device_index(device)] = float(fraction)

    return set_per_process_memory_fraction


def get_per_process_memory_fraction(device: Any = None) -> float:
    """torch.cuda.get_per_process_memory_fraction: the last fraction set."""
    return STATE.fractions.get(device_index(device), _default_fraction())


# name -> replacement (those in _WRAPPING wrap the original).
PATCHED: dict[str, Any] = {
    "memory_stats_as_nested_dict": memory_stats_as_nested_dict,
    "memory_stats": memory_stats,
    "memory_allocated": memory_allocated,
    "max_memory_allocated": max_memory_allocated,
    "memory_reserved": memory_reserved,
    "max_memory_reserved": max_memory_reserved,
    "reset_peak_memory_stats": reset_peak_memory_stats,
    "reset_accumulated_memory_stats": reset_accumulated_memory_stats,
    "reset_max_memory_allocated": reset_max_memory_allocated,
    "reset_max_memory_cached": reset_max_memory_cached,
    "memory_snapshot": memory_snapshot,
    "_snapshot": _snapshot_fn,
    "_dump_snapshot": _dump_snapshot,
    "_record_memory_history": _record_memory_history,
    "get_per_process_memory_fraction": get_per_process_memory_fraction,
    "set_per_process_memory_fraction": _make_set_fraction,
    "caching_allocator_alloc": _make_translating,
}

# Entries of PATCHED that build their replacement from the original.
_WRAPPING = {"set_per_process_memory_fraction", "caching_allocator_alloc"}

# torch.accelerator's memory API (torch >= 2.8) reads c10::getDeviceAllocator,
# which change_current_allocator does not update.
_ACCELERATOR_PATCHED: dict[str, Callable[..., Any]] = {
    "memory_stats": memory_stats,
    "memory_allocated": memory_allocated,
    "max_memory_allocated": max_memory_allocated,
    "memory_reserved": memory_reserved,
    "max_memory_reserved": max_memory_reserved,
    "reset_peak_memory_stats": reset_peak_memory_stats,
    "reset_accumulated_memory_stats": reset_accumulated_memory_stats,
}


def _wrap(new: Callable[..., Any], old: Any, name: str) -> Callable[..., Any]:
    @functools.wraps(old)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return new(*args, **kwargs)

    wrapper.__fragfree__ = True  # type: ignore[attr-defined]
    wrapper.__qualname__ = name
    return wrapper


def _replace(module: Any, name: str, new: Callable[..., Any], reexports: list[Any]) -> None:
    old = getattr(module, name, None)
    if old is None or getattr(old, "__fragfree__", False):
        return
    wrapped = _wrap(new, old, name)
    STATE.originals[(module, name)] = old
    setattr(module, name, wrapped)
    for other in reexports:
        if other is not module and getattr(other, name, None) is old:
            STATE.originals[(other, name)] = old
            setattr(other, name, wrapped)


def _accelerator_is_cuda(torch: Any) -> bool:
    acc = getattr(torch, "accelerator", None)
    try:
        cur = acc.current_accelerator() if acc is not None else None
    except Exception:
        return False
    return getattr(cur, "type", None) == "cuda"


def patch_torch() -> None:
    """Routes torch's memory APIs to fragfree (idempotent)."""
    torch = _torch()
    tcm = torch.cuda.memory
    with LOCK:
        for name, new in PATCHED.items():
            if name in _WRAPPING:
                old = getattr(tcm, name, None)
                if old is None or getattr(old, "__fragfree__", False):
                    continue
                new = new(old)
            _replace(tcm, name, new, [torch.cuda])
        if _accelerator_is_cuda(torch):
            acc = torch.accelerator
            acc_mem = getattr(acc, "memory", None)
            for name, new in _ACCELERATOR_PATCHED.items():
                home = acc_mem if acc_mem is not None and hasattr(acc_mem, name) else acc
                _replace(home, name, new, [acc])


def unpatch_torch() -> None:
    """Restores every patched torch function (tests)."""
    with LOCK:
        for (module, name), old in list(STATE.originals.items()):
            setattr(module, name, old)
        STATE.originals.clear()
