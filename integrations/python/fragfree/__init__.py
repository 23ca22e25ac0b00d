"""fragfree for Python: make libfragfree PyTorch's CUDA allocator, and read its
statistics, snapshots and fragmentation figures.

Owns the public API:

* ``enable(mode="pluggable", **config)`` -- call once, before any CUDA work.
  ``mode="pluggable"`` (default) uses torch.cuda.memory.CUDAPluggableAllocator and
  patches torch's memory functions to answer from fragfree; ``mode="native"``
  compiles a C++ adapter that implements PyTorch's CUDAAllocator interface
  (cuDNN benchmark, torch.compile's CUDA graphs, OOM observers,
  torch.cuda.OutOfMemoryError). ``config`` keys are FRAGFREE_CONF keys.
* ``stats``, ``memory_summary``, ``snapshot``, ``dump_snapshot``, ``empty_cache``,
  ``set_memory_fraction``, ``reset_peak_stats`` -- work with or without torch.
* ``bucket_advice``, ``sequence_buckets``, ``pad_to_bucket``, ``BucketCollate`` --
  the bucket advisor: rounding buckets for the observed request sizes, and
  sequence-length buckets for a data loader (_buckets.py).

Everything talks to libfragfree through its C API (ctypes; see _library.py for how
the library is found). docs/python.md is the user documentation.
"""

from __future__ import annotations

import os
from typing import Any

from . import _buckets, _stats
from ._buckets import BucketCollate, pad_to_bucket
from ._config import format_conf, merge_conf
from ._device import device_index
from ._errors import (
    ConfigError,
    FragfreeError,
    FragfreeOutOfMemoryError,
    FragfreeValueError,
    LibraryNotFoundError,
)
from ._library import Library, candidate_paths, find_library, load_library
from ._state import LOCK, STATE

__version__ = "0.1.0"

__all__ = [
    "enable",
    "is_enabled",
    "mode",
    "library",
    "find_library",
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
    "FragfreeError",
    "FragfreeValueError",
    "ConfigError",
    "FragfreeOutOfMemoryError",
    "LibraryNotFoundError",
]

_MODES = ("pluggable", "native")


def watch(model: Any, optimizer: Any = None) -> Any:
    """Tell fragfree's OOM report what memory is made of: the model's parameters,
    gradients and buffers and the optimizer's state, per device, refreshed
    before every forward pass and after every optimizer step; and which
    memory-saving techniques are already on, so the advice skips them. Returns a
    handle whose ``remove()`` stops watching."""
    from ._watch import Watch

    return Watch(library(), model, optimizer)


def library() -> Library:
    """The loaded libfragfree (found as described in _library.py). Loading does
    not configure it: the first call into it reads $FRAGFREE_CONF, unless
    enable() (or ``library().init(conf)``) configured it first."""
    if STATE.lib is not None:
        return STATE.lib
    return load_library()


def is_enabled() -> bool:
    """True once enable() has made fragfree PyTorch's CUDA allocator."""
    return STATE.mode is not None


def mode() -> str | None:
    """"pluggable", "native", or None when not enabled."""
    return STATE.mode


def enable(mode: str = "pluggable", **config: Any) -> None:
    """Make libfragfree PyTorch's CUDA allocator. Call before any CUDA work.

    ``config``: FRAGFREE_CONF keys, e.g. ``enable(reclaim_before_grow=False,
    trace_entries=100000)`` -> ``"reclaim_before_grow:False,trace_entries:100000"``,
    applied after $FRAGFREE_CONF (so keywords win). An unknown key raises
    ConfigError (a ValueError) naming it.

    Calling enable() again with the same mode and configuration does nothing;
    with a different one it raises FragfreeError (a RuntimeError): the allocator
    cannot be swapped once chosen. Calling it after CUDA was initialised raises
    FragfreeError too.
    """
    if mode not in _MODES:
        raise ValueError(f"fragfree.enable(mode={mode!r}): mode must be one of {_MODES}")
    conf = merge_conf(os.environ.get("FRAGFREE_CONF"), config)
    with LOCK:
        if STATE.mode is not None:
            if STATE.mode == mode and STATE.conf == conf:
                return
            raise FragfreeError(
                f"fragfree.enable() was already called (mode={STATE.mode!r}, "
                f"FRAGFREE_CONF={STATE.conf!r}); it cannot be enabled again with "
                f"mode={mode!r}, FRAGFREE_CONF={conf!r}, because PyTorch's allocator can only "
                "be chosen once per process. Call enable() once, at start-up, with the final "
                "configuration."
            )
        try:
            import torch
        except ImportError as e:
            raise FragfreeError(
                "fragfree.enable() plugs libfragfree into PyTorch, which is not installed. "
                "Without PyTorch use the C API, or fragfree.stats() etc. directly."
            ) from e
        if torch.cuda.is_initialized():
            raise FragfreeError(
                "fragfree.enable() must be called before CUDA is initialised, but CUDA is "
                "already initialised in this process (by a CUDA tensor, torch.cuda.init(), "
                "torch.cuda.MemPool(), a CUDA RNG seed, ...), and PyTorch's allocator cannot "
                "be replaced after that. Move `import fragfree; fragfree.enable()` to the top "
                "of your program, before any CUDA work, or run without code changes as "
                "LD_PRELOAD=libfragfree.so python ..."
            )
        lib = load_library()
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
        if mode == "pluggable":
            from ._torch_patch import install_pluggable, patch_torch

            allocator, hooks = install_pluggable(lib)
            STATE.allocator, STATE.hooks = allocator, hooks
            STATE.lib, STATE.conf = lib, conf
            patch_torch()
        else:
            from ._native import install_native

            ext, features = install_native(lib.path)
            STATE.native_ext, STATE.features = ext, features
            STATE.lib, STATE.conf = lib, conf
        STATE.mode = mode


def _index(device: Any) -> int:
    return device_index(device)


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
    fragmentation, whether the allocated-vs-reserved gap is severe, and the
    bucket advisor's round_buckets line once requests were sampled."""
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
                include_traces=include_traces and STATE.history is not False,
            )
    return _snapshot.build_snapshot(lib, [_index(None)], 1, include_traces=include_traces)


def dump_snapshot(path: str | os.PathLike = "fragfree_snapshot.pickle") -> str:
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
    with LOCK:
        STATE.fractions[idx] = fraction


def reset_peak_stats(device: Any = None) -> None:
    """Reset the peak figures (as torch.cuda.reset_peak_memory_stats)."""
    library().reset_peak_stats(-1 if device is None else _index(device))
