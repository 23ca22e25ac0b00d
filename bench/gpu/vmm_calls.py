#!/usr/bin/env python3
"""What the CUDA VMM calls behind pause and resume cost (docs/sleep.md), on the
driver alone (ctypes on libcuda; no torch, no fragfree), for N pages of 2 MiB:

  create        cuMemCreate, one page per call
  map           cuMemMap, one page per call
  access_page   cuMemSetAccess, one page per call
  access_range  cuMemSetAccess, one call over all N pages
  unmap_page    cuMemUnmap, one page per call
  unmap_range   cuMemUnmap, one call over N pages mapped one by one (fragfree
                pauses this way: Arena::UnmapPagesIn); "refused" when the
                driver rejects a range spanning several mappings
  release       cuMemRelease, one handle per call
  create_T, release_T   the same spread over T threads (ctypes drops the GIL
                during the call): whether the driver runs them in parallel

With --compound K (repeatable), one handle of K pages instead of K handles:
  create / map / access over the whole handle (microseconds per call), whether
  the driver accepts a 2 MiB piece of it mapped on its own (cuMemMap with a
  non-zero offset), a piece unmapped out of the whole mapping, access set on one
  piece, and whether the bytes seen through both addresses are the same; then
  the K pieces mapped one call each side by side and one cuMemSetAccess over them
  (whether access costs per mapping or per handle).

Prints microseconds per page for each, then one JSON line. Exits 1 when a call
fails (other than unmap_range being refused).

--busy keeps the GPU busy while each call is timed (1 GiB memsets queued
ahead, ~100 ms of work), as in training, where pages are mapped while kernels
run: whether a busy GPU makes the calls dearer.
--exportable creates every handle shareable with other processes
(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), as fragfree does where the driver
allows it (for CUDA IPC): whether that makes the calls dearer.

  python3 bench/gpu/vmm_calls.py [--pages 2048] [--threads 4] [--device 0]
      [--exportable] [--busy] [--compound K ...]
"""
import argparse
import ctypes
import json
import sys
import threading
import time

PAGE = 2 << 20


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class AllocProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", AllocFlags)]


class AccessDesc(ctypes.Structure):
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]


class Driver:
    def __init__(self, device, exportable=False):
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.check(self.cu.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self.check(self.cu.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        self.check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev),
                   "cuDevicePrimaryCtxRetain")
        self.current()
        self.prop = AllocProp()
        self.prop.type = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
        self.prop.location.type = 1  # CU_MEM_LOCATION_TYPE_DEVICE
        self.prop.location.id = device
        # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, or none.
        self.prop.requestedHandleTypes = 1 if exportable else 0
        self.access = AccessDesc()
        self.access.location.type = 1
        self.access.location.id = device
        self.access.flags = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        for name in ("cuMemMap", "cuMemUnmap", "cuMemSetAccess", "cuMemAddressReserve",
                     "cuMemAddressFree"):
            getattr(self.cu, name).argtypes = None
        self.cu.cuMemRelease.argtypes = [ctypes.c_ulonglong]

    def buffer(self, size):
        """The address of `size` bytes of ordinary device memory (cuMemAlloc),
        kept for the process's life: what memsets write to."""
        buf = ctypes.c_ulonglong()
        self.check(self.cu.cuMemAlloc_v2(ctypes.byref(buf), ctypes.c_size_t(size)), "cuMemAlloc")
        return buf.value

    def keep_busy(self, launches=300):
        """Queues ~100 ms of memsets (1 GiB each) on the default stream."""
        if not hasattr(self, "busy_buf"):
            self.busy_buf = self.buffer(1 << 30)
        for _ in range(launches):
            self.check(self.cu.cuMemsetD8Async(ctypes.c_ulonglong(self.busy_buf), ctypes.c_ubyte(0),
                                               ctypes.c_size_t(1 << 30), ctypes.c_void_p(0)),
                       "cuMemsetD8Async")

    def current(self):
        self.check(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def check(self, r, what):
        if r != 0:
            raise RuntimeError(f"{what} failed: CUresult {r}")

    def reserve(self, size):
        ptr = ctypes.c_ulonglong()
        self.check(self.cu.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size),
                                               ctypes.c_size_t(PAGE), ctypes.c_ulonglong(0),
                                               ctypes.c_ulonglong(0)), "cuMemAddressReserve")
        return ptr.value

    def create(self, size=PAGE):
        h = ctypes.c_ulonglong()
        self.check(self.cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(size),
                                       ctypes.byref(self.prop), ctypes.c_ulonglong(0)),
                   "cuMemCreate")
        return h.value

    def map(self, va, h, size=PAGE, offset=0):
        self.check(self.try_map(va, h, size, offset), "cuMemMap")

    def try_map(self, va, h, size=PAGE, offset=0):
        return self.cu.cuMemMap(ctypes.c_ulonglong(va), ctypes.c_size_t(size),
                                ctypes.c_size_t(offset), ctypes.c_ulonglong(h),
                                ctypes.c_ulonglong(0))

    def try_set_access(self, va, size):
        return self.cu.cuMemSetAccess(ctypes.c_ulonglong(va), ctypes.c_size_t(size),
                                      ctypes.byref(self.access), ctypes.c_size_t(1))

    def set_access(self, va, size):
        self.check(self.cu.cuMemSetAccess(ctypes.c_ulonglong(va), ctypes.c_size_t(size),
                                          ctypes.byref(self.access), ctypes.c_size_t(1)),
                   "cuMemSetAccess")

    def unmap(self, va, size):
        return self.cu.cuMemUnmap(ctypes.c_ulonglong(va), ctypes.c_size_t(size))

    def release(self, h):
        self.check(self.cu.cuMemRelease(ctypes.c_ulonglong(h)), "cuMemRelease")


