#!/usr/bin/env python3
"""Pinned host memory for offload: fragfree's pool vs PyTorch's pinned allocator.

An offload-style run (activations or optimizer state moved to pinned host memory
and back, variable sizes, a side stream), three ways, each in its own process:

  torch          host buffers from torch.empty(..., pin_memory=True): PyTorch's
                 CachingHostAllocator (one cudaHostAlloc per new block, rounded to
                 a power of two, cached and never released during the run);
  fragfree       host buffers from ff_host_malloc (ctypes C API), used through
                 torch.frombuffer, given to ff_host_record_stream after each
                 asynchronous copy and ff_host_free'd when done;
  torch-preload  the torch run with LD_PRELOAD=libfragfree.so: PyTorch's
                 allocator calls cudaHostAlloc, which fragfree's pool serves.

It prints, per run: the pinned footprint (peak bytes pinned), the peak of live
requested bytes (the ideal), pinning calls, median step time; then a table.
`--bandwidth` measures H2D/D2H copy bandwidth from fragfree's pinned memory,
PyTorch's pinned memory and pageable memory (64 MiB and 1 GiB).

  python3 bench/gpu/pinned_offload.py --lib build/lib/libfragfree.so
  python3 bench/gpu/pinned_offload.py --lib build/lib/libfragfree.so --bandwidth

Without a GPU, `--selftest` checks the ctypes wrapper on the emulated backend
(FRAGFREE_CONF=backend:host). docs/host.md has the figures.
"""
import argparse
import ctypes
import json
import os
import random
import statistics
import subprocess
import sys
import time

MiB = 1 << 20


class HostStats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("version", ctypes.c_uint32)] + [
        (name, ctypes.c_int64) for name in (
            "pinned_bytes", "peak_pinned_bytes", "live_bytes",
            "peak_live_bytes", "requested_bytes", "pending_bytes", "chunks",
            "pin_calls", "unpin_calls", "pin_failures", "allocs", "frees",
            "allocs_without_pin", "events_recorded", "metadata_bytes")
    ] + [("metadata_on_jemalloc", ctypes.c_int32), ("cuda", ctypes.c_int32)]


