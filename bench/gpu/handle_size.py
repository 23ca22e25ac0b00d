#!/usr/bin/env python3
"""Does the size of the physical handles behind a tensor change how fast the
GPU reads it? The same GEMM and copy run on tensors backed three ways, in one
process, alternated over rounds (CUDA events, median per round):

  cudamalloc  PyTorch's default allocator (a cudaMalloc segment per tensor)
  pages       2 MiB handles, one cuMemCreate each, mapped side by side (what
              fragfree maps under a block)
  pages_access_each  (--access-each) the same pages, access set one page at
              a time: whether the access ranges, not only the handles, count
  one_handle  one cuMemCreate for the whole tensor, mapped as one range
  handles_N   (--handle-mib N,...) N MiB handles mapped side by side: whether
              a kernel's fixed cost over many mappings (a 64 MiB copy ~0.4 us
              slower on 2 MiB pages: docs/performance.md) falls with fewer

Each backing holds a weight W (n x n fp32) and activations X (m x n) and Y
(m x n); the timed work is Y = X @ W (GEMM) and W2.copy_(W) (a copy that
streams W, bandwidth-bound: cudaMemcpyAsync). gemm_cpu and copy_cpu are the
CPU's side of the same two calls: microseconds to issue one, timed over a loop
that queues them without waiting (fewer than the GPU's queue holds, so that
none blocks): whether the driver's per-call cost grows with the number of
handles a copy's source and destination span (a 64 MiB copy spans 32 on 2 MiB
pages), which a GPU-bound step hides and a CPU-bound one pays. The other
kinds of call a training step makes on such memory are timed the same way:
add_cpu (Y = X + X, an elementwise kernel over three tensors), sum_cpu (a
reduction of W over its rows into a vector) and copy16_cpu (Y.copy_(X), a
16 MiB copy at the default sizes: 8 handles each side on 2 MiB pages, against
copy_cpu's 32), so that what grows with the handles, and by how much a
handle, is read call by call. --ballast-gib B first maps B GiB more in 2 MiB
pages, untouched (a process under fragfree holds thousands of mappings: GPT-2
~13 GiB, 6,800 pages): whether what a call costs per handle grows with the
handles mapped in the process, not only with those the call spans. With
--gather-gib G it also holds G GiB of 4 KiB rows and times a gather of random
rows from all of them (index_select into PyTorch's memory, up to 1 GiB of
rows): the GPU's address translation under the most pressure. Prints a table
of the medians and the ratios to cudamalloc with their min-max over rounds,
then one JSON line.

  python3 bench/gpu/handle_size.py [--n 4096] [--m 1024] [--rounds 5] [--iters 50]
                                   [--gather-gib 4] [--handle-mib 8,32] [--ballast-gib 16] [--access-each]
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vmm_calls import PAGE, Driver  # noqa: E402


class DevicePointer:
    """A CUDA array interface over raw device memory (no copy)."""

    def __init__(self, ptr, shape):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4",
                                         "data": (ptr, False), "version": 3}


def round_up(v, to):
    return (v + to - 1) // to * to


class VmmRegion:
    """`size` bytes of device memory behind one reserved VA range, from handles
    of `handle_bytes` each (a multiple of 2 MiB) mapped side by side."""

    def __init__(self, drv, size, handle_bytes, access_each=False):
        self.drv = drv
        self.size = round_up(size, handle_bytes)
        self.va = drv.reserve(self.size)
        self.handles = []
        for off in range(0, self.size, handle_bytes):
            h = drv.create(handle_bytes)
            drv.map(self.va + off, h, handle_bytes)
            if access_each:
                drv.set_access(self.va + off, handle_bytes)
            self.handles.append((off, h, handle_bytes))
        if not access_each:
            drv.set_access(self.va, self.size)
        self.used = 0

    def tensor(self, *shape):
        nbytes = 4
        for s in shape:
            nbytes *= s
        ptr = self.va + self.used
        self.used += round_up(nbytes, PAGE)
        assert self.used <= self.size
        return torch.as_tensor(DevicePointer(ptr, shape), device="cuda")

    def close(self):
        for off, h, n in self.handles:
            self.drv.check(self.drv.unmap(self.va + off, n), "cuMemUnmap")
            self.drv.release(h)
        self.drv.check(self.drv.cu.cuMemAddressFree(ctypes.c_ulonglong(self.va),
                                                    ctypes.c_size_t(self.size)),
                       "cuMemAddressFree")


def timed_ms(fn, iters):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def issue_us(fn, iters):
    """Microseconds of CPU to issue fn() once: the loop is timed up to its
    last call, before the GPU is waited for."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / iters * 1e6


