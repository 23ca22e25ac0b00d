"""Statistics shapes and text: flat <-> nested dicts, and fragfree's summary.

libfragfree reports stats as one flat JSON object whose keys are exactly
torch.cuda.memory_stats()'s ("allocated_bytes.all.current", ...) plus
fragfree's own ("mapped_bytes.current", "fragmentation.u_alloc", ...).
``nest`` builds the memory_stats_as_nested_dict() shape from it and
``flatten`` is torch.cuda.memory.memory_stats()'s algorithm (PyTorch 2.11,
torch/cuda/memory.py) so that flatten(nest(flat)) == sorted(flat).
``summary_text`` is fragfree.memory_summary(): a short report with U_alloc
and the fragmentation verdict. The verdict is libfragfree's
("fragmentation.gap_severity" in the stats: 0 low, 1 moderate, 2 severe; a gap
between allocated and reserved memory above 20% means fragmentation is
severe); this module only names and prints it. Pure Python; no torch, no library calls.
"""

from __future__ import annotations

import collections
import re
from typing import Any, Mapping

__all__ = ["nest", "flatten", "format_size", "summary_text", "TORCH_SUMMARY_KEYS",
           "VERDICT_NAMES"]

# The names of libfragfree's "fragmentation.gap_severity" levels, in order
# (GapVerdict, allocator/obs/stats.h, which alone decides the level).
VERDICT_NAMES: tuple[str, ...] = ("low", "moderate", "severe")