class FragfreeHost:
    """The ff_host_* C API through ctypes."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.ff_host_malloc.restype = ctypes.c_void_p
        self.lib.ff_host_malloc.argtypes = [ctypes.c_size_t]
        self.lib.ff_host_free.argtypes = [ctypes.c_void_p]
        self.lib.ff_host_record_stream.argtypes = [ctypes.c_void_p,
                                                   ctypes.c_void_p]
        self.lib.ff_host_stats.argtypes = [ctypes.POINTER(HostStats)]
        self.lib.ff_host_stats_json.argtypes = [ctypes.c_char_p,
                                                ctypes.c_size_t]
        self.lib.ff_host_stats_json.restype = ctypes.c_size_t
        self.lib.ff_last_error.restype = ctypes.c_char_p

    def malloc(self, n):
        p = self.lib.ff_host_malloc(n)
        if not p:
            raise MemoryError("ff_host_malloc(%d): %s" %
                              (n, self.lib.ff_last_error().decode()))
        return p

    def free(self, p):
        if self.lib.ff_host_free(ctypes.c_void_p(p)) != 0:
            raise RuntimeError(self.lib.ff_last_error().decode())

    def record_stream(self, p, stream_handle):
        if self.lib.ff_host_record_stream(ctypes.c_void_p(p),
                                          ctypes.c_void_p(stream_handle)):
            raise RuntimeError(self.lib.ff_last_error().decode())

    def stats(self):
        s = HostStats()
        s.size = ctypes.sizeof(HostStats)
        if self.lib.ff_host_stats(ctypes.byref(s)) != 0:
            raise RuntimeError(self.lib.ff_last_error().decode())
        return {name: getattr(s, name) for name, _ in HostStats._fields_}

    def stats_json(self):
        n = self.lib.ff_host_stats_json(None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        self.lib.ff_host_stats_json(buf, n + 1)
        return json.loads(buf.value)


def workload(seed, layers, steps):
    """Per step, per layer: the bytes offloaded (variable sequence lengths)."""
    rng = random.Random(seed)
    base = [2, 6, 24, 48, 96]  # MiB per layer kind (attention, MLP, ...)
    return [[int(base[l % len(base)] * MiB * rng.uniform(0.35, 1.0)) // 512 *
             512 for l in range(layers)] for _ in range(steps)]


def run(mode, lib_path, seed, layers, steps):
    import torch
    torch.cuda.init()
    dev = torch.device("cuda")
    side = torch.cuda.Stream()
    ff = FragfreeHost(lib_path) if mode in ("fragfree", "torch-preload") else None
    plan = workload(seed, layers, steps)
    src = torch.empty(max(max(s) for s in plan), dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    step_ms, live, peak_live = [], 0, 0
    for sizes in plan:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        held = []  # forward: offload every layer's activations
        for n in sizes:
            if mode == "fragfree":
                p = ff.malloc(n)
                h = torch.frombuffer((ctypes.c_uint8 * n).from_address(p),
                                     dtype=torch.uint8)
            else:
                p, h = None, torch.empty(n, dtype=torch.uint8, pin_memory=True)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                h.copy_(src[:n], non_blocking=True)
            if p is not None:
                ff.record_stream(p, side.cuda_stream)
            held.append((p, h, n))
            live += n
            peak_live = max(peak_live, live)
        for i in reversed(range(len(held))):  # backward: load back, free
            p, h, n = held[i]
            with torch.cuda.stream(side):
                dst[:n].copy_(h, non_blocking=True)
            held[i] = h = None  # torch: its allocator records the stream
            if p is not None:
                ff.record_stream(p, side.cuda_stream)
                ff.free(p)
            live -= n
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        step_ms.append((time.perf_counter() - t0) * 1e3)
    out = {"mode": mode, "peak_live_requested": peak_live,
           "median_step_ms": statistics.median(step_ms[1:] or step_ms)}
    hs = getattr(torch.cuda, "host_memory_stats", None)
    ts = hs() if hs is not None else {}
    if mode == "torch":
        for key in ("reserved_bytes.peak", "allocated_bytes.peak"):
            if key in ts:
                out["pinned_peak"] = ts[key]
                break
        out["pin_calls"] = ts.get("num_host_alloc")
        out["pin_ms"] = ts.get("host_alloc_time.total", 0) / 1e3
    else:
        s = ff.stats()
        out["pinned_peak"] = s["peak_pinned_bytes"]
        out["pin_calls"] = s["pin_calls"]
        out["fragfree"] = ff.stats_json()
        if mode == "torch-preload":
            out["torch_host_stats_peak"] = ts.get("reserved_bytes.peak",
                                                  ts.get("allocated_bytes.peak"))
    return out


def bandwidth(lib_path):
    import torch
    ff = FragfreeHost(lib_path)
    rows = []
    for n in (64 * MiB, 1024 * MiB):
        d = torch.empty(n, dtype=torch.uint8, device="cuda")
        p = ff.malloc(n)
        hosts = {
            "fragfree": torch.frombuffer((ctypes.c_uint8 * n).from_address(p),
                                         dtype=torch.uint8),
            "torch pinned": torch.empty(n, dtype=torch.uint8, pin_memory=True),
            "pageable": torch.empty(n, dtype=torch.uint8),
        }
        for name, h in hosts.items():
            h.fill_(1)
            for direction in ("H2D", "D2H"):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                for _ in range(2):  # warm up
                    (d.copy_(h, non_blocking=True) if direction == "H2D"
                     else h.copy_(d, non_blocking=True))
                torch.cuda.synchronize()
                reps = 10
                start.record()
                for _ in range(reps):
                    (d.copy_(h, non_blocking=True) if direction == "H2D"
                     else h.copy_(d, non_blocking=True))
                end.record()
                torch.cuda.synchronize()
                ms = start.elapsed_time(end) / reps
                rows.append((n // MiB, name, direction, n / ms / 1e6,
                             h.is_pinned()))
        del hosts
        ff.free(p)
    print("| size | host memory | direction | GB/s | is_pinned |")
    print("|---|---|---|---|---|")
    for size, name, direction, gbs, pinned in rows:
        print("| %d MiB | %s | %s | %.1f | %s |" % (size, name, direction, gbs,
                                                    pinned))


def selftest(lib_path):
    """No GPU: the ctypes wrapper against the emulated backend."""
    os.environ.setdefault("FRAGFREE_CONF", "backend:host")
    ff = FragfreeHost(lib_path)
    ptrs = [ff.malloc(n) for n in (4096, MiB, 3 * MiB)]
    ctypes.memset(ptrs[1], 7, MiB)
    ff.record_stream(ptrs[1], 0x10)
    for p in ptrs:
        ff.free(p)
    s = ff.stats()
    assert s["allocs"] == 3 and s["frees"] == 3 and s["live_bytes"] == 0, s
    assert s["events_recorded"] == 1, s
    j = ff.stats_json()
    assert j["pin_calls"] == s["pin_calls"] >= 1, j
    print("selftest ok:", json.dumps({k: j[k] for k in
                                      ("pinned_bytes", "pin_calls", "backend",
                                       "metadata")}))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=os.path.join(here, "../../build/lib/libfragfree.so"))
    ap.add_argument("--modes", default="torch,fragfree,torch-preload")
    ap.add_argument("--mode", help=argparse.SUPPRESS)  # one run, JSON out
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bandwidth", action="store_true")
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args()
    lib = os.path.abspath(a.lib)
    if a.selftest:
        return selftest(lib)
    if a.bandwidth:
        return bandwidth(lib)
    if a.mode:
        print(json.dumps(run(a.mode, lib, a.seed, a.layers, a.steps)))
        return
    results = []
    for mode in a.modes.split(","):
        env = dict(os.environ)
        if mode == "torch-preload":
            env["LD_PRELOAD"] = lib
        cmd = [sys.executable, os.path.abspath(__file__), "--mode", mode,
               "--lib", lib, "--layers", str(a.layers), "--steps",
               str(a.steps), "--seed", str(a.seed)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            print("%s failed:\n%s" % (mode, out.stderr[-3000:]))
            continue
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print("| run | pinned peak | live peak (ideal) | pinned / live | pin calls "
          "| median step |")
    print("|---|---|---|---|---|---|")
    for r in results:
        peak = r.get("pinned_peak") or 0
        print("| %s | %.0f MiB | %.0f MiB | %.2f | %s | %.1f ms |" % (
            r["mode"], peak / MiB, r["peak_live_requested"] / MiB,
            peak / max(1, r["peak_live_requested"]), r.get("pin_calls"),
            r["median_step_ms"]))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
