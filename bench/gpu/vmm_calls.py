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

Prints microseconds per page for each, then one JSON line. Exits 1 when a call
fails (other than unmap_range being refused).

  python3 bench/gpu/vmm_calls.py [--pages 2048] [--threads 4] [--device 0]
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
    def __init__(self, device):
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
        self.access = AccessDesc()
        self.access.location.type = 1
        self.access.location.id = device
        self.access.flags = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        for name in ("cuMemMap", "cuMemUnmap", "cuMemSetAccess", "cuMemAddressReserve",
                     "cuMemAddressFree"):
            getattr(self.cu, name).argtypes = None
        self.cu.cuMemRelease.argtypes = [ctypes.c_ulonglong]

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

    def create(self):
        h = ctypes.c_ulonglong()
        self.check(self.cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(PAGE),
                                       ctypes.byref(self.prop), ctypes.c_ulonglong(0)),
                   "cuMemCreate")
        return h.value

    def map(self, va, h):
        self.check(self.cu.cuMemMap(ctypes.c_ulonglong(va), ctypes.c_size_t(PAGE),
                                    ctypes.c_size_t(0), ctypes.c_ulonglong(h),
                                    ctypes.c_ulonglong(0)), "cuMemMap")

    def set_access(self, va, size):
        self.check(self.cu.cuMemSetAccess(ctypes.c_ulonglong(va), ctypes.c_size_t(size),
                                          ctypes.byref(self.access), ctypes.c_size_t(1)),
                   "cuMemSetAccess")

    def unmap(self, va, size):
        return self.cu.cuMemUnmap(ctypes.c_ulonglong(va), ctypes.c_size_t(size))

    def release(self, h):
        self.check(self.cu.cuMemRelease(ctypes.c_ulonglong(h)), "cuMemRelease")


def timed(fn):
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args()
    n = args.pages
    drv = Driver(args.device)
    va = drv.reserve(n * PAGE)
    us = {}
    handles = []

    def map_all():
        for i, h in enumerate(handles):
            drv.map(va + i * PAGE, h)

    def per_page(key, seconds):
        us[key] = seconds / n * 1e6

    per_page("create", timed(lambda: handles.extend(drv.create() for _ in range(n))))
    per_page("map", timed(map_all))
    per_page("access_page", timed(lambda: [drv.set_access(va + i * PAGE, PAGE) for i in range(n)]))
    per_page("unmap_page", timed(lambda: [drv.check(drv.unmap(va + i * PAGE, PAGE), "cuMemUnmap")
                                          for i in range(n)]))
    map_all()
    per_page("access_range", timed(lambda: drv.set_access(va, n * PAGE)))
    result = {}
    per_page("unmap_range", timed(lambda: result.setdefault("r", drv.unmap(va, n * PAGE))))
    unmap_range_ok = result["r"] == 0
    if not unmap_range_ok:
        us["unmap_range"] = None
        for i in range(n):
            drv.check(drv.unmap(va + i * PAGE, PAGE), "cuMemUnmap")
    per_page("release", timed(lambda: [drv.release(h) for h in handles]))
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
    print(f"CUDA VMM calls, {n} pages of 2 MiB, device {args.device} (microseconds per page)")
    for k, v in us.items():
        print(f"  {k:<14} {'refused' if v is None else f'{v:8.2f}'}")
    print(json.dumps({"bench": "vmm_calls", "pages": n, "threads": t, "us_per_page": us,
                      "unmap_range_ok": unmap_range_ok}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
