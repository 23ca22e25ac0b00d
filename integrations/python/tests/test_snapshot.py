"""Host tests of snapshot assembly and files (fragfree/_snapshot.py): the
torch.cuda.memory._snapshot() shape, pickles MemoryViz can read, JSON."""

from __future__ import annotations

import collections
import json
import pickle

import pytest

import fragfree
from fragfree import _snapshot


class FakeLib:
    """Stands in for a Library whose ff_snapshot_json returns ``parts``."""

    def __init__(self, parts):
        self.parts = parts
        self.has_snapshot = True

    def snapshot(self, device):
        return self.parts[device]


SEGMENT = {
    "device": 0, "address": 0x7F0000000000, "total_size": 4 << 20, "allocated_size": 1 << 20,
    "active_size": 1 << 20, "requested_size": 1000000, "stream": 0, "segment_type": "large",
    "segment_pool_id": [0, 0], "is_expandable": True, "frames": [],
    "blocks": [
        {"address": 0x7F0000000000, "size": 1 << 20, "requested_size": 1000000,
         "state": "active_allocated", "frames": []},
        {"address": 0x7F0000100000, "size": 3 << 20, "requested_size": 0, "state": "inactive",
         "frames": []},
    ],
}
TRACE = [
    {"action": "segment_map", "addr": 0x7F0000000000, "size": 4 << 20, "stream": 0,
     "time_us": 1},
    {"action": "alloc", "addr": 0x7F0000000000, "size": 1000000, "stream": 0, "time_us": 2,
     "pool_id": [0, 0]},
]


def test_build_snapshot_shape():
    lib = FakeLib({0: {"segments": [SEGMENT], "device_traces": [TRACE]}})
    snap = _snapshot.build_snapshot(lib, [0], num_devices=2)
    assert set(snap) == {"segments", "device_traces"}
    assert len(snap["device_traces"]) == 2 and snap["device_traces"][1] == []
    seg = snap["segments"][0]
    assert seg["segment_pool_id"] == (0, 0)  # a tuple, as torch emits
    assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
    assert snap["device_traces"][0][1]["pool_id"] == (0, 0)


def test_per_device_trace_lists_and_extra_keys():
    seg1 = dict(SEGMENT, device=1)
    lib = FakeLib({
        0: {"segments": [SEGMENT], "device_traces": [TRACE, []]},
        1: {"segments": [seg1], "device_traces": [[], TRACE], "allocator_settings": {"x": 1}},
    })
    snap = _snapshot.build_snapshot(lib, [1, 0], num_devices=2)
    assert [s["device"] for s in snap["segments"]] == [0, 1]
    assert snap["device_traces"][0] == _snapshot._normalise(TRACE)
    assert snap["device_traces"][1] == _snapshot._normalise(TRACE)
    assert snap["allocator_settings"] == {"x": 1}


def test_traces_can_be_left_out():
    lib = FakeLib({0: {"segments": [SEGMENT], "device_traces": [TRACE]}})
    snap = _snapshot.build_snapshot(lib, [0], 1, include_traces=False)
    assert snap["device_traces"] == [[]]


def test_pickle_uses_only_memoryviz_opcodes(tmp_path):
    lib = FakeLib({0: {"segments": [SEGMENT], "device_traces": [TRACE]}})
    snap = _snapshot.build_snapshot(lib, [0], 1)
    path = _snapshot.write_snapshot(snap, tmp_path / "snap.pickle")
    data = open(path, "rb").read()
    _snapshot.check_pickle_opcodes(data)
    assert data[:2] == b"\x80\x04"  # protocol 4
    assert pickle.loads(data) == snap


def test_opcode_check_rejects_what_memoryviz_cannot_read():
    with pytest.raises(ValueError, match="EMPTY_SET"):
        _snapshot.check_pickle_opcodes(pickle.dumps({"s": {1, 2}}, protocol=4))
    with pytest.raises(ValueError, match="GLOBAL"):
        _snapshot.check_pickle_opcodes(pickle.dumps(collections.OrderedDict(a=1), protocol=4))
    with pytest.raises(ValueError, match="PROTO 5"):
        _snapshot.check_pickle_opcodes(pickle.dumps([1], protocol=5))
    _snapshot.check_pickle_opcodes(pickle.dumps({"big": 2**40, "neg": -5, "f": 0.5,
                                                 "t": (1, 2), "b": True, "n": None}, protocol=2))


def test_json_file(tmp_path):
    lib = FakeLib({0: {"segments": [SEGMENT], "device_traces": [TRACE]}})
    snap = _snapshot.build_snapshot(lib, [0], 1)
    path = _snapshot.write_snapshot(snap, tmp_path / "snap.json")
    assert json.load(open(path))["segments"][0]["total_size"] == 4 << 20


def test_library_snapshot(host_lib, tmp_path):
    """With the real library: a consistent snapshot if it has ff_snapshot_json,
    else an empty one and a warning saying so."""
    p = host_lib.malloc(3 << 20, 0, None)
    try:
        if not host_lib.has_snapshot:
            with pytest.warns(RuntimeWarning, match="ff_snapshot_json"):
                snap = fragfree.snapshot()
            assert snap == {"segments": [], "device_traces": [[]]}
            return
        snap = fragfree.snapshot()
        assert isinstance(snap["device_traces"], list) and len(snap["device_traces"]) >= 1
        live = [b for s in snap["segments"] for b in s["blocks"]
                if b["state"] == "active_allocated"]
        assert any(b["address"] == p for b in live)
        for seg in snap["segments"]:
            assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
            for key in ("device", "address", "total_size", "stream", "segment_type", "blocks"):
                assert key in seg
        path = fragfree.dump_snapshot(tmp_path / "lib.pickle")
        _snapshot.check_pickle_opcodes(open(path, "rb").read())
    finally:
        host_lib.free(p)
