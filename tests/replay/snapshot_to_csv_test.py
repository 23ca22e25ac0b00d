"""Tests for bench/replay/snapshot_to_csv.py (stdlib unittest; no torch).

Thread-safety: single-threaded tests.
"""

import gzip
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "replay", "snapshot_to_csv.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import snapshot_to_csv  # noqa: E402


def entry(action, addr, size, stream=0, time_us=1):
    return {"action": action, "addr": addr, "size": size, "stream": stream,
            "time_us": time_us, "frames": []}


SNAPSHOT = {
    "segments": [],
    "device_traces": [[
        entry("segment_alloc", 1 << 40, 2 << 20),
        entry("alloc", 1 << 40, 1000, 7, 10),
        entry("free_requested", 1 << 40, 1000, 7, 11),
        entry("free_completed", 1 << 40, 1000, 7, 12),
        {"action": "oom", "device_free": 5, "size": 9, "stream": 0,
         "time_us": 13},
    ], []],
    "allocator_settings": {},
}


class SnapshotToCsvTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def write_pickle(self, obj, protocol=4):
        path = os.path.join(self.dir, "snap.pickle")
        with open(path, "wb") as f:
            pickle.dump(obj, f, protocol=protocol)
        return path

    def test_converts_to_csv_and_gzip(self):
        for protocol in (2, 4):
            path = self.write_pickle(SNAPSHOT, protocol)
            for name in ("out.csv", "out.csv.gz"):
                out = os.path.join(self.dir, name)
                dev, count = snapshot_to_csv.convert(path, out)
                self.assertEqual((dev, count), (0, 3))
                opener = gzip.open if name.endswith(".gz") else open
                with opener(out, "rt") as f:
                    self.assertEqual(
                        f.read(),
                        "action,addr,size,stream,time_us\n"
                        f"alloc,{1 << 40},1000,7,10\n"
                        f"free_requested,{1 << 40},1000,7,11\n"
                        f"free_completed,{1 << 40},1000,7,12\n")

    def test_refuses_code(self):
        class Evil:
            def __reduce__(self):
                return (os.system, ("true",))
        path = self.write_pickle({"device_traces": [[Evil()]]})
        with self.assertRaisesRegex(snapshot_to_csv.SnapshotError,
                                    "refusing to load"):
            snapshot_to_csv.convert(path, os.path.join(self.dir, "x.csv"))

    def test_bad_snapshots(self):
        cases = [
            ({"segments": []}, "no 'device_traces'"),
            ({"device_traces": [[], []]}, "every device trace is empty"),
            ({"device_traces": [[entry("alloc", 1, 2)],
                                [entry("alloc", 1, 2)]]}, "choose one"),
            ({"device_traces": [[{"action": "alloc", "addr": 1}]]},
             "lacks an integer"),
            ({"device_traces": "x"}, "not a list of lists"),
        ]
        for obj, message in cases:
            path = self.write_pickle(obj)
            with self.assertRaisesRegex(snapshot_to_csv.SnapshotError,
                                        message):
                snapshot_to_csv.convert(path, os.path.join(self.dir, "x.csv"))
        path = os.path.join(self.dir, "trunc.pickle")
        with open(path, "wb") as f:
            f.write(pickle.dumps(SNAPSHOT)[:40])
        with self.assertRaisesRegex(snapshot_to_csv.SnapshotError,
                                    "not a readable pickle"):
            snapshot_to_csv.convert(path, os.path.join(self.dir, "x.csv"))

    def test_device_choice(self):
        obj = {"device_traces": [[entry("alloc", 1, 2)],
                                 [entry("alloc", 3, 4)]]}
        path = self.write_pickle(obj)
        out = os.path.join(self.dir, "d1.csv")
        self.assertEqual(snapshot_to_csv.convert(path, out, device=1), (1, 1))
        with self.assertRaisesRegex(snapshot_to_csv.SnapshotError,
                                    "no device 2"):
            snapshot_to_csv.convert(path, out, device=2)

    def test_command_line(self):
        path = self.write_pickle(SNAPSHOT)
        out = os.path.join(self.dir, "cli.csv")
        r = subprocess.run([sys.executable, SCRIPT, path, "-o", out],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("3 entries", r.stderr)
        r = subprocess.run([sys.executable, SCRIPT,
                            os.path.join(self.dir, "missing.pickle")],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("missing.pickle", r.stderr)


if __name__ == "__main__":
    unittest.main()
