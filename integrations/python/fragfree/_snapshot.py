"""Memory snapshots in the torch.cuda.memory._snapshot() shape, and their files.

Owns: assembling one snapshot dict from libfragfree's per-device
ff_snapshot_json (``{"segments": [...], "device_traces": [[...]]}``, shaped by
the library: allocator/obs/snapshot.h), writing it
as a pickle that PyTorch's tools read (``python -m torch.cuda._memory_viz
trace_plot``, pytorch.org/memory_viz) or as JSON, and ``check_pickle_opcodes``,
which verifies a pickle uses only the opcodes MemoryViz's JavaScript unpickler
accepts (torch/utils/viz/MemoryViz.js).

The dict contains only dict/list/tuple/str/int/float/bool/None (no OrderedDict,
no sets), so ``pickle`` protocol 4 emits only accepted opcodes.
"""

from __future__ import annotations

import json
import os
import pickle
import pickletools
import warnings
from typing import Any, Iterable

__all__ = [
    "build_snapshot",
    "write_snapshot",
    "check_pickle_opcodes",
    "MEMORYVIZ_OPCODES",
    "PICKLE_PROTOCOL",
]

PICKLE_PROTOCOL = 4

# Opcodes MemoryViz.js's unpickler implements (torch/utils/viz/MemoryViz.js).
MEMORYVIZ_OPCODES = frozenset(
    {
        "PROTO", "FRAME", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "MARK",
        "APPEND", "APPENDS", "SETITEM", "SETITEMS", "DICT", "LIST", "TUPLE",
        "TUPLE1", "TUPLE2", "TUPLE3", "NONE", "NEWTRUE", "NEWFALSE", "BININT1",
        "BININT2", "BININT", "LONG1", "BINFLOAT", "SHORT_BINUNICODE", "BINUNICODE",
        "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET", "STOP",
    }
)

_PAIR_KEYS = ("segment_pool_id", "pool_id")


def _normalise(value: Any) -> Any:
    """Plain containers only; 2-element pool ids as tuples (as torch emits)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            v = _normalise(v)
            if k in _PAIR_KEYS and isinstance(v, list) and len(v) == 2:
                v = tuple(v)
            out[str(k)] = v
        return out
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def build_snapshot(
    lib: Any,
    devices: Iterable[int],
    num_devices: int,
    include_traces: bool = True,
) -> dict[str, Any]:
    """One snapshot dict over ``devices`` (ints), with ``device_traces`` holding
    one list per device index in range(num_devices). ``lib`` is a
    fragfree._library.Library. Without ff_snapshot_json the snapshot is empty
    (and a warning says why)."""
    devices = sorted(set(devices))
    num_devices = max([num_devices] + [d + 1 for d in devices] + [1])
    snap: dict[str, Any] = {
        "segments": [],
        "device_traces": [[] for _ in range(num_devices)],
    }
    if not lib.has_snapshot:
        warnings.warn(
            "fragfree: this libfragfree has no ff_snapshot_json, so memory snapshots are "
            "empty; update the library.",
            RuntimeWarning,
            stacklevel=3,
        )
        return snap
    for d in devices:
        # The library's JSON is already in torch's shape (every segment names
        # its device; device_traces holds one list per device up to d): this
        # only merges the devices and turns JSON into Python values.
        part = lib.snapshot(d) or {}
        snap["segments"].extend(_normalise(seg) for seg in part.get("segments", []))
        traces = part.get("device_traces") or []
        if include_traces and d < len(traces):
            snap["device_traces"][d] = _normalise(traces[d])
        for key, value in part.items():
            if key not in ("segments", "device_traces") and key not in snap:
                snap[key] = _normalise(value)
    return snap


def write_snapshot(snapshot: dict[str, Any], path: str | os.PathLike) -> str:
    """Writes ``snapshot``: JSON if ``path`` ends in .json, else a pickle
    (protocol 4, MemoryViz-readable). Returns the path."""
    path = os.fspath(path)
    if path.endswith(".json"):
        with open(path, "w") as f:
            json.dump(snapshot, f)
    else:
        with open(path, "wb") as f:
            pickle.dump(snapshot, f, protocol=PICKLE_PROTOCOL)
    return path


def check_pickle_opcodes(data: bytes) -> None:
    """Raises ValueError naming any opcode MemoryViz cannot read, or a
    protocol other than 2..4 (the range the viewer shipped with torch reads)."""
    bad: dict[str, int] = {}
    for op, arg, _pos in pickletools.genops(data):
        if op.name not in MEMORYVIZ_OPCODES:
            bad[op.name] = bad.get(op.name, 0) + 1
        elif op.name == "PROTO" and not (2 <= int(arg) <= 4):
            bad[f"PROTO {arg}"] = 1
    if bad:
        raise ValueError(
            "pickle uses opcodes MemoryViz does not accept: "
            + ", ".join(f"{k} x{v}" for k, v in sorted(bad.items()))
        )