# The unit of each op's figure: GPU time, or the CPU's time to issue it.
UNITS = {"gemm": "ms", "copy": "ms", "gather": "ms", "gemm_cpu": "us", "copy_cpu": "us",
         "add_cpu": "us", "sum_cpu": "us", "copy16_cpu": "us"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--m", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--gather-gib", type=int, default=0,
                    help="GiB of rows to gather from at random (0: no gather)")
    ap.add_argument("--ballast-gib", type=int, default=0,
                    help="GiB more mapped in 2 MiB pages before timing, untouched (0: none)")
    ap.add_argument("--access-each", action="store_true",
                    help="also 2 MiB pages whose access is set one page at a time (pages_access_each)")
    ap.add_argument("--handle-mib", default="",
                    help="more backings of handles of these sizes, MiB (multiples of 2): 8,32")
    args = ap.parse_args()
    try:
        handle_mib = [int(v) for v in filter(None, args.handle_mib.split(","))]
    except ValueError:
        ap.error(f"--handle-mib {args.handle_mib!r}: expected sizes in MiB such as 8,32")
    if any(v <= 0 or (v << 20) % PAGE for v in handle_mib):
        ap.error(f"--handle-mib {args.handle_mib!r}: each size a positive multiple of {PAGE >> 20} MiB")
    n, m = args.n, args.m
    g_rows = (args.gather_gib << 30) // 4096  # rows of 1024 fp32
    torch.cuda.init()
    drv = Driver(torch.cuda.current_device())
    w_bytes, x_bytes = n * n * 4, m * n * 4
    total = round_up(w_bytes, PAGE) * 2 + round_up(x_bytes, PAGE) * 2 + g_rows * 4096
    shapes = [(n, n), (n, n), (m, n), (m, n)] + ([(g_rows, 1024)] if g_rows else [])
    backings = {}
    ballast = VmmRegion(drv, args.ballast_gib << 30, PAGE) if args.ballast_gib > 0 else None

    def tensors(kind):
        if kind == "cudamalloc":
            return [torch.empty(*shape, device="cuda") for shape in shapes], None
        handle = {"pages": PAGE, "pages_access_each": PAGE,
                  "one_handle": round_up(total, PAGE)}.get(kind)
        if handle is None:  # handles_N
            handle = int(kind.split("_")[1]) << 20
        region = VmmRegion(drv, total, handle, access_each=kind == "pages_access_each")
        return [region.tensor(*shape) for shape in shapes], region

    kinds = ["cudamalloc", "pages"] + (["pages_access_each"] if args.access_each else []) + ["one_handle"]
    for kind in kinds + [f"handles_{v}" for v in handle_mib]:
        ts, region = tensors(kind)
        for t in ts:
            t.normal_()
        backings[kind] = (ts, region)
    ops = ["gemm", "copy", "gemm_cpu", "copy_cpu", "add_cpu", "sum_cpu", "copy16_cpu"] + (
        ["gather"] if g_rows else [])
    col_sums = torch.empty(n, device="cuda")  # alike for every backing
    issue_iters = min(args.iters, 100)  # a few ms of queued GPU work at the default sizes
    if g_rows:
        picked = min(g_rows // 4, 1 << 18)
        idx = torch.randint(0, g_rows, (picked,), device="cuda",
                            generator=torch.Generator(device="cuda").manual_seed(0))
        gathered = torch.empty(picked, 1024, device="cuda")  # alike for every backing
    ms = {k: {op: [] for op in ops} for k in backings}
    for r in range(args.rounds):
        order = list(backings)
        order = order[r % len(order):] + order[:r % len(order)]
        for kind in order:
            (w, w2, x, y, *g), _ = backings[kind]
            ms[kind]["gemm"].append(timed_ms(lambda: torch.matmul(x, w, out=y), args.iters))
            ms[kind]["copy"].append(timed_ms(lambda: w2.copy_(w), args.iters))
            ms[kind]["gemm_cpu"].append(issue_us(lambda: torch.matmul(x, w, out=y), issue_iters))
            ms[kind]["copy_cpu"].append(issue_us(lambda: w2.copy_(w), issue_iters))
            ms[kind]["add_cpu"].append(issue_us(lambda: torch.add(x, x, out=y), issue_iters))
            ms[kind]["sum_cpu"].append(issue_us(lambda: torch.sum(w, 0, out=col_sums), issue_iters))
            ms[kind]["copy16_cpu"].append(issue_us(lambda: y.copy_(x), issue_iters))
            if g:
                ms[kind]["gather"].append(timed_ms(
                    lambda: torch.index_select(g[0], 0, idx, out=gathered), args.iters))
    print(f"handle size and GPU speed: n={n} m={m}, {args.rounds} rounds x {args.iters} iterations, "
          f"{len(ballast.handles) if ballast else 0} ballast pages mapped")
    print("| backing | " + " | ".join(f"{op} {UNITS[op]} | / cudamalloc [min-max]" for op in ops) + " |")
    print("|---|" + "---|---|" * len(ops))
    rows = {}
    for kind in backings:
        row = {}
        cells = []
        for op in ops:
            med = statistics.median(ms[kind][op])
            ratios = [a / b for a, b in zip(ms[kind][op], ms["cudamalloc"][op])]
            row[op] = {UNITS[op]: med, "ratio": statistics.median(ratios),
                       "ratio_min": min(ratios), "ratio_max": max(ratios)}
            cells += [f"{med:.4f}", f"{row[op]['ratio']:.3f} [{min(ratios):.3f}-{max(ratios):.3f}]"]
        rows[kind] = row
        print(f"| {kind} | " + " | ".join(cells) + " |")
    for kind, (ts, region) in backings.items():
        del ts[:]
        if region is not None:
            torch.cuda.synchronize()
            region.close()
    if ballast is not None:
        ballast.close()
    print(json.dumps({"bench": "handle_size", "n": n, "m": m, "rounds": args.rounds,
                      "iters": args.iters, "gather_gib": args.gather_gib,
                      "ballast_gib": args.ballast_gib,
                      "handle_mib": handle_mib, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
