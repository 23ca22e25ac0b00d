#!/usr/bin/env python3
"""Whether the driver's per-launch CPU cost depends on how the process's device
memory is mapped: PyTorch ops launched from Python (CPU-bound: a tiny `add_`
and a 64x64 `mm`, as the launches of a step whose GPU waits on the CPU) are
timed while the process holds, besides PyTorch's own memory, memory mapped
through the driver alone (vmm_calls.Driver): first `--compound-pages` 2 MiB
pages as few handles of `--compound` pages, one mapping per handle, then the
same handles mapped a page at a time (whether launches cost more with more
handles or with more mappings); then the way fragfree maps memory (each 2 MiB
page its own cuMemCreate handle and cuMemMap) in growing amounts, after many
pages have been moved (mapped at a new address, unmapped at the old: what
fragfree's reclaim does), and after everything is unmapped again.

Each phase times `--launches` launches `--repeats` times and keeps the median
(microseconds of CPU a launch, the GPU synchronised once at the end of each
repeat, whose wait is counted: the launches queue faster than the GPU runs
them only if the CPU is the bottleneck, which is what is measured). Phases run
in order, cumulatively; `baseline` comes first and last (the process's own
drift). `--mode ff-native|ff-pluggable` puts fragfree behind PyTorch first
(fragfree.enable), and `--hold-gib G` allocates G GiB of tensors (1-64 MiB
each) through PyTorch's allocator, whichever it is, held throughout: the same
launches with the process's memory in fragfree's pages or in PyTorch's
segments. Prints a table and one JSON line.

  python3 bench/gpu/launch_cost.py [--mode torch] [--hold-gib 0]
      [--pages 1024,4096,16384] [--moves 5000]
"""
import argparse
import json
import os
import random
import statistics
import sys
import time

from vmm_calls import PAGE, Driver


def time_launches(fn, sync, launches, repeats):
    """Median (and min, max) microseconds per call of fn over `repeats`
    timings, each ended by sync() (the GPU's wait counted)."""
    per = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(launches):
            fn()
        sync()
        per.append((time.perf_counter() - t0) / launches * 1e6)
    return statistics.median(per), min(per), max(per)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pages", default="1024,4096,16384",
                   help="cumulative page counts to map, in order")
    p.add_argument("--moves", type=int, default=5000,
                   help="pages moved after the last count (0: none)")
    p.add_argument("--launches", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--compound", type=int, default=64,
                   help="pages per handle in the few-handles phases (0: skip them)")
    p.add_argument("--compound-pages", type=int, default=4096)
    p.add_argument("--mode", default="torch", choices=["torch", "ff-native", "ff-pluggable"])
    p.add_argument("--hold-gib", type=float, default=0)
    args = p.parse_args()

    if args.mode != "torch":
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(here, "..", "..", "integrations", "python"))
        import fragfree
        fragfree.enable(args.mode[3:])
    import torch

    torch.cuda.set_device(args.device)
    dev = torch.device("cuda", args.device)
    x = torch.zeros(1, device=dev)
    a = torch.randn(64, 64, device=dev)
    b = torch.randn(64, 64, device=dev)
    out = torch.empty(64, 64, device=dev)
    ops = {"add_": lambda: x.add_(1),
           "mm": lambda: torch.mm(a, b, out=out)}
    for fn in ops.values():  # warm: cuBLAS handles, kernels loaded
        for _ in range(200):
            fn()
    torch.cuda.synchronize()
    rng = random.Random(0)
    held, held_bytes = [], 0
    while held_bytes < args.hold_gib * 2**30:
        n = rng.randrange(1, 65) << 20
        held.append(torch.empty(n, dtype=torch.uint8, device=dev))
        held_bytes += n

    drv = Driver(args.device)
    counts = [int(c) for c in args.pages.split(",") if c]
    most = max(counts + [args.compound_pages, 1])
    va = drv.reserve(most * PAGE)
    spare = drv.reserve(most * PAGE)  # where moved pages go
    rows = []
    mapped = []  # (address, size) of each mapping
    handles = []

    def measure(phase):
        pages = sum(size for _, size in mapped) // PAGE
        row = {"phase": phase, "pages_mapped": pages, "mappings": len(mapped),
               "handles": len(handles)}
        for name, fn in ops.items():
            med, lo, hi = time_launches(fn, torch.cuda.synchronize, args.launches,
                                          args.repeats)
            row[name] = [round(med, 3), round(lo, 3), round(hi, 3)]
        rows.append(row)
        print(f"{phase:34s} {pages:6d} pages {len(mapped):6d} mappings {len(handles):6d} handles  " +
              "  ".join(f"{k} {v[0]:.2f} µs [{v[1]:.2f}-{v[2]:.2f}]"
                        for k, v in row.items() if k in ops), flush=True)

    def unmap_all():
        for addr, size in mapped:
            drv.check(drv.unmap(addr, size), "cuMemUnmap")
        for h in handles:
            drv.release(h)
        mapped.clear()
        handles.clear()

    measure("baseline")
    # The same pages as few handles: one mapping each, then the same handles
    # mapped a 2 MiB piece at a time (many mappings, few handles).
    k = args.compound
    if args.compound_pages >= k > 1:
        for whole in (True, False):
            refused = 0
            for j in range(args.compound_pages // k):
                h = drv.create(k * PAGE)
                handles.append(h)
                base = va + j * k * PAGE
                if whole:
                    drv.map(base, h, k * PAGE)
                    mapped.append((base, k * PAGE))
                else:
                    # A piece at a non-zero offset: the H200's driver refuses
                    # it (CUDA_ERROR_NOT_SUPPORTED, as vmm_calls.py --compound
                    # reports), so this phase is skipped there.
                    for i in range(k):
                        refused = drv.try_map(base + i * PAGE, h, PAGE, i * PAGE)
                        if refused:
                            break
                        mapped.append((base + i * PAGE, PAGE))
                if refused:
                    break
                drv.set_access(base, k * PAGE)
            phase = f"{k}-page handles, " + ("one mapping each" if whole else "mapped page by page")
            if refused:
                print(f"{phase}: cuMemMap of a piece refused (CUresult {refused}), skipped",
                      flush=True)
            else:
                measure(phase)
            unmap_all()
    # fragfree's layout: a handle and a mapping per 2 MiB page.
    for n in counts:
        while len(handles) < n:
            addr = va + len(handles) * PAGE
            h = drv.create()
            drv.map(addr, h)
            drv.set_access(addr, PAGE)
            handles.append(h)
            mapped.append((addr, PAGE))
        measure(f"{n} pages, one handle each")
    # Moves: page i goes from va to spare (mapped there first, then unmapped
    # at va), then back, cycling over the pages.
    for m in range(args.moves if handles else 0):
        i = m % len(handles)
        src, _ = mapped[i]
        dst = spare + i * PAGE if src == va + i * PAGE else va + i * PAGE
        drv.map(dst, handles[i])
        drv.set_access(dst, PAGE)
        drv.check(drv.unmap(src, PAGE), "cuMemUnmap")
        mapped[i] = (dst, PAGE)
    if args.moves and handles:
        measure(f"after {args.moves} moves")
    unmap_all()
    measure("baseline again")
    print("JSON " + json.dumps({"mode": args.mode, "hold_gib": args.hold_gib, "rows": rows,
                                "launches": args.launches, "repeats": args.repeats}))


if __name__ == "__main__":
    main()
