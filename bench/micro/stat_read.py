"""What one stats figure costs from Python, the way pluggable mode's
torch.cuda.memory_allocated() reads it: the whole stats JSON parsed
(Library.stats, ff_stats_json: the driver's free memory read on CUDA) against
the one figure (Library.stat, ff_get_stat: no JSON, no driver call), and one
figure counted from the free blocks (inactive_split.all.current: what the
native adapter's getDeviceStats walks for), with N live blocks and a free one
after every --live-per-free of them.

  FRAGFREE_LIBRARY=build/lib/libfragfree.so PYTHONPATH=integrations/python \\
      python3 bench/micro/stat_read.py [--live 100,1000,10000] [--live-per-free 1]
      [--repeat 5]

Prints per count the median µs a read over --repeat alternated batches of each.
The host backend unless FRAGFREE_CONF says otherwise (backend:cuda on a GPU).
"""
import argparse
import os
import statistics
import time

import fragfree

KEY = "allocated_bytes.all.current"
WALKED = "inactive_split.all.current"


def per_read_us(read, reads):
    t0 = time.perf_counter()
    for _ in range(reads):
        read()
    return 1e6 * (time.perf_counter() - t0) / reads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--live", default="100,1000,10000")
    ap.add_argument("--live-per-free", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--reads", type=int, default=200)
    args = ap.parse_args()
    lib = fragfree.library()
    lib.init(os.environ.get("FRAGFREE_CONF")
             or "backend:host,host_capacity_mb:65536,host_granularity_kb:2048")
    ways = {"stats JSON": lambda: lib.stats(0)[KEY], "ff_get_stat": lambda: lib.stat(0, KEY),
            WALKED: lambda: lib.stat(0, WALKED)}
    print("| live blocks | " + " | ".join(f"{w}, µs a read" for w in ways) + " | ratio |")
    print("|---|" + "---|" * (len(ways) + 1))
    step = args.live_per_free + 1
    for live in (int(n) for n in args.live.split(",")):
        ptrs = [lib.malloc(4096 * (1 + i % 7), 0, None) for i in range(live * step // (step - 1))]
        freed, kept = ptrs[::step], [p for i, p in enumerate(ptrs) if i % step]
        for p in freed:
            lib.free(p)
        assert lib.stat(0, KEY) == lib.stats(0)[KEY]
        times = {w: [] for w in ways}
        for _ in range(args.repeat):
            for w, read in ways.items():
                times[w].append(per_read_us(read, args.reads))
        med = {w: statistics.median(t) for w, t in times.items()}
        cells = [f"{med[w]:.2f}" for w in ways]
        print(f"| {live} | " + " | ".join(cells) + f" | {med['stats JSON'] / med['ff_get_stat']:.1f}× |")
        for p in kept:
            lib.free(p)


if __name__ == "__main__":
    main()