def timed(fn, prepare=None):
    """Seconds fn() takes; prepare() runs first, outside the timing."""
    if prepare is not None:
        prepare()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def threaded(drv, threads, items, fn):
    """fn(item) for every item, on `threads` threads; seconds."""
    parts = [items[i::threads] for i in range(threads)]
    errors = []

    def work(part):
        try:
            drv.current()
            for it in part:
                fn(it)
        except Exception as e:  # reported after the join
            errors.append(e)

    ts = [threading.Thread(target=work, args=(p,)) for p in parts]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0


def compound(drv, k):
    """One handle of k pages: what the driver accepts and what it costs (see the
    module docstring). Microseconds per call; "ok" fields are CUresult codes."""
    size = k * PAGE
    out = {"pages": k}
    va = drv.reserve(size)
    other = drv.reserve(size)
    h = [0]
    out["create_us"] = timed(lambda: h.__setitem__(0, drv.create(size))) * 1e6
    out["map_us"] = timed(lambda: drv.map(va, h[0], size)) * 1e6
    out["access_us"] = timed(lambda: drv.set_access(va, size)) * 1e6
    # A piece of the handle at another address, while the whole stays mapped.
    piece = k // 2
    t0 = time.perf_counter()
    out["map_piece_rc"] = drv.try_map(other, h[0], PAGE, piece * PAGE)
    out["map_piece_us"] = (time.perf_counter() - t0) * 1e6
    if out["map_piece_rc"] == 0:
        t0 = time.perf_counter()
        out["access_piece_rc"] = drv.try_set_access(other, PAGE)
        out["access_piece_us"] = (time.perf_counter() - t0) * 1e6
        if out["access_piece_rc"] == 0:
            drv.check(drv.cu.cuMemsetD8_v2(ctypes.c_ulonglong(va + piece * PAGE),
                                           ctypes.c_ubyte(0xAB), ctypes.c_size_t(PAGE)),
                      "cuMemsetD8")
            drv.check(drv.cu.cuCtxSynchronize(), "cuCtxSynchronize")
            buf = (ctypes.c_ubyte * 16)()
            drv.check(drv.cu.cuMemcpyDtoH_v2(buf, ctypes.c_ulonglong(other + PAGE - 16),
                                             ctypes.c_size_t(16)), "cuMemcpyDtoH")
            out["same_bytes"] = all(b == 0xAB for b in buf)
    # One piece unmapped out of the whole-handle mapping.
    t0 = time.perf_counter()
    out["unmap_piece_of_whole_rc"] = drv.unmap(va + piece * PAGE, PAGE)
    out["unmap_piece_us"] = (time.perf_counter() - t0) * 1e6
    if out["unmap_piece_of_whole_rc"] == 0:
        # The rest stays usable: write and read a neighbouring piece.
        out["rest_rc"] = drv.cu.cuMemsetD8_v2(ctypes.c_ulonglong(va), ctypes.c_ubyte(1),
                                              ctypes.c_size_t(PAGE))
        out["rest_sync_rc"] = drv.cu.cuCtxSynchronize()
        out["unmap_rest_rc"] = drv.unmap(va, piece * PAGE)
        if piece + 1 < k:
            drv.unmap(va + (piece + 1) * PAGE, (k - piece - 1) * PAGE)
    else:
        drv.check(drv.unmap(va, size), "cuMemUnmap")
    if out["map_piece_rc"] == 0:
        drv.check(drv.unmap(other, PAGE), "cuMemUnmap")
    # The k pieces mapped one call each, then one access call over them all.
    if out["map_piece_rc"] == 0:
        t0 = time.perf_counter()
        rcs = [drv.try_map(va + i * PAGE, h[0], PAGE, i * PAGE) for i in range(k)]
        out["map_pieces_us_per_piece"] = (time.perf_counter() - t0) * 1e6 / k
        out["map_pieces_ok"] = all(r == 0 for r in rcs)
        if out["map_pieces_ok"]:
            out["access_over_pieces_us"] = timed(lambda: drv.set_access(va, size)) * 1e6
            out["unmap_pieces_range_rc"] = drv.unmap(va, size)
            if out["unmap_pieces_range_rc"] != 0:
                for i in range(k):
                    drv.unmap(va + i * PAGE, PAGE)
        else:
            for i, r in enumerate(rcs):
                if r == 0:
                    drv.unmap(va + i * PAGE, PAGE)
    out["release_us"] = timed(lambda: drv.release(h[0])) * 1e6
    for base in (va, other):
        drv.check(drv.cu.cuMemAddressFree(ctypes.c_ulonglong(base), ctypes.c_size_t(size)),
                  "cuMemAddressFree")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--busy", action="store_true",
                    help="keep the GPU busy while the calls are timed")
    ap.add_argument("--exportable", action="store_true",
                    help="create handles shareable with other processes (POSIX fd)")
    ap.add_argument("--compound", type=int, action="append", default=[],
                    help="also test one handle of this many pages (repeatable)")
    args = ap.parse_args()
    n = args.pages
    drv = Driver(args.device, args.exportable)
    va = drv.reserve(n * PAGE)
    us = {}
    handles = []

    def map_all():
        for i, h in enumerate(handles):
            drv.map(va + i * PAGE, h)

    def per_page(key, seconds):
        us[key] = seconds / n * 1e6

    # With --busy the GPU's queue is filled first, outside the timing.
    busy = drv.keep_busy if args.busy else None

    per_page("create", timed(lambda: handles.extend(drv.create() for _ in range(n)), busy))
    per_page("map", timed(map_all, busy))
    per_page("access_page", timed(lambda: [drv.set_access(va + i * PAGE, PAGE)
                                           for i in range(n)], busy))
    per_page("unmap_page", timed(lambda: [drv.check(drv.unmap(va + i * PAGE, PAGE), "cuMemUnmap")
                                          for i in range(n)], busy))
    map_all()
    per_page("access_range", timed(lambda: drv.set_access(va, n * PAGE), busy))
    result = {}
    per_page("unmap_range", timed(lambda: result.setdefault("r", drv.unmap(va, n * PAGE)), busy))
    unmap_range_ok = result["r"] == 0
    if not unmap_range_ok:
        us["unmap_range"] = None
        for i in range(n):
            drv.check(drv.unmap(va + i * PAGE, PAGE), "cuMemUnmap")
    per_page("release", timed(lambda: [drv.release(h) for h in handles], busy))
    handles.clear()
    t = args.threads
    made = []
    lock = threading.Lock()

    def make(_):
        h = drv.create()
        with lock:
            made.append(h)

    per_page(f"create_{t}", threaded(drv, t, list(range(n)), make))
    per_page(f"release_{t}", threaded(drv, t, list(made), drv.release))
    drv.check(drv.cu.cuMemAddressFree(ctypes.c_ulonglong(va), ctypes.c_size_t(n * PAGE)),
              "cuMemAddressFree")
    drv.check(drv.cu.cuCtxSynchronize(), "cuCtxSynchronize")
    kind = ("shareable (POSIX fd)" if args.exportable else "plain") + (
        ", GPU busy" if args.busy else "")
    print(f"CUDA VMM calls, {n} {kind} pages of 2 MiB, device {args.device} "
          "(microseconds per page)")
    for k, v in us.items():
        print(f"  {k:<14} {'refused' if v is None else f'{v:8.2f}'}")
    compounds = []
    for k in args.compound:
        for rep in range(3):
            c = compound(drv, k)
            compounds.append(c)
            print(f"  one handle of {k} pages, round {rep + 1}: " +
                  ", ".join(f"{key} {v:.1f}" if isinstance(v, float) else f"{key} {v}"
                            for key, v in c.items() if key != "pages"))
    print(json.dumps({"bench": "vmm_calls", "pages": n, "threads": t, "us_per_page": us,
                      "unmap_range_ok": unmap_range_ok, "exportable": args.exportable, "busy": args.busy,
                      "compound": compounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
