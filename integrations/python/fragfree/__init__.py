"""fragfree for Python: make libfragfree PyTorch's CUDA allocator, and read its
statistics, snapshots and fragmentation figures.

Owns the public API (``__all__``; everything else here is private):

* ``enable(mode="auto", **config)`` -- call once, before any CUDA work.
  ``mode="auto"`` (default) installs the native adapter when it can be loaded
  (prebuilt, or compiled once and cached) and otherwise falls back to
  pluggable mode with one warning naming what is lost; ``mode="native"``: the
  C++ adapter implementing PyTorch's CUDAAllocator interface (_native.py;
  cuDNN benchmark, torch.compile's CUDA graphs, OOM observers,
  torch.cuda.OutOfMemoryError); ``mode="pluggable"``:
  torch.cuda.memory.CUDAPluggableAllocator plus patched memory functions
  (_torch_patch.py). ``config`` keys are FRAGFREE_CONF keys.
* ``stats``, ``memory_summary``, ``snapshot``, ``dump_snapshot``, ``empty_cache``,
  ``set_memory_fraction``, ``reset_peak_stats`` -- work with or without torch.
* ``bucket_advice``, ``sequence_buckets``, ``pad_to_bucket``, ``BucketCollate`` --
  the bucket advisor: rounding buckets for the observed request sizes, and
  sequence-length buckets for a data loader (_buckets.py).
* ``translate_oom`` -- pluggable mode's way to see OOMs as
  torch.cuda.OutOfMemoryError (PyTorch's pluggable allocator raises
  RuntimeError).

Under ``LD_PRELOAD=libfragfree.so`` the library's Python bootstrap calls
_preload.activate() when torch is imported (docs/preload.md). Everything talks
to libfragfree through its C API (ctypes; see _library.py for how the library
is found). docs/python.md is the user documentation.
Thread-safety: enable() and the process-wide state it sets are guarded by
_state.LOCK; the read functions are as thread-safe as the C API.
"""

from __future__ import annotations

import os as _os
import warnings as _warnings
from typing import TYPE_CHECKING as _TYPE_CHECKING

from . import _buckets, _stats
from ._address import address_range
from ._buckets import BucketCollate, pad_to_bucket
from ._config import format_conf
from ._config import merge_conf as _merge_conf
from ._device import device_index as _device_index
from ._errors import (
    ConfigError,
    FragfreeError,
    FragfreeOutOfMemoryError,
    FragfreeValueError,
    LibraryNotFoundError,
)
from ._library import Library, find_library
from ._library import load_library as _load_library
from ._state import LOCK as _LOCK
from ._state import STATE as _STATE
from ._sleep import SleepOutOfMemoryError, pause, paused, region, release_backup, resume
from ._torch_patch import translate_oom

if _TYPE_CHECKING:  # annotations only (they are never evaluated at run time)
    from typing import Any

__version__ = "0.1.0"

__all__ = [
    "enable",
    "is_enabled",
    "mode",
    "library",
    "find_library",
    "Library",
    "stats",
    "stats_nested",
    "memory_summary",
    "snapshot",
    "dump_snapshot",
    "watch",
    "empty_cache",
    "set_memory_fraction",
    "reset_peak_stats",
    "bucket_advice",
    "sequence_buckets",
    "pad_to_bucket",
    "BucketCollate",
    "format_conf",
    "translate_oom",
    "region",
    "pause",
    "resume",
    "paused",
    "release_backup",
    "address_range",
    "SleepOutOfMemoryError",
    "FragfreeError",
    "FragfreeValueError",
    "ConfigError",
    "FragfreeOutOfMemoryError",
    "LibraryNotFoundError",
]

_MODES = ("auto", "native", "pluggable")

# What pluggable mode cannot do that native mode does (docs/python.md, "What
# works where"): the warning of enable()'s fallback names these.
_PLUGGABLE_LACKS = (
    "torch.cuda.OutOfMemoryError on OOM (a RuntimeError carrying fragfree's report "
    "instead, unless inside fragfree.translate_oom()), OOM observers, "
    "torch.compile(mode='reduce-overhead') (cudagraph trees), "
    "torch.backends.cudnn.benchmark, torch.cuda.MemPool, Python stacks in memory "
    "snapshots, and C++ callers of PyTorch's memory statistics"
)


def watch(model: Any, optimizer: Any = None) -> Any:
    """Tell fragfree's OOM report what memory is made of: the model's parameters,
    gradients and buffers and the optimizer's state, per device, refreshed
    before every forward pass and after every optimizer step; and which
    memory-saving techniques are already on, so the advice skips them. Returns a
    handle whose ``remove()`` stops watching."""
    from ._watch import Watch

    return Watch(library(), model, optimizer)


def library() -> Library:
    """The loaded libfragfree (found as described in _library.py; under
    LD_PRELOAD the preloaded one). Loading does not configure it: the first
    call into it reads $FRAGFREE_CONF, unless enable() (or
    ``library().init(conf)``) configured it first."""
    if _STATE.lib is not None:
        return _STATE.lib
    return _load_library()


