"""Sleep and wake (docs/sleep.md): release the GPU memory of tagged tensors
while keeping every address, and map it back later.

Owns the Python face of ff_region_begin/ff_region_end, ff_pause, ff_resume and
ff_paused_json: ``region(tag)`` (a context manager; allocations made on this
thread inside it carry the tag), ``pause(tags=None, backup="none"|"cpu")``,
``resume(tags=None, keep_backup=False)``, ``release_backup()`` and
``paused()``. A resume that fails for lack of memory
raises ``torch.cuda.OutOfMemoryError`` when torch is importable, else
``SleepOutOfMemoryError`` (a ``FragfreeOutOfMemoryError``, so a MemoryError);
the tags then stay paused and nothing is lost.

Thread-safety: as the C API's: regions are per thread; pause and resume may be
called from any thread.
"""

from __future__ import annotations

import contextlib
import ctypes
from typing import Any, Iterable, Iterator

from ._errors import FF_ERR_OOM, FragfreeError, FragfreeOutOfMemoryError, error_for_status
from ._library import Library, load_library
from ._state import STATE

__all__ = [
    "region",
    "pause",
    "resume",
    "paused",
    "release_backup",
    "SleepOutOfMemoryError",
]

_BACKUPS = {"none": 0, "cpu": 1}
FF_RESUME_KEEP_BACKUP = 1


class SleepOutOfMemoryError(FragfreeOutOfMemoryError):
    """resume() could not map the paused memory back (raised when torch is not
    importable; with torch, torch.cuda.OutOfMemoryError is raised instead)."""


def _lib(lib: Library | None) -> Library:
    if lib is not None:
        return lib
    return STATE.lib if STATE.lib is not None else load_library()


def _fn(lib: Library, name: str) -> Any:
    return lib._require(name, f"fragfree.{name[3:]}")


def _tag_array(tags: str | Iterable[str] | None, what: str) -> tuple[Any, int]:
    """(char** or None, count) for the C call; None = every tag."""
    if tags is None:
        return None, 0
    names = [tags] if isinstance(tags, str) else list(tags)
    if not names:
        raise FragfreeError(f"{what}: tags is empty (pass None for every tag)")
    encoded = []
    for t in names:
        if not isinstance(t, str):
            raise TypeError(f"{what}: tags must be strings, got {type(t).__name__}")
        encoded.append(t.encode("utf-8"))
    return (ctypes.c_char_p * len(encoded))(*encoded), len(encoded)


def _raise(lib: Library, status: int, what: str) -> None:
    message = lib.last_error()
    if status == FF_ERR_OOM:
        text = f"{what} failed: {message}"
        try:
            import torch  # noqa: PLC0415 - optional

            oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
        except Exception:  # torch missing or broken: fragfree's own error
            oom = None
        if oom is not None:
            raise oom(text)
        raise SleepOutOfMemoryError(text, "FF_ERR_OOM")
    raise error_for_status(status, message, what)


@contextlib.contextmanager
def region(tag: str, *, lib: Library | None = None) -> Iterator[None]:
    """Allocations made on this thread inside the block carry ``tag`` (regions
    nest; the innermost tag applies). ``pause(tag)`` later releases their GPU
    memory; the tensors stay valid objects with the same addresses."""
    if not isinstance(tag, str):
        raise TypeError(f"region: tag must be a string, got {type(tag).__name__}")
    library = _lib(lib)
    status = _fn(library, "ff_region_begin")(tag.encode("utf-8"))
    if status != 0:
        _raise(library, status, f"fragfree.region({tag!r})")
    try:
        yield
    finally:
        status = _fn(library, "ff_region_end")()
        if status != 0:
            _raise(library, status, "fragfree.region: end")


def pause(tags: str | Iterable[str] | None = None, backup: str = "none", *,
          lib: Library | None = None) -> None:
    """Releases the GPU memory of the allocations tagged ``tags`` (a name, a
    list, or None for every tag), on every device, keeping their addresses.
    ``backup="cpu"`` copies their contents to host memory first (restored by
    resume); with ``"none"`` their contents are undefined after resume. Waits
    only for the streams that used that memory. Paused tags are skipped."""
    if backup not in _BACKUPS:
        raise FragfreeError(f"pause: backup must be 'none' or 'cpu', not {backup!r}")
    library = _lib(lib)
    array, n = _tag_array(tags, "pause")
    status = _fn(library, "ff_pause")(array, n, _BACKUPS[backup])
    if status != 0:
        _raise(library, status, f"fragfree.pause({tags!r}, backup={backup!r})")


def resume(tags: str | Iterable[str] | None = None, keep_backup: bool = False, *,
           lib: Library | None = None) -> None:
    """Maps memory under the paused ``tags`` again (None: every paused tag) at
    the same addresses and restores their CPU backups. All or nothing: when the
    device cannot hold them it raises torch.cuda.OutOfMemoryError (or
    SleepOutOfMemoryError without torch) and the tags stay paused.

    ``keep_backup=True`` keeps the backups' pinned host memory once restored,
    for the next ``pause(..., backup="cpu")`` of any tag to reuse (no pinning
    on the cycle: only the copies); it stays pinned until ``release_backup()``.
    """
    library = _lib(lib)
    array, n = _tag_array(tags, "resume")
    if keep_backup:
        status = _fn(library, "ff_resume_ex")(array, n, FF_RESUME_KEEP_BACKUP)
    else:
        status = _fn(library, "ff_resume")(array, n)
    if status != 0:
        _raise(library, status, f"fragfree.resume({tags!r}, keep_backup={keep_backup!r})")


def release_backup(*, lib: Library | None = None) -> int:
    """Frees the pinned host memory kept by ``resume(keep_backup=True)`` on
    every device (paused tags' backups are not touched); the bytes freed."""
    library = _lib(lib)
    freed = ctypes.c_size_t(0)
    status = _fn(library, "ff_release_backup")(ctypes.byref(freed))
    if status != 0:
        _raise(library, status, "fragfree.release_backup()")
    return int(freed.value)


def paused(device: int = -1, *, lib: Library | None = None) -> dict[str, Any]:
    """The tags and their state: ``{"devices": [{"device": 0, "tags": [{"tag",
    "paused", "live_bytes", "live_allocations", "mapped_bytes", "backup_bytes",
    "arenas"}]}], "known_tags": [...]}`` (device < 0: every device in use)."""
    library = _lib(lib)
    fn = _fn(library, "ff_paused_json")
    return library._json_call(fn, device, "ff_paused_json")
