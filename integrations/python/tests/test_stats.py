"""Host tests of the stats shapes: libfragfree's JSON on the host backend has
every key torch.cuda.memory_stats() / memory_summary() use, and nesting /
flattening behave as torch.cuda.memory does (fragfree/_stats.py)."""

from __future__ import annotations

import collections
import json
import re

import pytest

import fragfree
from conftest import run_python
from fragfree import _stats

STAT_ARRAYS = ["allocation", "segment", "active", "inactive_split", "allocated_bytes",
               "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes"]
POOLS = ["all", "small_pool", "large_pool"]
METRICS = ["current", "peak", "allocated", "freed"]
SCALARS = ["num_alloc_retries", "num_ooms", "max_split_size", "num_sync_all_streams",
           "num_device_alloc", "num_device_free"]


def torch_keys() -> list[str]:
    """Every key of torch.cuda.memory_stats() on PyTorch 2.11's native allocator
    (DeviceStats, c10/core/CachingDeviceAllocator.h), except the 2.12+ num_oom_rejections."""
    keys = [f"{g}.{p}.{m}" for g in STAT_ARRAYS for p in POOLS for m in METRICS]
    keys += [f"{g}.{m}" for g in ("oversize_allocations", "oversize_segments") for m in METRICS]
    return keys + SCALARS


@pytest.fixture()
def live(host_lib):
    """A few live allocations of both pools while the test runs."""
    ptrs = [host_lib.malloc(n, 0, None) for n in (100, 4096, 700_000, 3 << 20, 9 << 20)]
    yield ptrs
    for p in ptrs:
        host_lib.free(p)


def test_every_torch_key_is_present_with_int_values(host_lib, live):
    flat = host_lib.stats(0)
    missing = [k for k in torch_keys() if k not in flat]
    assert not missing
    for k in torch_keys():
        assert isinstance(flat[k], int) and not isinstance(flat[k], bool), (k, flat[k])


def test_memory_summary_keys_are_a_subset(host_lib, live):
    flat = host_lib.stats(0)
    assert set(_stats.TORCH_SUMMARY_KEYS) <= set(flat)
    # memory_summary formats these with integer format specs.
    "{num_ooms:<12d} {num_alloc_retries:<8d}".format(**flat)


def test_fragfree_keys_present(host_lib, live):
    flat = host_lib.stats(0)
    for k in ["mapped_bytes.current", "reclaimable_bytes", "largest_free_block",
              "pages_remapped", "cached_free_bytes", "fragmentation.u_alloc",
              "fragmentation.u_active", "fragmentation.external", "fragmentation.waste_bytes"]:
        assert k in flat, k
    assert 0.0 <= flat["fragmentation.u_alloc"] <= 1.0


def test_stats_follow_allocations(host_lib):
    before = host_lib.stats(0)
    p = host_lib.malloc(5 << 20, 0, None)
    during = host_lib.stats(0)
    host_lib.free(p)
    after = host_lib.stats(0)
    grow = during["allocated_bytes.all.current"] - before["allocated_bytes.all.current"]
    assert grow >= 5 << 20
    assert during["requested_bytes.all.current"] - before["requested_bytes.all.current"] == 5 << 20
    assert during["allocation.all.current"] == before["allocation.all.current"] + 1
    assert after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
    assert during["allocated_bytes.all.peak"] >= during["allocated_bytes.all.current"]
    assert after["allocated_bytes.all.freed"] - before["allocated_bytes.all.freed"] == grow


def test_one_figure_is_the_jsons(host_lib, live):
    # What pluggable mode's memory_allocated() and its kind read (ff_get_stat).
    flat = host_lib.stats(0)
    for key in torch_keys() + ["mapped_bytes.current", "pages_mapped", "cached_free_bytes"]:
        assert host_lib.stat(0, key) == flat[key], key
    with pytest.raises(fragfree.FragfreeError, match="allocated_bytes.all.largest"):
        host_lib.stat(0, "allocated_bytes.all.largest")


def test_reset_peak_and_accumulated(host_lib):
    p = host_lib.malloc(8 << 20, 0, None)
    host_lib.free(p)
    host_lib.reset_peak_stats(0)
    s = host_lib.stats(0)
    assert s["allocated_bytes.all.peak"] == s["allocated_bytes.all.current"]
    host_lib.reset_accumulated_stats(0)
    s = host_lib.stats(0)
    assert s["allocated_bytes.all.allocated"] == 0 and s["allocated_bytes.all.freed"] == 0
    assert s["num_ooms"] == 0


def test_public_stats_api(host_lib, live):
    flat = fragfree.stats()
    assert flat["allocated_bytes.all.current"] > 0
    nested = fragfree.stats_nested(0)
    assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"]
    assert nested["fragmentation"]["u_alloc"] == flat["fragmentation.u_alloc"]
    for device in (0, "cuda", "cuda:0"):
        assert fragfree.stats(device)["allocation.all.current"] == flat["allocation.all.current"]
    with pytest.raises(ValueError, match="cuda"):
        fragfree.stats("cpu")


def test_memory_summary_text(host_lib, live):
    text = fragfree.memory_summary()
    assert "U_alloc" in text and "external fragmentation" in text
    assert re.search(r"U_alloc\s+= peak allocated / peak reserved = \d\.\d{3}", text)


def test_summary_verdict():
    # The verdict is the library's; the summary prints what it is given.
    base = {"allocated_bytes.all.current": 10, "reserved_bytes.all.current": 100,
            "fragmentation.gap_now": 0.9}
    assert "SEVERE" in _stats.summary_text(dict(base, **{"fragmentation.gap_severity": 2}), 0)
    assert "-> moderate" in _stats.summary_text(dict(base, **{"fragmentation.gap_severity": 1}), 0)
    assert "-> low" in _stats.summary_text(dict(base, **{"fragmentation.gap_severity": 0}), 0)
    assert "no verdict" in _stats.summary_text(base, 0)
    assert "nothing reserved" in _stats.summary_text({}, 0)