def is_enabled() -> bool:
    """True once enable() (or the LD_PRELOAD bootstrap) has made fragfree
    PyTorch's CUDA allocator."""
    return _STATE.mode is not None


def mode() -> str | None:
    """"native", "pluggable", or None when not enabled."""
    return _STATE.mode


def enable(mode: str = "auto", **config: Any) -> None:
    """Make libfragfree PyTorch's CUDA allocator. Call before any CUDA work.

    ``mode``: "auto" (default) -- the native adapter when it can be loaded,
    else pluggable mode with one RuntimeWarning naming what is lost;
    "native" -- the adapter or FragfreeError; "pluggable" --
    CUDAPluggableAllocator (docs/python.md compares them).

    ``config``: FRAGFREE_CONF keys, e.g. ``enable(reclaim_before_grow=False,
    trace_entries=100000)`` -> ``"reclaim_before_grow:False,trace_entries:100000"``,
    applied after $FRAGFREE_CONF (so keywords win). The configuration is
    checked first: an unknown key raises ConfigError (a ValueError) naming it,
    whether or not PyTorch is installed.

    Calling enable() again with the same configuration (and the same mode, or
    "auto") does nothing; with a different one it raises FragfreeError (a
    RuntimeError): the allocator cannot be swapped once chosen. Calling it
    after CUDA was initialised raises FragfreeError too.
    """
    if mode not in _MODES:
        raise ValueError(f"fragfree.enable(mode={mode!r}): mode must be one of {_MODES}")
    conf = _merge_conf(_os.environ.get("FRAGFREE_CONF"), config)
    with _LOCK:
        if _STATE.mode is not None:
            if mode in ("auto", _STATE.mode) and _STATE.conf == conf:
                return
            by = " by the LD_PRELOAD bootstrap" if _STATE.preloaded else ""
            raise FragfreeError(
                f"fragfree.enable() was already called{by} (mode={_STATE.mode!r}, "
                f"FRAGFREE_CONF={_STATE.conf!r}); it cannot be enabled again with "
                f"mode={mode!r}, FRAGFREE_CONF={conf!r}, because PyTorch's allocator can only "
                "be chosen once per process. Call enable() once, at start-up, with the final "
                "configuration."
            )
        lib = _load_library()
        _configure(lib, conf)
        _STATE.enabling = True
        try:
            torch = _import_torch()
            _check_cuda_not_initialised(torch)
            if mode == "auto":
                try:
                    _install(lib, conf, "native")
                except Exception as e:  # noqa: BLE001 - any failure: pluggable
                    _warnings.warn(
                        f"fragfree: the native adapter could not be loaded ({_first_line(e)}); "
                        f"using pluggable mode, which lacks {_PLUGGABLE_LACKS}. See "
                        "docs/python.md, \"What works where\".",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                    _install(lib, conf, "pluggable")
            else:
                _install(lib, conf, mode)
        finally:
            _STATE.enabling = False
            if _STATE.preload_notice_pending:
                # This call imported torch under LD_PRELOAD: the bootstrap
                # left the notice to it.
                _STATE.preload_notice_pending = False
                from ._preload import print_notice

                print_notice(_STATE.mode)


def _first_line(error: BaseException, limit: int = 300) -> str:
    text = str(error).strip().splitlines()
    line = text[0] if text else type(error).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _configure(lib: Library, conf: str | None) -> None:
    """ff_init(conf): checks every key before anything else happens."""
    try:
        lib.init(conf)
    except ConfigError:
        raise
    except FragfreeError as e:
        raise FragfreeError(
            f"{e}. fragfree must be configured before its first allocation: call "
            "fragfree.enable() before anything else uses libfragfree.",
            e.status,
        ) from e


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise FragfreeError(
            "fragfree.enable() plugs libfragfree into PyTorch, which is not installed. "
            "Without PyTorch use the C API, or fragfree.stats() etc. directly."
        ) from e
    return torch


def _check_cuda_not_initialised(torch: Any) -> None:
    if torch.cuda.is_initialized():
        raise FragfreeError(
            "fragfree.enable() must be called before CUDA is initialised, but CUDA is "
            "already initialised in this process (by a CUDA tensor, torch.cuda.init(), "
            "torch.cuda.MemPool(), a CUDA RNG seed, ...), and PyTorch's allocator cannot "
            "be replaced after that. Move `import fragfree; fragfree.enable()` to the top "
            "of your program, before any CUDA work, or run without code changes as "
            "LD_PRELOAD=libfragfree.so python ..."
        )


def _install(lib: Library, conf: str | None, mode: str) -> None:
    """Makes ``lib`` PyTorch's allocator in ``mode`` and records it in STATE
    (caller holds LOCK). Raises FragfreeError, leaving STATE unchanged."""
    if mode == "pluggable":
        from ._torch_patch import install_pluggable, patch_torch

        allocator, hooks = install_pluggable(lib)
        _STATE.allocator, _STATE.hooks = allocator, hooks
        _STATE.lib, _STATE.conf = lib, conf
        patch_torch()
    else:
        from ._native import install_native

        ext, features = install_native(lib.path)
        _STATE.native_ext, _STATE.features = ext, features
        _STATE.lib, _STATE.conf = lib, conf
    _STATE.mode = mode
    from ._torch_patch import adopt_torch_oom

    adopt_torch_oom()


def _index(device: Any) -> int:
    return _device_index(device)


def stats(device: Any = None) -> dict[str, Any]:
    """Flat statistics of ``device`` (None: the current device): every
    torch.cuda.memory_stats() key plus fragfree's own (mapped_bytes.*,
    reclaimable_bytes, largest_free_block, pages_remapped,
    fragmentation.u_alloc, ...). Works without torch."""
    return library().stats(_index(device))


def stats_nested(device: Any = None) -> dict[str, Any]:
    """stats() in torch.cuda.memory_stats_as_nested_dict()'s shape."""
    return _stats.nest(stats(device))


def memory_summary(device: Any = None) -> str:
    """A short report: allocated / reserved, U_alloc, U_active, waste, external
    fragmentation, whether the allocated-vs-reserved gap is severe, what
    moving pages cost once any moved, and the bucket advisor's round_buckets
    line once requests were sampled."""
    lib = library()
    idx = _index(device)
    text = _stats.summary_text(lib.stats(idx), idx, header=f"libfragfree {lib.version()}")
    return text + _buckets.summary_line(lib, idx)


def bucket_advice(num_buckets: int = 4, device: Any = None) -> dict[str, Any]:
    """The ``num_buckets`` rounding buckets that minimise padding for the
    request sizes libfragfree has seen on ``device`` (sampled 1 in
    ``bucket_sample`` requests; None: the current device), as a dict:
    ``buckets`` (bytes), ``conf`` (``"round_buckets:[...]"`` for FRAGFREE_CONF;
    "" before any request), ``config`` (``{"round_buckets": [...]}``, for
    ``enable(**advice["config"])`` in the next run), the padding and the number
    of distinct block sizes with the advice, with PyTorch's default rounding and
    with ``roundup_power2_divisions:4``, and the histogram's figures.
    ``num_buckets`` 0: the library's ``bucket_advice_k`` option. Works without
    torch; raises FragfreeError if the library predates the advisor."""
    return _buckets.bucket_advice(library(), _index(device), num_buckets)


def sequence_buckets(lengths: Any, num_buckets: int = 4, multiple_of: int = 8) -> dict[str, Any]:
    """The ``num_buckets`` padded lengths (multiples of ``multiple_of``, e.g. 8
    for tensor cores) that minimise padding tokens when each sequence of
    ``lengths`` (ints, a list, numpy array or tensor of a data set's lengths)
    is padded to the smallest one that holds it: ``buckets`` (ascending),
    ``sequences_per_bucket``, ``tokens``, ``padding_tokens`` and
    ``pad_to_max_padding_tokens`` (padding everything to the longest). Feed
    ``buckets`` to pad_to_bucket() or BucketCollate."""
    return _buckets.sequence_buckets(library(), lengths, num_buckets, multiple_of)


def snapshot(include_traces: bool = True) -> dict[str, Any]:
    """The allocator state in torch.cuda.memory._snapshot()'s shape:
    {"segments": [...], "device_traces": [[...], ...]}."""
    from . import _snapshot

    lib = library()
    import sys

    if "torch" in sys.modules:
        from ._torch_patch import _active_devices, _cuda_initialized

        if _cuda_initialized():
            torch = sys.modules["torch"]
            return _snapshot.build_snapshot(
                lib, _active_devices(), int(torch.cuda.device_count()),
                include_traces=include_traces and _STATE.history is not False,
            )
    return _snapshot.build_snapshot(lib, [_index(None)], 1, include_traces=include_traces)


def dump_snapshot(path: str | _os.PathLike = "fragfree_snapshot.pickle") -> str:
    """Writes snapshot() to ``path``: a pickle that
    ``python -m torch.cuda._memory_viz trace_plot`` and pytorch.org/memory_viz read,
    or JSON if the name ends in .json. Returns the path."""
    from ._snapshot import write_snapshot

    return write_snapshot(snapshot(), path)


def empty_cache(device: Any = None) -> None:
    """Return cached free pages to the driver (None: every device)."""
    library().empty_cache(-1 if device is None else _index(device))


def set_memory_fraction(fraction: float, device: Any = None) -> None:
    """Limit fragfree on ``device`` to ``fraction`` of its memory, in (0, 1]."""
    fraction = float(fraction)
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    idx = _index(device)
    library().set_memory_fraction(fraction, idx)
    with _LOCK:
        _STATE.fractions[idx] = fraction


def reset_peak_stats(device: Any = None) -> None:
    """Reset the peak figures (as torch.cuda.reset_peak_memory_stats)."""
    library().reset_peak_stats(-1 if device is None else _index(device))


del annotations
