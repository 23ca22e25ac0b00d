#!/usr/bin/env python3
"""Converts a PyTorch memory snapshot pickle into fragfree-replay's trace CSV.

A snapshot is what torch.cuda.memory._dump_snapshot(path) writes (or
torch.cuda.memory._snapshot() returns) after
torch.cuda.memory._record_memory_history(): a dict whose "device_traces" holds,
per device, a list of trace entries with the keys action, addr, size, stream and
time_us. This script keeps the entries fragfree-replay reads (alloc,
free_requested, free_completed) and writes them as

    action,addr,size,stream,time_us

(the format of data/traces/), gzip'd when the output name ends in .gz.

Pure standard library: torch is not needed. The unpickler refuses every class
and function reference (a snapshot holds only dicts, lists, strings and
numbers), so a crafted pickle cannot run code.

Usage:
    python3 snapshot_to_csv.py snapshot.pickle -o trace.csv.gz [--device N]
    fragfree-replay trace.csv.gz

Thread-safety: a command-line program; no shared state.
"""

import argparse
import gzip
import pickle
import sys

KEPT_ACTIONS = ("alloc", "free_requested", "free_completed")
HEADER = "action,addr,size,stream,time_us\n"


class SnapshotError(Exception):
    """A snapshot that cannot be converted; the message says why."""


class _DataOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise SnapshotError(
            f"refusing to load {module}.{name}: a memory snapshot holds only "
            "plain data")


def load_snapshot(stream):
    """Unpickles a snapshot from a binary file object."""
    try:
        return _DataOnlyUnpickler(stream).load()
    except SnapshotError:
        raise
    except Exception as e:  # truncated or not a pickle at all
        raise SnapshotError(f"not a readable pickle: {e}") from e


def device_traces(snapshot):
    """Returns the list of per-device trace lists of a snapshot."""
    if isinstance(snapshot, dict) and "device_traces" in snapshot:
        traces = snapshot["device_traces"]
    else:
        raise SnapshotError(
            "no 'device_traces' in the snapshot (was "
            "torch.cuda.memory._record_memory_history() enabled?)")
    if not isinstance(traces, list) or not all(
            isinstance(t, list) for t in traces):
        raise SnapshotError("'device_traces' is not a list of lists")
    return traces


def pick_device(traces, device):
    """The trace of `device`, or of the only device with entries if None."""
    if device is not None:
        if not 0 <= device < len(traces):
            raise SnapshotError(
                f"no device {device}: the snapshot has {len(traces)}")
        return device
    busy = [i for i, t in enumerate(traces) if t]
    if not busy:
        raise SnapshotError("every device trace is empty")
    if len(busy) > 1:
        raise SnapshotError(
            f"devices {busy} all have entries: choose one with --device")
    return busy[0]


def write_csv(entries, out):
    """Writes the kept entries to the text stream `out`; returns their count."""
    out.write(HEADER)
    count = 0
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise SnapshotError(f"trace entry {i} is not a dict")
        action = e.get("action")
        if action not in KEPT_ACTIONS:
            continue
        try:
            fields = [int(e["addr"]), int(e["size"]), int(e["stream"]),
                      int(e["time_us"])]
        except (KeyError, TypeError, ValueError) as err:
            raise SnapshotError(
                f"trace entry {i} ({action}) lacks an integer "
                f"addr/size/stream/time_us: {err!r}") from err
        out.write(f"{action},{fields[0]},{fields[1]},{fields[2]},{fields[3]}\n")
        count += 1
    return count


def convert(snapshot_path, out_path, device=None):
    """Converts one file; returns (device, entries written)."""
    with open(snapshot_path, "rb") as f:
        snapshot = load_snapshot(f)
    traces = device_traces(snapshot)
    dev = pick_device(traces, device)
    opener = gzip.open if out_path.endswith(".gz") else open
    if out_path == "-":
        return dev, write_csv(traces[dev], sys.stdout)
    with opener(out_path, "wt", newline="\n") as out:
        return dev, write_csv(traces[dev], out)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="PyTorch memory snapshot pickle -> fragfree-replay CSV")
    parser.add_argument("snapshot", help="pickle from _dump_snapshot()")
    parser.add_argument("-o", "--output", default="-",
                        help="output CSV (.gz to compress; default stdout)")
    parser.add_argument("--device", type=int, default=None,
                        help="device index (default: the only busy one)")
    args = parser.parse_args(argv)
    try:
        dev, count = convert(args.snapshot, args.output, args.device)
    except (OSError, SnapshotError) as e:
        print(f"snapshot_to_csv: {args.snapshot}: {e}", file=sys.stderr)
        return 1
    print(f"snapshot_to_csv: device {dev}: {count} entries -> {args.output}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
