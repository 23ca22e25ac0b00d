#!/usr/bin/env python3
"""Whether GPU kernels run slower on memory mapped through CUDA's virtual
memory API than on cudaMalloc's, in one process, side by side.

Backings, each --gib GiB:
  cudaMalloc  one cuMemAlloc (what PyTorch's default allocator gets)
  vmm-pages   a reserved range with one 2 MiB handle mapped per page (how
              fragfree backs its arenas: every page its own handle)
  vmm-one     a reserved range with one handle of the whole size mapped once
Kernels, on the backing under test:
  copy        the second half copied over the first (sequential bandwidth)
  gather      index_select of random 4 KiB rows from the whole backing (the
              GPU's address translation under the most pressure)
  matmul      fp32 4096 x 4096 matmul (the FSDP workload's layer)
The gather's and the matmul's outputs are in PyTorch's memory for every
backing; their inputs and both sides of the copy are in the backing.
Each round times every kernel on every backing with CUDA events, the
backings' order shuffled per round; a kernel's time on a backing is divided by
its time on cudaMalloc in the same round. Prints a table (median ratio and
min-max over rounds) and one JSON line.

  python3 bench/gpu/vmm_kernel_speed.py [--gib 4] [--rounds 15] [--device 0]
"""
import argparse
import json
import random
import statistics

import torch

from vmm_calls import PAGE, Driver


class Span:
    """`size` bytes of device memory at `ptr` as a flat float32 tensor."""

    def __init__(self, ptr, size, device):
        self.__cuda_array_interface__ = {
            "shape": (size // 4,), "typestr": "<f4", "data": (ptr, False), "version": 3}
        self.tensor = torch.as_tensor(self, device=f"cuda:{device}")


def backings(drv, size):
    """Name -> device address of `size` bytes, in each way of backing it."""
    out = {"cudaMalloc": drv.buffer(size)}
    va = drv.reserve(size)
    for i in range(size // PAGE):
        drv.map(va + i * PAGE, drv.create(PAGE), PAGE)
    drv.set_access(va, size)
    out["vmm-pages"] = va
    va = drv.reserve(size)
    drv.map(va, drv.create(size), size)
    drv.set_access(va, size)
    out["vmm-one"] = va
    return out


def kernels(t, rows_gathered, seed):
    """Name -> a callable that runs the kernel on flat float32 tensor `t`."""
    n = t.numel()
    half = n // 2
    rows = t.view(-1, 1024)  # 4 KiB rows
    gen = torch.Generator(device=t.device).manual_seed(seed)
    idx = torch.randint(0, rows.shape[0], (rows_gathered,),
                        device=t.device, generator=gen)
    # Outputs in PyTorch's own memory, alike for every backing (PyTorch
    # refuses an output in the inputs' storage).
    out = torch.empty(rows_gathered, 1024, device=t.device)
    a = t[:4096 * 4096].view(4096, 4096)
    b = t[4096 * 4096:2 * 4096 * 4096].view(4096, 4096)
    c = torch.empty(4096, 4096, device=t.device)
    return {
        "copy": lambda: t[:half].copy_(t[half:2 * half]),
        "gather": lambda: torch.index_select(rows, 0, idx, out=out),
        "matmul": lambda: torch.matmul(a, b, out=c),
    }


def time_ms(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gib", type=int, default=4)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--reps", type=int, default=10, help="launches timed together")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.cuda.set_device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    drv = Driver(args.device)
    size = args.gib << 30
    spans = {name: Span(ptr, size, args.device).tensor
             for name, ptr in backings(drv, size).items()}
    for t in spans.values():
        t.normal_()
    rows_gathered = min(size // 4096 // 4, 1 << 18)
    work = {name: kernels(t, rows_gathered, args.seed) for name, t in spans.items()}
    rng = random.Random(args.seed)
    names = list(spans)
    ms = {(b, k): [] for b in names for k in work[names[0]]}
    for _ in range(args.rounds):
        order = names[:]
        rng.shuffle(order)
        for b in order:
            for k, fn in work[b].items():
                ms[(b, k)].append(time_ms(fn, args.reps))
    rows = []
    print(f"| kernel | backing | median ms | ÷ cudaMalloc, median [min–max] over {args.rounds} rounds |")
    print("|---|---|---|---|")
    for k in work[names[0]]:
        for b in names:
            ratios = [x / y for x, y in zip(ms[(b, k)], ms[("cudaMalloc", k)])]
            rows.append({"kernel": k, "backing": b, "ms": statistics.median(ms[(b, k)]),
                         "ratio": statistics.median(ratios), "lo": min(ratios),
                         "hi": max(ratios)})
            r = rows[-1]
            print(f"| {k} | {b} | {r['ms']:.3f} | {r['ratio']:.4f} "
                  f"[{r['lo']:.4f}–{r['hi']:.4f}] |")
    print("RESULT " + json.dumps({"gib": args.gib, "rounds": args.rounds, "rows": rows}))


if __name__ == "__main__":
    main()
