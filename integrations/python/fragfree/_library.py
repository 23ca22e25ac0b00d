"""Finding and binding libfragfree.so: the package's only door to the engine.

Owns library discovery (``find_library``), the ctypes declarations of the C API
(shim/include/fragfree/fragfree.h) and the ``Library`` wrapper that turns C
status codes into Python exceptions. Nothing here imports torch.

Discovery order (first hit wins):
  0. the libfragfree.so already in the process's global scope (LD_PRELOAD):
     the package must use that copy, never load a second engine
     (``preloaded_library_path``),
  1. ``$FRAGFREE_LIBRARY`` (a file path; an error if it does not exist),
  2. next to the package: ``fragfree/libfragfree.so*`` or ``fragfree/lib/libfragfree.so*``
     (a wheel or ``pip install`` that bundled the library),
  3. the repository's build trees relative to the package: ``<repo>/build/lib/``
     then ``<repo>/build-*/lib/`` (newest first),
  4. ``ctypes.util.find_library("fragfree")`` (the system search path).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import glob
import json
import os
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from . import _elf
from ._errors import (
    FF_OK,
    FragfreeError,
    FragfreeValueError,
    LibraryNotFoundError,
    error_for_status,
)

__all__ = [
    "Library",
    "find_library",
    "candidate_paths",
    "load_library",
    "preloaded_library_path",
]

_LIB_NAMES = ("libfragfree.so", "libfragfree.so.0")
_PACKAGE_DIR = Path(__file__).resolve().parent


def _repo_root() -> Path:
    # <repo>/integrations/python/fragfree/_library.py
    return _PACKAGE_DIR.parent.parent.parent


def candidate_paths() -> list[tuple[str, Path]]:
    """Every place discovery looks, in order, as (description, path) pairs.
    Paths are candidates; they need not exist."""
    out: list[tuple[str, Path]] = []
    for name in _LIB_NAMES:
        out.append(("next to the package", _PACKAGE_DIR / name))
        out.append(("next to the package", _PACKAGE_DIR / "lib" / name))
    root = _repo_root()
    out.append(("repository build tree", root / "build" / "lib" / "libfragfree.so"))
    builds = [Path(p) for p in glob.glob(str(root / "build-*" / "lib" / "libfragfree.so"))]
    builds.sort(key=lambda p: p.stat().st_mtime if p.exists() else 0.0, reverse=True)
    for p in builds:
        out.append(("repository build tree", p))
    if not builds:
        out.append(("repository build tree", root / "build-*" / "lib" / "libfragfree.so"))
    return out


def preloaded_library_path() -> str | None:
    """The absolute path of the libfragfree.so in the process's global scope
    (LD_PRELOAD puts it there; a library loaded by ctypes is not), found from
    the address of its ff_version in /proc/self/maps; None when there is none."""
    try:
        addr = ctypes.cast(ctypes.CDLL(None).ff_version, ctypes.c_void_p).value
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(None, 5)
                lo, _, hi = fields[0].partition("-")
                if len(fields) == 6 and int(lo, 16) <= addr < int(hi, 16):
                    path = fields[5].strip()
                    return path if os.path.isfile(path) else None
    except (AttributeError, OSError, ValueError):
        pass
    return None


def find_library() -> str:
    """The path of the libfragfree.so to load (see the module docstring for the
    order). Raises LibraryNotFoundError naming every place it looked."""
    preloaded = preloaded_library_path()
    if preloaded is not None:
        return preloaded
    env = os.environ.get("FRAGFREE_LIBRARY")
    if env:
        if os.path.isfile(env):
            return os.path.abspath(env)
        raise LibraryNotFoundError(
            f"FRAGFREE_LIBRARY is set to {env!r}, but no such file exists. "
            "Point it at libfragfree.so (e.g. <repo>/build/lib/libfragfree.so) or unset it."
        )
    looked = ["$FRAGFREE_LIBRARY (not set)"]
    for what, path in candidate_paths():
        if path.is_file():
            return str(path)
        looked.append(f"{path} ({what})")
    found = ctypes.util.find_library("fragfree")
    if found:
        return found
    looked.append('ctypes.util.find_library("fragfree") (system library path)')
    raise LibraryNotFoundError(
        "libfragfree.so was not found. Looked in:\n  "
        + "\n  ".join(looked)
        + "\nBuild it (cmake -S <repo> -B <repo>/build -G Ninja && ninja -C <repo>/build) "
        "or set FRAGFREE_LIBRARY=/path/to/libfragfree.so."
    )


# ---------------------------------------------------------------------------
# ctypes declarations. name -> (restype, argtypes). Required symbols must exist;
# optional ones are bound when the library exports them. Each entry mirrors its
# prototype in shim/include/fragfree/fragfree.h, the one declaration of the C
# API; tests/test_ctypes_table.py compares them.

_c_size = ctypes.c_size_t
_c_int = ctypes.c_int
_c_void_p = ctypes.c_void_p
_c_char_p = ctypes.c_char_p
_status = ctypes.c_int

_REQUIRED: dict[str, tuple[Any, list[Any]]] = {
    "ff_init": (_status, [_c_char_p]),
    "ff_version": (_c_char_p, []),
    "ff_device_count": (_c_int, []),
    "ff_malloc": (_c_void_p, [_c_size, _c_int, _c_void_p]),
    "ff_free": (_status, [_c_void_p, _c_int]),
    "ff_record_stream": (_status, [_c_void_p, _c_int, _c_void_p]),
    "ff_empty_cache": (_status, [_c_int]),
    "ff_set_memory_fraction": (_status, [ctypes.c_double, _c_int]),
    "ff_set_memory_limit": (_status, [_c_size, _c_int]),
    "ff_stats_json": (_c_size, [_c_int, _c_char_p, _c_size]),
    "ff_reset_peak_stats": (_status, [_c_int]),
    "ff_reset_accumulated_stats": (_status, [_c_int]),
    "ff_allocation_size": (_c_size, [_c_void_p, _c_int]),
    "ff_check_invariants": (_status, [_c_int]),
    "ff_last_error": (_c_char_p, []),
    "ff_status_name": (_c_char_p, [_c_int]),
    "ff_set_error_handler": (None, [_c_void_p, _c_void_p]),
}

_OPTIONAL: dict[str, tuple[Any, list[Any]]] = {
    # {"segments": [...], "device_traces": [[...]]} in torch's _snapshot() shape.
    "ff_snapshot_json": (_c_size, [_c_int, _c_char_p, _c_size]),
    # Proposed: turn the trace ring buffer on/off at run time (device < 0: all).
    "ff_record_history": (_status, [_c_int, _c_int, _c_size]),
    "ff_shutdown": (_status, []),
    # What the OOM report knows of the program (fragfree.watch()).
    "ff_set_oom_hints": (_status, [_c_int, _c_size, _c_size, _c_size, _c_size, ctypes.c_uint32]),
    # The bucket advisor (docs/oom.md): advice from the sampled request sizes,
    # and the same programme over a data loader's sequence lengths.
    "ff_bucket_advice_json": (_c_size, [_c_int, _c_int, _c_char_p, _c_size]),
    "ff_advise_sequence_buckets_json": (
        _c_size,
        [ctypes.POINTER(ctypes.c_int64), _c_size, _c_int, _c_int, _c_char_p, _c_size],
    ),
    # Sleep and wake (docs/sleep.md; fragfree._sleep).
    "ff_region_begin": (_status, [_c_char_p]),
    "ff_region_end": (_status, []),
    "ff_pause": (_status, [ctypes.POINTER(_c_char_p), _c_int, _c_int]),
    "ff_resume": (_status, [ctypes.POINTER(_c_char_p), _c_int]),
    "ff_resume_ex": (_status, [ctypes.POINTER(_c_char_p), _c_int, ctypes.c_uint]),
    "ff_release_backup": (_status, [ctypes.POINTER(_c_size)]),
    "ff_paused_json": (_c_size, [_c_int, _c_char_p, _c_size]),
    # One integer figure of the stats by its key, without the JSON or a driver call.
    "ff_get_stat": (_status, [_c_int, _c_char_p, ctypes.POINTER(ctypes.c_int64)]),
    # The whole block around a pointer (docs/ipc.md, "Address ranges").
    "ff_get_address_range": (
        _status, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(_c_size)]
    ),
}

# The entry points PyTorch's CUDAPluggableAllocator needs, by hook name.
PLUGGABLE_C_SYMBOLS = {
    "malloc": "fragfree_malloc",
    "free": "fragfree_free",
    "reset": "fragfree_empty_cache",
    "memory_fraction": "fragfree_set_memory_fraction",
    "record_stream": "fragfree_record_stream",
}
# C++-ABI hooks (exact std::function / std::pair parameter types); looked up by
# plain or mangled name.
POOL_HOOK_IDENTIFIERS = {
    "begin_allocate_to_pool": "fragfree_begin_allocate_to_pool",
    "end_allocate_to_pool": "fragfree_end_allocate_to_pool",
    "release_pool": "fragfree_release_pool",
}

_ERROR_HANDLER_T = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


@_ERROR_HANDLER_T
def _quiet_handler(status, message, arg):  # pragma: no cover - called from C
    return None


class Library:
    """One loaded libfragfree.so. Thread-safe as the C API is; methods raise
    FragfreeError subclasses instead of returning status codes."""

    def __init__(self, path: str):
        self.path = path
        try:
            self._cdll = ctypes.CDLL(path)
        except OSError as e:
            raise LibraryNotFoundError(f"could not load {path}: {e}") from e
        missing = []
        for name, (restype, argtypes) in _REQUIRED.items():
            fn = getattr(self._cdll, name, None)
            if fn is None:
                missing.append(name)
                continue
            fn.restype, fn.argtypes = restype, argtypes
        if missing:
            raise LibraryNotFoundError(
                f"{path} is not a compatible libfragfree: missing {', '.join(missing)}"
            )
        self._optional: dict[str, Any] = {}
        for name, (restype, argtypes) in _OPTIONAL.items():
            fn = getattr(self._cdll, name, None)
            if fn is not None:
                fn.restype, fn.argtypes = restype, argtypes
                self._optional[name] = fn
        self._symbols: list[str] | None = None
        self._quiet_lock = threading.Lock()

    # -- symbols ------------------------------------------------------------
    def has(self, name: str) -> bool:
        """True if the library exports the C symbol ``name``."""
        return getattr(self._cdll, name, None) is not None

    def address(self, name: str) -> int | None:
        """The address of the exported symbol ``name`` (exact name), or None."""
        fn = getattr(self._cdll, name, None)
        return None if fn is None else ctypes.cast(fn, ctypes.c_void_p).value

    def dynamic_symbols(self) -> list[str]:
        if self._symbols is None:
            self._symbols = _elf.defined_dynamic_symbols(self.path)
        return self._symbols

    def pool_hook_addresses(self) -> dict[str, int]:
        """Addresses of the graph-pool hooks the library exports, keyed
        'begin_allocate_to_pool' / 'end_allocate_to_pool' / 'release_pool'.
        Missing hooks are absent from the dict."""
        out: dict[str, int] = {}
        for key, ident in POOL_HOOK_IDENTIFIERS.items():
            addr = self.address(ident)
            if addr is None:
                name = _elf.find_symbol(self.dynamic_symbols(), ident)
                addr = self.address(name) if name else None
            if addr:
                out[key] = addr
        return out

    # -- errors --------------------------------------------------------------
    def last_error(self) -> str:
        msg = self._cdll.ff_last_error()
        return msg.decode("utf-8", "replace") if msg else ""

    def _check(self, status: int, what: str, config: bool = False) -> None:
        if status != FF_OK:
            raise error_for_status(status, self.last_error(), what, config=config)

    @contextlib.contextmanager
    def quiet_errors(self) -> Iterator[None]:
        """Silence libfragfree's stderr error messages for the duration (the
        caller reports them as exceptions), then restore the default handler.
        The handler is process-wide, so this is used only at start-up
        (ff_init), never around calls a training loop makes."""
        with self._quiet_lock:
            self._cdll.ff_set_error_handler(
                ctypes.cast(_quiet_handler, ctypes.c_void_p), None
            )
            try:
                yield
            finally:
                self._cdll.ff_set_error_handler(None, None)

    # -- configuration ------------------------------------------------------
    def init(self, conf: str | None) -> None:
        """ff_init(conf): configure before the first allocation. ``None``
        re-reads $FRAGFREE_CONF. Bad keys raise ConfigError naming the key."""
        arg = None if conf is None else conf.encode("utf-8")
        with self.quiet_errors():
            status = self._cdll.ff_init(arg)
            message = self.last_error()
        if status != FF_OK:
            raise error_for_status(status, message, f"ff_init({conf!r})", config=True)

    def version(self) -> str:
        v = self._cdll.ff_version()
        return v.decode() if v else ""

    def device_count(self) -> int:
        return int(self._cdll.ff_device_count())

    # -- memory -------------------------------------------------------------
    def malloc(self, size: int, device: int = 0, stream: int | None = None) -> int:
        """ff_malloc; returns the address (0 for size 0). Raises on failure."""
        if size == 0:
            return 0
        p = self._cdll.ff_malloc(size, device, stream)
        if not p:
            message = self.last_error()
            # ff_malloc does not return a status; OOM is the common cause.
            lowered = message.lower()
            status = 2 if ("out of memory" in lowered or "oom" in lowered) else 6
            raise error_for_status(status, message, f"ff_malloc({size}, device={device})")
        return int(p)

    def free(self, ptr: int, device: int = -1) -> None:
        self._check(self._cdll.ff_free(ptr, device), f"ff_free({ptr:#x})")

    def record_stream(self, ptr: int, device: int, stream: int | None) -> None:
        self._check(self._cdll.ff_record_stream(ptr, device, stream), "ff_record_stream")

    def allocation_size(self, ptr: int, device: int = 0) -> int:
        return int(self._cdll.ff_allocation_size(ptr, device))

    def empty_cache(self, device: int = -1) -> None:
        self._check(self._cdll.ff_empty_cache(device), "ff_empty_cache")

    def set_memory_fraction(self, fraction: float, device: int = -1) -> None:
        self._check(
            self._cdll.ff_set_memory_fraction(float(fraction), device),
            f"ff_set_memory_fraction({fraction})",
        )

    def set_memory_limit(self, nbytes: int, device: int = -1) -> None:
        self._check(self._cdll.ff_set_memory_limit(nbytes, device), "ff_set_memory_limit")

    def check_invariants(self, device: int = 0) -> None:
        self._check(self._cdll.ff_check_invariants(device), "ff_check_invariants")

    # -- observability ------------------------------------------------------
    def _json_call(self, fn: Callable[..., int], device: int, what: str) -> Any:
        return self._json_text(lambda buf, n: fn(device, buf, n), f"{what}(device={device})")

    def _json_text(self, call: Callable[[Any, int], int], what: str) -> Any:
        """Runs ``call(buf, len)`` with the C API's buffer convention (returns
        the full length, 0 on error) and parses the JSON it writes."""
        n = call(None, 0)
        message = self.last_error() if n == 0 else ""
        while True:
            if n == 0:
                raise FragfreeError(
                    f"{what} failed: {message or 'no message from libfragfree'}"
                )
            buf = ctypes.create_string_buffer(n + 1)
            m = call(buf, n + 1)
            if m == 0:
                n, message = 0, self.last_error()
                continue
            if m <= n:
                break
            n = m  # grew between the two calls; try again
        return json.loads(buf.value.decode("utf-8"))

    def _require(self, name: str, what: str) -> Any:
        """The optional C function ``name``, or a FragfreeError saying that this
        library is too old for ``what``."""
        fn = self._optional.get(name)
        if fn is None:
            raise FragfreeError(
                f"{what} needs {name}(), which {self.path} does not export: it was built "
                "before that function existed. Rebuild libfragfree (ninja -C <repo>/build) "
                "or set FRAGFREE_LIBRARY to a newer libfragfree.so."
            )
        return fn

    def stats(self, device: int = 0) -> dict[str, Any]:
        """The flat stats dict of ``device`` (memory_stats() keys plus
        fragfree's own), straight from ff_stats_json."""
        return self._json_call(self._cdll.ff_stats_json, device, "ff_stats_json")

    def stat(self, device: int, key: str) -> int:
        """One integer figure of ``device``'s stats by its memory_stats() key
        ("allocated_bytes.all.current"), read by ff_get_stat without writing
        the JSON and without a driver call; from the JSON with a library that
        predates ff_get_stat."""
        fn = self._optional.get("ff_get_stat")
        if fn is None:
            return int(self.stats(device).get(key, 0))
        value = ctypes.c_int64()
        self._check(fn(device, key.encode("utf-8"), ctypes.byref(value)),
                    f"ff_get_stat(device={device}, {key!r})")
        return value.value

    def reset_peak_stats(self, device: int = -1) -> None:
        self._check(self._cdll.ff_reset_peak_stats(device), "ff_reset_peak_stats")

    def reset_accumulated_stats(self, device: int = -1) -> None:
        self._check(
            self._cdll.ff_reset_accumulated_stats(device), "ff_reset_accumulated_stats"
        )

    @property
    def has_snapshot(self) -> bool:
        return "ff_snapshot_json" in self._optional

    def snapshot(self, device: int = 0) -> dict[str, Any] | None:
        """ff_snapshot_json(device) parsed, or None if the library lacks it."""
        fn = self._optional.get("ff_snapshot_json")
        if fn is None:
            return None
        return self._json_call(fn, device, "ff_snapshot_json")

    def set_oom_hints(self, device: int, parameters: int, gradients: int,
                      optimizer_state: int, other: int, techniques: int) -> bool:
        """ff_set_oom_hints; False if the library lacks it."""
        fn = self._optional.get("ff_set_oom_hints")
        if fn is None:
            return False
        self._check(fn(device, parameters, gradients, optimizer_state, other,
                       techniques), "ff_set_oom_hints")
        return True

    @property
    def has_bucket_advice(self) -> bool:
        return "ff_bucket_advice_json" in self._optional

    def bucket_advice(self, device: int = 0, num_buckets: int = 0) -> dict[str, Any]:
        """ff_bucket_advice_json parsed: the advised rounding buckets for the
        request sizes ``device`` has seen (num_buckets <= 0: the library's
        bucket_advice_k option). Raises FragfreeError if the library lacks it."""
        fn = self._require("ff_bucket_advice_json", "bucket advice")
        return self._json_text(
            lambda buf, n: fn(device, num_buckets, buf, n),
            f"ff_bucket_advice_json(device={device}, num_buckets={num_buckets})",
        )

    def advise_sequence_buckets(
        self, lengths: Sequence[int], num_buckets: int, multiple_of: int
    ) -> dict[str, Any]:
        """ff_advise_sequence_buckets_json over ``lengths`` (non-negative
        ints) parsed. Raises FragfreeError if the library lacks it, and
        FragfreeValueError for arguments it refuses."""
        fn = self._require("ff_advise_sequence_buckets_json", "sequence bucketing")
        n = len(lengths)
        array = (ctypes.c_int64 * max(n, 1))(*lengths)
        what = (
            f"ff_advise_sequence_buckets_json(n={n}, num_buckets={num_buckets}, "
            f"multiple_of={multiple_of})"
        )
        try:
            return self._json_text(
                lambda buf, size: fn(array, n, num_buckets, multiple_of, buf, size), what
            )
        except FragfreeError as e:
            if "ff_advise_sequence_buckets_json:" in str(e):
                raise FragfreeValueError(str(e)) from e
            raise

    @property
    def has_record_history(self) -> bool:
        return "ff_record_history" in self._optional

    def record_history(self, enabled: bool, max_entries: int, device: int = -1) -> bool:
        """Forward a _record_memory_history request; False if unsupported."""
        fn = self._optional.get("ff_record_history")
        if fn is None:
            return False
        max_entries = max(0, min(int(max_entries), 2**63 - 1))
        self._check(fn(device, 1 if enabled else 0, max_entries), "ff_record_history")
        return True


_LOADED: dict[str, Library] = {}
_LOAD_LOCK = threading.Lock()


def load_library(path: str | None = None) -> Library:
    """The process's Library for ``path`` (default: ``find_library()``),
    loaded once and kept alive for the life of the process."""
    path = path or find_library()
    if os.sep in path:  # a file path (find_library("fragfree") may give a bare soname)
        path = os.path.realpath(path)
    with _LOAD_LOCK:
        lib = _LOADED.get(path)
        if lib is None:
            lib = _LOADED[path] = Library(path)
        return lib