_POOL_ID_RE = re.compile(r"^(\d+)_(\d+)$")
# Nested dicts keyed by MemPool id tuples in torch (flattened as "a_b").
_TUPLE_KEYED = {"reserved_bytes_by_private_pools"}


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The nested form of a flat stats dict: "a.b.c": v -> {"a": {"b": {"c": v}}}.
    Under ``reserved_bytes_by_private_pools`` the pool key "0_1" becomes the
    tuple (0, 1), as torch returns it."""
    out: dict[Any, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        node = out
        path_ok = True
        for i, part in enumerate(parts[:-1]):
            k: Any = part
            if i > 0 and parts[i - 1] in _TUPLE_KEYED:
                m = _POOL_ID_RE.match(part)
                if m:
                    k = (int(m.group(1)), int(m.group(2)))
            child = node.get(k)
            if child is None:
                child = node[k] = {}
            elif not isinstance(child, dict):
                path_ok = False  # "a" is a scalar and "a.b" exists: keep flat
                break
            node = child
        if path_ok and not isinstance(node.get(parts[-1]), dict):
            node[parts[-1]] = value
        else:
            out[key] = value
    return out


def flatten(nested: Mapping[Any, Any]) -> "collections.OrderedDict[str, Any]":
    """torch.cuda.memory.memory_stats()'s flattening: keys joined with ".",
    tuple keys joined with "_", then sorted into an OrderedDict."""
    leaves: list[tuple[str, Any]] = []

    def key_text(key: Any) -> str:
        if isinstance(key, tuple):
            return "_".join(map(str, key))
        return key if isinstance(key, str) else str(key)

    def walk(path: str, node: Any) -> None:
        if not isinstance(node, dict):
            leaves.append((path, node))
            return
        for key, child in node.items():
            walk(f"{path}.{key_text(key)}" if path else key_text(key), child)

    walk("", nested)
    leaves.sort()
    return collections.OrderedDict(leaves)


# Every key torch.cuda.memory_summary() indexes directly (a KeyError otherwise),
# from torch/cuda/memory.py (2.11).
def _summary_keys() -> list[str]:
    keys = []
    for group in (
        "allocated_bytes", "active_bytes", "requested_bytes", "reserved_bytes",
        "inactive_split_bytes", "allocation", "active", "segment", "inactive_split",
    ):
        for pool in ("all", "large_pool", "small_pool"):
            for metric in ("current", "peak", "allocated", "freed"):
                keys.append(f"{group}.{pool}.{metric}")
    for group in ("oversize_allocations", "oversize_segments"):
        for metric in ("current", "peak", "allocated", "freed"):
            keys.append(f"{group}.{metric}")
    keys += ["num_ooms", "num_alloc_retries"]
    return keys


TORCH_SUMMARY_KEYS: tuple[str, ...] = tuple(_summary_keys())


def format_size(n: float) -> str:
    """Bytes in binary units, as PyTorch's OOM message writes them."""
    n = float(n)
    if abs(n) <= 1024:
        return f"{int(n)} bytes"
    for unit, scale in (("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30)):
        if abs(n) <= scale * 1024 or unit == "GiB":
            return f"{n / scale:.2f} {unit}"
    return f"{n / 2**30:.2f} GiB"  # pragma: no cover


def page_moves_lines(stats: dict[str, Any]) -> list[str]:
    """What moving pages has cost the allocating thread, and the key that
    trades memory for it, once any page has moved: each moved page is a
    cuMemMap + cuMemSetAccess at its new address and a cuMemUnmap of its old
    one, ~60-85 us of driver time on an H200, paid by whichever step is the
    CPU's (docs/design.md, Notes [Where pages come from], [Move time
    budget])."""
    moved = stats.get("pages_remapped", 0)
    if not moved:
        return []
    ms = {k: stats.get(f"{k}_ns", 0) / 1e6 for k in ("map", "set_access", "unmap")}
    lines = [
        f"  page moves {moved}   driver ms: map {ms['map']:.1f} / set access "
        f"{ms['set_access']:.1f} / unmap {ms['unmap']:.1f} (moved and new pages)",
    ]
    if "move_ns" in stats:
        grown = stats.get("move_budget_pages", 0) * stats.get("page_size", 0)
        lines.append(
            f"    moving took {stats['move_ns'] / 1e6:.1f} ms; the move time budget "
            f"created {stats.get('move_budget_pages', 0)} pages ({format_size(grown)}) "
            "instead of moving cached ones")
    lines.append(
        "    a step that waits on the CPU pays for each move; "
        "move_time_budget (default 0: create pages once any has moved recently) "
        "caps their share, "
        "reclaim_before_grow:False moves none (both keep more memory)")
    return lines


def summary_text(stats: Mapping[str, Any], device: int, header: str = "") -> str:
    """fragfree.memory_summary(): allocated/reserved, U_alloc, U_active, waste,
    external fragmentation and libfragfree's verdict on the gap between
    allocated and reserved memory ("fragmentation.gap_severity", now, and
    "fragmentation.peak_gap_severity", at the peak). A stats dict without the
    verdicts (a library that predates them) prints the gap without one."""

    def g(key: str, default: Any = 0) -> Any:
        return stats.get(key, default)

    alloc_cur, alloc_peak = g("allocated_bytes.all.current"), g("allocated_bytes.all.peak")
    res_cur, res_peak = g("reserved_bytes.all.current"), g("reserved_bytes.all.peak")
    req_cur, req_peak = g("requested_bytes.all.current"), g("requested_bytes.all.peak")
    u_alloc = g("fragmentation.u_alloc", (alloc_peak / res_peak) if res_peak else 0.0)
    u_active = g("fragmentation.u_active", 0.0)
    waste = g("fragmentation.waste_bytes", res_peak - alloc_peak)
    external = g("fragmentation.external", 0.0)
    gap_now = g("fragmentation.gap_now", (1 - alloc_cur / res_cur) if res_cur else 0.0)
    peak_gap = g("fragmentation.peak_gap", (1 - alloc_peak / res_peak) if res_peak else 0.0)

    def verdict(key: str, reserved: Any) -> str:
        if reserved == 0:
            return "nothing reserved"
        level = g(key, None)
        if level not in (0, 1, 2):
            return "no verdict from this library"
        return VERDICT_NAMES[level] if level < 2 else "SEVERE fragmentation"
    lines = [
        f"fragfree memory summary, device {device}" + (f" ({header})" if header else ""),
        f"  allocated      current {format_size(alloc_cur):>12}   peak {format_size(alloc_peak):>12}",
        f"  requested      current {format_size(req_cur):>12}   peak {format_size(req_peak):>12}",
        f"  reserved       current {format_size(res_cur):>12}   peak {format_size(res_peak):>12}"
        "   (physically mapped)",
        f"  cached free {format_size(g('cached_free_bytes')):>12}   reclaimable "
        f"{format_size(g('reclaimable_bytes'))}   largest free block "
        f"{format_size(g('largest_free_block'))}",
        f"  U_alloc  = peak allocated / peak reserved = {u_alloc:.3f}",
        f"  U_active = peak active / peak reserved    = {u_active:.3f}",
        f"  waste    = peak reserved - peak allocated = {format_size(waste)}",
        f"  external fragmentation = 1 - largest free / total free = {external:.3f}",
        f"  reserved but unallocated now: {100 * gap_now:.1f}% -> "
        f"{verdict('fragmentation.gap_severity', res_cur)}",
        f"  reserved but unallocated at the peak: {100 * peak_gap:.1f}% -> "
        f"{verdict('fragmentation.peak_gap_severity', res_peak)}",
        f"  OOMs {g('num_ooms')}   alloc retries {g('num_alloc_retries')}   pages mapped "
        f"{g('pages_mapped')} / unmapped {g('pages_unmapped')} / remapped {g('pages_remapped')}",
    ]
    lines += page_moves_lines(stats)
    limit = g("memory_limit_bytes")
    total = g("device_total_bytes")
    if total or limit:
        lines.append(
            f"  device total {format_size(total)}   free {format_size(g('device_free_bytes'))}"
            + (f"   fragfree limit {format_size(limit)}" if limit else "")
        )
    return "\n".join(lines) + "\n"
