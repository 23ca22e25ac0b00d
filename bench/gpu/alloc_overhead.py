"""What one tensor allocation costs on the CPU under each way of running
PyTorch, measured through PyTorch itself (torch.empty + del), so the figure
includes PyTorch's allocator frontend, fragfree's entry point (pluggable,
LD_PRELOAD's interposed cudaMallocAsync) and the engine:

  python3 bench/gpu/alloc_overhead.py --lib path/to/libfragfree.so [--modes ...]

Modes: native (PyTorch's caching allocator), async (PyTorch's cudaMallocAsync
backend on CUDA's own pool), preload (LD_PRELOAD=libfragfree.so, which selects
that backend and serves it), enable (fragfree.enable(), pluggable),
enable-native (fragfree.enable("native")). Under LD_PRELOAD, PyTorch's allocator is
fragfree's native adapter when the fragfree Python package is found, else
PyTorch's cudaMallocAsync backend over the interposer (docs/preload.md); the
child here puts no package on its path, so "preload" is the interposer unless one
is installed, and the line the library prints to say which is reported under the
table. Each mode runs in its own process,
the modes alternated --rounds times; prints the median per pattern and mode and
the ratio to native. Patterns: "pair" (allocate and free one tensor, sizes
cycling 4 KiB..64 MiB), "layer" (allocate 64 tensors of mixed sizes, then free
them in allocation order), "lifo" (the same, freed in reverse), "handoff"
(FSDP's pattern: allocate on a side stream, hand the tensor to the current
stream with record_stream, free it: the free records an event on the other
stream, a later allocation checks it; sizes as "pair").
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PATTERN_SIZES = [4096, 65536, 1 << 20, 3 << 20, 16 << 20, 64 << 20, 12288, 786432]


def child(mode, iters):
    if mode in ("enable", "enable-native"):
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                        "integrations", "python"))
        import fragfree as ff
        ff.enable("native" if mode == "enable-native" else "pluggable")
    import torch
    dev = torch.device("cuda")
    torch.empty(1, device=dev)
    torch.cuda.synchronize()
    out = {}
    sizes = PATTERN_SIZES

    def pair(n):
        for i in range(n):
            x = torch.empty(sizes[i & 7], dtype=torch.uint8, device=dev)
            del x

    def batch(n, reverse):
        for _ in range(n // 64):
            xs = [torch.empty(sizes[(i * 5) & 7] + 512 * i, dtype=torch.uint8, device=dev)
                  for i in range(64)]
            if reverse:
                xs.reverse()
            while xs:
                xs.pop(0)

    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()

    def handoff(n):
        for i in range(n):
            with torch.cuda.stream(side):
                x = torch.empty(sizes[i & 7], dtype=torch.uint8, device=dev)
            x.record_stream(main)
            del x

    def empty_loop(n):  # the Python loop and torch.empty's dispatch, no allocation
        for i in range(n):
            x = torch.empty(0, dtype=torch.uint8, device=dev)
            del x

    for name, fn in (("pair", lambda n: pair(n)), ("layer", lambda n: batch(n, False)),
                     ("lifo", lambda n: batch(n, True)), ("handoff", handoff),
                     ("zero_size", empty_loop)):
        fn(iters // 10)  # warm up: the cache holds every size
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(iters)
        torch.cuda.synchronize()
        out[name] = 1e9 * (time.perf_counter() - t0) / iters
    print("RESULT " + json.dumps(out), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", default="")
    p.add_argument("--modes", default="native,async,preload,enable")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=200000)
    p.add_argument("--child", default="")
    args = p.parse_args()
    if args.child:
        child(args.child, args.iters)
        return
    modes = args.modes.split(",")
    runs = {m: [] for m in modes}
    notices = {}
    for _ in range(args.rounds):
        for mode in modes:
            env = dict(os.environ)
            env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
            if mode == "async":
                env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
            if mode == "preload":
                env["LD_PRELOAD"] = os.path.abspath(args.lib)
            if mode.startswith("enable") and args.lib:
                env["FRAGFREE_LIBRARY"] = os.path.abspath(args.lib)
            r = subprocess.run([sys.executable, __file__, "--child", mode, "--iters",
                                str(args.iters)], env=env, capture_output=True, text=True,
                               timeout=300)
            line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
            if r.returncode != 0 or not line:
                print(f"{mode}: failed rc={r.returncode}\n{r.stderr[-2000:]}")
                continue
            runs[mode].append(json.loads(line[0][7:]))
            notices.update({mode: l for l in r.stderr.splitlines()
                            if l.startswith("fragfree: LD_PRELOAD:")})
    patterns = ["pair", "layer", "lifo", "handoff", "zero_size"]
    print("ns per allocation+free (median of %d rounds; ratio to native)" % args.rounds)
    print("%-14s" % "mode" + "".join("%20s" % p_ for p_ in patterns))
    base = {}
    for mode in modes:
        if not runs[mode]:
            continue
        med = {p_: statistics.median(r[p_] for r in runs[mode]) for p_ in patterns}
        if mode == "native":
            base = med
        cells = []
        for p_ in patterns:
            ratio = " (%.2fx)" % (med[p_] / base[p_]) if base else ""
            cells.append("%20s" % ("%.0f%s" % (med[p_], ratio)))
        print("%-14s" % mode + "".join(cells))
    for mode, notice in notices.items():
        print(f"{mode}: {notice}")
    print("RAW " + json.dumps(runs))


if __name__ == "__main__":
    main()
