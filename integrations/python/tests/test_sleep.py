"""Sleep and wake from Python (fragfree._sleep over ctypes) on the host
backend, whose device memory is real host memory: region tags, pause with a
CPU backup, resume at the same addresses, errors, and the all-or-nothing
resume when memory is short (docs/sleep.md)."""

from __future__ import annotations

import ctypes

import pytest

from fragfree import _sleep
from fragfree._errors import FragfreeError, FragfreeValueError

MiB = 1 << 20


def _tag_info(lib, name):
    info = _sleep.paused(lib=lib)
    for device in info["devices"]:
        for tag in device["tags"]:
            if tag["tag"] == name:
                return tag
    return None


def _pattern(n, seed):
    return bytes((seed + i * 7) & 0xFF for i in range(256)) * (n // 256)


def test_pause_resume_keeps_contents_and_addresses(host_lib):
    with _sleep.region("py-weights", lib=host_lib):
        ptrs = [host_lib.malloc(3 * MiB, 0), host_lib.malloc(MiB, 0)]
    untagged = host_lib.malloc(2 * MiB, 0)
    blobs = [_pattern(3 * MiB, 1), _pattern(MiB, 2)]
    for p, b in zip(ptrs, blobs):
        ctypes.memmove(p, b, len(b))
    ctypes.memmove(untagged, blobs[1], MiB)
    footprint = _tag_info(host_lib, "py-weights")["mapped_bytes"]
    mapped_before = host_lib.stats(0)["mapped_bytes.current"]

    _sleep.pause("py-weights", backup="cpu", lib=host_lib)
    tag = _tag_info(host_lib, "py-weights")
    assert tag["paused"] and tag["mapped_bytes"] == 0
    assert tag["live_allocations"] == 2 and tag["backup_bytes"] >= 4 * MiB
    stats = host_lib.stats(0)
    assert stats["mapped_bytes.current"] == mapped_before - footprint
    assert stats["paused_bytes"] == 4 * MiB and stats["paused_tags"] == 1
    assert "py-weights" in _sleep.paused(lib=host_lib)["known_tags"]
    host_lib.check_invariants(0)
    assert ctypes.string_at(untagged, MiB) == blobs[1]  # untouched

    _sleep.resume(["py-weights"], lib=host_lib)
    for p, b in zip(ptrs, blobs):
        assert host_lib.allocation_size(p, 0) == len(b)
        assert ctypes.string_at(p, len(b)) == b
    assert _tag_info(host_lib, "py-weights")["mapped_bytes"] == footprint
    assert host_lib.stats(0)["backup_bytes"] == 0
    host_lib.check_invariants(0)
    for p in ptrs + [untagged]:
        host_lib.free(p, 0)


def test_allocating_into_a_paused_tag_raises_and_freeing_is_allowed(host_lib):
    with _sleep.region("py-kv", lib=host_lib):
        p = host_lib.malloc(MiB, 0)
        q = host_lib.malloc(MiB, 0)
    _sleep.pause(["py-kv"], lib=host_lib)  # no backup
    with _sleep.region("py-kv", lib=host_lib):
        with pytest.raises(FragfreeError, match="paused"):
            host_lib.malloc(MiB, 0)
        with _sleep.region("py-other", lib=host_lib):  # nested: another tag
            r = host_lib.malloc(MiB, 0)
    host_lib.free(p, 0)  # bookkeeping only while paused
    host_lib.check_invariants(0)
    _sleep.resume(lib=host_lib)  # every paused tag
    ctypes.memset(q, 1, MiB)  # mapped again
    host_lib.free(q, 0)
    host_lib.free(r, 0)
    host_lib.check_invariants(0)


def test_bad_arguments(host_lib):
    with pytest.raises(FragfreeValueError, match="never used in a region"):
        _sleep.pause("py-never-used", lib=host_lib)
    with pytest.raises(FragfreeError, match="backup"):
        _sleep.pause(backup="gpu", lib=host_lib)
    with pytest.raises(FragfreeError, match="empty"):
        _sleep.resume([], lib=host_lib)
    with pytest.raises(TypeError):
        _sleep.resume([1], lib=host_lib)
    with pytest.raises(FragfreeValueError):
        with _sleep.region("", lib=host_lib):
            pass


def test_resume_without_room_raises_an_out_of_memory_error(host_lib):
    with _sleep.region("py-big", lib=host_lib):
        p = host_lib.malloc(64 * MiB, 0)
    blob = _pattern(64 * MiB, 9)
    ctypes.memmove(p, blob, len(blob))
    _sleep.pause("py-big", backup="cpu", lib=host_lib)
    host_lib.empty_cache(0)
    # Something else fills the device meanwhile.
    fillers = []
    try:
        while True:
            fillers.append(host_lib.malloc(32 * MiB, 0))
    except FragfreeError:
        pass
    try:
        import torch  # noqa: F401

        expected = torch.cuda.OutOfMemoryError
    except Exception:
        expected = MemoryError
    with pytest.raises(expected, match="stay paused"):
        _sleep.resume("py-big", lib=host_lib)
    assert _tag_info(host_lib, "py-big")["paused"]
    host_lib.check_invariants(0)
    for f in fillers:
        host_lib.free(f, 0)
    _sleep.resume("py-big", lib=host_lib)
    assert ctypes.string_at(p, len(blob)) == blob
    host_lib.free(p, 0)
    host_lib.check_invariants(0)


def test_resume_keep_backup_reuses_pinned_memory_until_released(host_lib):
    with _sleep.region("py-keep", lib=host_lib):
        ptrs = [host_lib.malloc(3 * MiB, 0), host_lib.malloc(MiB, 0)]
    for cycle in range(3):
        blobs = [_pattern(3 * MiB, 10 + cycle), _pattern(MiB, 20 + cycle)]
        for p, b in zip(ptrs, blobs):
            ctypes.memmove(p, b, len(b))
        _sleep.pause("py-keep", backup="cpu", lib=host_lib)
        stats = host_lib.stats(0)
        backup = stats["backup_bytes"]
        assert backup >= 4 * MiB
        assert stats["kept_backup_bytes"] == 0  # a kept backup is taken whole
        _sleep.resume("py-keep", keep_backup=True, lib=host_lib)
        for p, b in zip(ptrs, blobs):
            assert ctypes.string_at(p, len(b)) == b
        stats = host_lib.stats(0)
        assert stats["backup_bytes"] == 0 and stats["kept_backup_bytes"] == backup
        host_lib.check_invariants(0)
    assert _sleep.release_backup(lib=host_lib) == backup
    assert host_lib.stats(0)["kept_backup_bytes"] == 0
    assert _sleep.release_backup(lib=host_lib) == 0
    # Without keep_backup the host copy is freed on resume.
    _sleep.pause("py-keep", backup="cpu", lib=host_lib)
    _sleep.resume("py-keep", lib=host_lib)
    assert host_lib.stats(0)["kept_backup_bytes"] == 0
    for p in ptrs:
        host_lib.free(p, 0)