def test_library_reports_the_verdict(host_lib):
    """libfragfree's stats carry the verdicts, judged by one rule: a gap
    between allocated and reserved memory above 20% is severe, below 10% low."""
    p = host_lib.malloc(8 << 20, 0, None)
    try:
        flat = host_lib.stats(0)
    finally:
        host_lib.free(p)
    for key, gap_key in (("fragmentation.gap_severity", "fragmentation.gap_now"),
                         ("fragmentation.peak_gap_severity", "fragmentation.peak_gap")):
        gap = flat[gap_key]
        want = 2 if gap > 0.20 else 1 if gap >= 0.10 else 0
        assert flat[key] == want, (key, gap, flat[key])
    # Every value stays a number, as in torch.cuda.memory_stats().
    assert all(isinstance(v, (int, float)) for v in flat.values())
    level = fragfree.stats(0)["fragmentation.gap_severity"]
    text = fragfree.memory_summary(0)
    assert ("SEVERE" if level == 2 else f"-> {_stats.VERDICT_NAMES[level]}") in text


# --- nesting and flattening ------------------------------------------------------


def reference_flatten(nested):
    """torch.cuda.memory.memory_stats()'s documented behaviour, written
    independently: dotted paths, tuple keys joined with "_", sorted."""
    out = []
    todo = [((), nested)]
    while todo:
        path, node = todo.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                part = "_".join(str(x) for x in k) if isinstance(k, tuple) else str(k)
                todo.append((path + (part,), v))
        else:
            out.append((".".join(path), node))
    return collections.OrderedDict(sorted(out))


def test_flatten_matches_torch_on_library_stats(host_lib, live):
    flat = host_lib.stats(0)
    nested = _stats.nest(flat)
    ours = _stats.flatten(nested)
    assert isinstance(ours, collections.OrderedDict)
    assert ours == reference_flatten(nested)
    assert list(ours.items()) == sorted(flat.items())


def test_nest_shape():
    flat = {
        "allocated_bytes.all.current": 1,
        "allocated_bytes.all.peak": 2,
        "num_ooms": 0,
        "reserved_bytes_by_private_pools.0_1.all.current": 7,
        "fragmentation.u_alloc": 0.5,
    }
    nested = _stats.nest(flat)
    assert nested["allocated_bytes"] == {"all": {"current": 1, "peak": 2}}
    assert nested["num_ooms"] == 0
    # MemPool ids are tuple keys in torch's nested dict.
    assert nested["reserved_bytes_by_private_pools"] == {(0, 1): {"all": {"current": 7}}}
    assert _stats.flatten(nested) == reference_flatten(nested)
    assert dict(_stats.flatten(nested)) == flat


def test_nest_keeps_conflicting_keys_flat():
    flat = {"a": 1, "a.b": 2}
    nested = _stats.nest(flat)
    assert nested["a"] == 1 and nested["a.b"] == 2


def test_flatten_edge_cases():
    assert _stats.flatten({}) == collections.OrderedDict()
    nested = {"z": {"y": 1}, "a": 2, (3, 4): {"k": 5}}
    assert _stats.flatten(nested) == reference_flatten(nested)
    assert list(_stats.flatten(nested)) == ["3_4.k", "a", "z.y"]


def test_format_size_matches_torch_oom_units():
    assert _stats.format_size(1024) == "1024 bytes"
    assert _stats.format_size(1536) == "1.50 KiB"
    assert _stats.format_size(3 << 20) == "3.00 MiB"
    assert _stats.format_size(5 << 30) == "5.00 GiB"


# --- what moving pages cost ----------------------------------------------------


def test_summary_states_page_moves_and_the_key_that_trades_them():
    assert "page moves" not in _stats.summary_text({"pages_remapped": 0}, 0)
    text = _stats.summary_text({"pages_remapped": 200, "map_ns": 1_500_000,
                                "set_access_ns": 7_700_000, "unmap_ns": 8_400_000}, 0)
    assert "page moves 200   driver ms: map 1.5 / set access 7.7 / unmap 8.4" in text
    assert "reclaim_before_grow:False" in text
    assert "move_time_budget" in text
    assert "moving took" not in text  # a library without the budget's stats
    text = _stats.summary_text({"pages_remapped": 30, "move_ns": 2_500_000,
                                "move_budget_pages": 170, "page_size": 2 << 20}, 0)
    assert ("moving took 2.5 ms; the move time budget created 170 pages (340.00 MiB) "
            "instead of moving cached ones") in text


@pytest.mark.parametrize("reclaim, moves", [("True", True), ("False", False)])
def test_library_summary_shows_moves_only_when_pages_moved(lib_path, reclaim, moves):
    # A 12 MiB request after an 8 MiB hole: reclaiming first moves the hole's
    # pages under it; without reclaim it gets new pages.
    r = run_python(
        """
        import json, fragfree
        lib = fragfree.library()
        a, b = lib.malloc(8 << 20), lib.malloc(8 << 20)
        lib.free(a)
        c = lib.malloc(12 << 20)
        print(json.dumps([lib.stats(0)["pages_remapped"], fragfree.memory_summary(0)]))
        lib.free(b)
        lib.free(c)
        """,
        env={"FRAGFREE_CONF": f"backend:host,host_capacity_mb:64,reclaim_before_grow:{reclaim}",
             "FRAGFREE_LIBRARY": lib_path})
    assert r.returncode == 0, r.stdout + r.stderr
    remapped, summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert (remapped > 0) == moves, (remapped, summary)
    assert ("page moves" in summary) == moves, summary
