#!/usr/bin/env python3
"""Whether moving pages (cuMemMap + cuMemSetAccess + cuMemUnmap, what fragfree
does to move a free page under a new block) slows the GPU or another thread's
launches; driver only (ctypes on libcuda, the Driver of vmm_calls.py).

  gpu      a fixed batch of GPU work (memsets of 1 GiB, ~100 ms) timed with
           events, while the CPU either waits or moves 32 pages at a time
           until the batch ends: the batch's GPU time, quiet against moving.
  launch   one thread launches small memsets as fast as it can for a while,
           while a second thread either sleeps or moves pages: launches per
           second, quiet against moving (whether the VMM calls hold a lock the
           launches need).

Rounds alternate quiet and moving. Prints a table and one JSON line.

  python3 bench/gpu/vmm_interference.py [--rounds 5] [--device 0]
"""
import argparse
import ctypes
import json
import statistics
import sys
import threading
import time

from vmm_calls import PAGE, Driver

MOVE = 32  # pages per move, as a request that reclaims 64 MiB


class Mover:
    """Moves MOVE pages between two VA ranges: map + access at one, unmap at
    the other."""

    def __init__(self, drv):
        self.drv = drv
        self.handles = [drv.create() for _ in range(MOVE)]
        self.va = [drv.reserve(MOVE * PAGE), drv.reserve(MOVE * PAGE)]
        self.side = 0
        self._map(self.va[0])
        self.pages = 0
        self.seconds = 0.0

    def _map(self, va):
        for i, h in enumerate(self.handles):
            self.drv.map(va + i * PAGE, h)
        self.drv.set_access(va, MOVE * PAGE)

    def move(self):
        t0 = time.perf_counter()
        old, new = self.va[self.side], self.va[1 - self.side]
        self._map(new)  # the page is mapped at its new address first, as fragfree does
        for i in range(MOVE):
            self.drv.check(self.drv.unmap(old + i * PAGE, PAGE), "cuMemUnmap")
        self.side = 1 - self.side
        self.seconds += time.perf_counter() - t0
        self.pages += MOVE


def event(drv):
    e = ctypes.c_void_p()
    drv.check(drv.cu.cuEventCreate(ctypes.byref(e), 0), "cuEventCreate")
    return e


def gpu_round(drv, mover, buf, moving, launches):
    start, end = event(drv), event(drv)
    drv.check(drv.cu.cuEventRecord(start, None), "cuEventRecord")
    for _ in range(launches):
        drv.check(drv.cu.cuMemsetD8Async(ctypes.c_ulonglong(buf), ctypes.c_ubyte(0),
                                         ctypes.c_size_t(1 << 30), None), "cuMemsetD8Async")
    drv.check(drv.cu.cuEventRecord(end, None), "cuEventRecord")
    moves = 0
    while drv.cu.cuEventQuery(end) != 0:  # CUDA_ERROR_NOT_READY until done
        if moving:
            mover.move()
            moves += 1
        else:
            time.sleep(0.0005)
    ms = ctypes.c_float()
    drv.check(drv.cu.cuEventElapsedTime(ctypes.byref(ms), start, end), "cuEventElapsedTime")
    for e in (start, end):
        drv.cu.cuEventDestroy_v2(e)
    return ms.value, moves


def launch_round(drv, mover, buf, moving, seconds=0.5):
    stop = threading.Event()

    def other():
        drv.current()
        while not stop.is_set():
            if moving:
                mover.move()
            else:
                time.sleep(0.0005)

    t = threading.Thread(target=other)
    t.start()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        drv.check(drv.cu.cuMemsetD8Async(ctypes.c_ulonglong(buf), ctypes.c_ubyte(0),
                                         ctypes.c_size_t(4096), None), "cuMemsetD8Async")
        n += 1
        if n % 1000 == 0:
            drv.cu.cuCtxSynchronize()  # keep the queue from filling up
    rate = n / (time.perf_counter() - t0)
    stop.set()
    t.join()
    drv.cu.cuCtxSynchronize()
    return rate


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--launches", type=int, default=300, help="1 GiB memsets per GPU batch")
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args()
    drv = Driver(args.device)
    buf = drv.buffer(1 << 30)
    mover = Mover(drv)
    gpu = {False: [], True: []}
    launch = {False: [], True: []}
    moves_per_batch = []
    for r in range(args.rounds):
        for moving in ((False, True) if r % 2 == 0 else (True, False)):
            ms, moves = gpu_round(drv, mover, buf, moving, args.launches)
            gpu[moving].append(ms)
            if moving:
                moves_per_batch.append(moves)
            launch[moving].append(launch_round(drv, mover, buf, moving))
    drv.check(drv.cu.cuCtxSynchronize(), "cuCtxSynchronize")
    us_per_page = mover.seconds / max(1, mover.pages) * 1e6
    med = statistics.median
    ratios = [m / q for q, m in zip(gpu[False], gpu[True])]
    lratios = [m / q for q, m in zip(launch[False], launch[True])]
    print(f"GPU batch ({args.launches} memsets of 1 GiB): quiet {med(gpu[False]):.2f} ms, while moving "
          f"pages {med(gpu[True]):.2f} ms; moving/quiet {med(ratios):.4f} "
          f"[{min(ratios):.4f}-{max(ratios):.4f}], {med(moves_per_batch)} moves of {MOVE} pages "
          "a batch")
    print(f"launches/s on one thread: quiet {med(launch[False]):.0f}, another thread moving pages "
          f"{med(launch[True]):.0f}; moving/quiet {med(lratios):.4f} "
          f"[{min(lratios):.4f}-{max(lratios):.4f}]")
    print(f"a page moved (map + access + unmap): {us_per_page:.1f} us")
    print(json.dumps({"bench": "vmm_interference", "gpu_ms": gpu, "launch_per_s": launch,
                      "moves_per_batch": moves_per_batch, "us_per_page_moved": us_per_page}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
