#!/usr/bin/env python3
"""Whether unmapping old addresses on a second thread would take that cost off
the allocating thread, on the driver alone (ctypes on libcuda, the Driver of
vmm_calls.py; no torch, no fragfree).

A "step" imitates what fragfree's allocating thread does on a CPU-bound
training step that moves pages (bench/results/2026-12-02-h200-session11.md):
--groups times, map --pages pages at their new addresses and set their access
(one call over the run), then launch --launches small memsets (the step's
kernels), then unmap the pages' old addresses (one call over the run).
Variants, alternated over --rounds rounds:

  inline   the allocating thread unmaps the old addresses itself (fragfree
           today)
  thread   it hands them to a worker thread, which unmaps them while the
           allocating thread goes on; the step waits for the worker at its end
           (the old addresses are the next step's new ones)
  none     the old addresses are unmapped after the timed step: the floor

Each step's pages alternate between two address ranges. Prints ms per step per
variant (median over rounds of the median step) and each variant's ratio to
inline in the same round, median [min-max], then one JSON line. A worker
that saves the allocating thread time puts `thread` near `none`; a driver that
serialises the two threads' calls puts it near `inline` or above.

  python3 bench/gpu/unmap_thread.py [--rounds 10] [--steps 20] [--groups 8]
      [--pages 16] [--launches 50]
"""
import argparse
import ctypes
import json
import queue
import statistics
import threading
import time

from vmm_calls import PAGE, Driver


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--pages", type=int, default=16, help="pages moved per group")
    ap.add_argument("--launches", type=int, default=50, help="memsets per group")
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args()
    drv = Driver(args.device)
    buf = drv.buffer(1 << 20)
    n = args.groups * args.pages
    handles = [drv.create() for _ in range(n)]
    ranges = [drv.reserve(n * PAGE), drv.reserve(n * PAGE)]
    run = args.pages * PAGE
    for i, h in enumerate(handles):
        drv.map(ranges[0] + i * PAGE, h)
    drv.set_access(ranges[0], n * PAGE)
    side = 0  # the range the pages are mapped at now

    todo = queue.Queue()

    def worker():
        drv.current()
        while True:
            item = todo.get()
            if item is None:
                return
            drv.check(drv.unmap(item, run), "cuMemUnmap")
            todo.task_done()

    threading.Thread(target=worker, daemon=True).start()

    def step(variant):
        nonlocal side
        old, new = ranges[side], ranges[1 - side]
        t0 = time.perf_counter()
        for g in range(args.groups):
            for i in range(g * args.pages, (g + 1) * args.pages):
                drv.map(new + i * PAGE, handles[i])
            drv.set_access(new + g * run, run)
            for _ in range(args.launches):
                drv.check(drv.cu.cuMemsetD8Async(ctypes.c_ulonglong(buf), ctypes.c_ubyte(0),
                                                 ctypes.c_size_t(4096), None), "cuMemsetD8Async")
            if variant == "inline":
                drv.check(drv.unmap(old + g * run, run), "cuMemUnmap")
            elif variant == "thread":
                todo.put(old + g * run)
        if variant == "thread":
            todo.join()
        seconds = time.perf_counter() - t0
        if variant == "none":
            for g in range(args.groups):
                drv.check(drv.unmap(old + g * run, run), "cuMemUnmap")
        drv.check(drv.cu.cuCtxSynchronize(), "cuCtxSynchronize")
        side = 1 - side
        return seconds * 1e3

    variants = ("inline", "thread", "none")
    for v in variants:  # warm
        step(v)
    per = {v: [] for v in variants}
    for r in range(args.rounds):
        order = variants[r % 3:] + variants[:r % 3]
        for v in order:
            per[v].append(statistics.median(step(v) for _ in range(args.steps)))
    med = statistics.median
    print(f"a step: {args.groups} groups x ({args.pages} pages moved, {args.launches} memsets); "
          f"{args.rounds} rounds of {args.steps} steps")
    for v in variants:
        ratios = [a / b for a, b in zip(per[v], per["inline"])]
        print(f"  {v:7s} {med(per[v]):8.3f} ms a step   ÷ inline {med(ratios):.3f} "
              f"[{min(ratios):.3f}-{max(ratios):.3f}]")
    todo.put(None)
    print("JSON " + json.dumps({"args": vars(args), "ms_per_step": per}))


if __name__ == "__main__":
    main()
