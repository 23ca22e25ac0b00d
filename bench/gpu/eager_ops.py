#!/usr/bin/env python3
"""The CPU cost of eager PyTorch ops that allocate their results, under each
way of running PyTorch: steps whose GPU waits on the CPU (many small ops) are
as fast as this per-op cost. Two loops, each on the GPU, synchronised at the
end of every timed chunk:

  chain   x = (x * a + b).relu() on a 16 KiB tensor: three launches and three
          allocations (the previous results freed) per iteration
  mlp     a 4-layer MLP (width 256, batch 64) forward, backward and an SGD
          update without an optimizer object: ~40 launches per iteration

Modes (each run its own process, the modes alternated --rounds times):
  torch         PyTorch's default allocator
  loaded        the same, with `import fragfree` and libfragfree.so loaded but
                not enabled (whether loading the library alone changes it)
  ff-native     fragfree.enable("native")
  ff-pluggable  fragfree.enable("pluggable")
  ff-preload    LD_PRELOAD=libfragfree.so
A mode may carry fragfree options after "@" (FRAGFREE_CONF syntax, "+" for
","), e.g. ff-native@time_calls:True. Prints per loop and mode the median
microseconds per iteration, its ratio to torch's in the same round and that
ratio's median [min-max] over rounds, then one JSON line.

  python3 bench/gpu/eager_ops.py --lib libfragfree.so [--modes ...] [--rounds 3]
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("torch", "loaded", "ff-native", "ff-pluggable", "ff-preload")


def child(mode, seconds):
    base = mode.partition("@")[0]
    if base != "torch":
        sys.path.insert(0, os.path.join(HERE, "..", "..", "integrations", "python"))
        import fragfree
        if base == "loaded":
            ctypes.CDLL(os.environ["FRAGFREE_LIBRARY"])
        elif base in ("ff-native", "ff-pluggable"):
            fragfree.enable(base[3:])
    import torch
    dev = torch.device("cuda")
    torch.manual_seed(0)
    x0 = torch.randn(4096, device=dev)
    layers = [torch.randn(256, 256, device=dev, requires_grad=True) for _ in range(4)]
    inp = torch.randn(64, 256, device=dev)

    def chain(n):
        x = x0
        for _ in range(n):
            x = (x * 1.0001 + 0.5).relu()

    def mlp(n):
        for _ in range(n):
            h = inp
            for w in layers:
                h = torch.tanh(h @ w)
            h.square().mean().backward()
            with torch.no_grad():
                for w in layers:
                    w.sub_(0.001 * w.grad)
                    w.grad = None

    out = {}
    for name, fn, chunk in (("chain", chain, 2000), ("mlp", mlp, 200)):
        fn(chunk)  # warm
        torch.cuda.synchronize()
        per = []
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end or len(per) < 5:
            t0 = time.perf_counter()
            fn(chunk)
            torch.cuda.synchronize()
            per.append((time.perf_counter() - t0) / chunk * 1e6)
        out[name] = round(statistics.median(per), 3)
    print("RESULT " + json.dumps(out), flush=True)


def run_env(mode, lib):
    base, _, extra = mode.partition("@")
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["FRAGFREE_LIBRARY"] = lib
    if base == "ff-preload":
        env["LD_PRELOAD"] = lib
    if extra:
        conf = env.get("FRAGFREE_CONF", "")
        env["FRAGFREE_CONF"] = ",".join(c for c in (conf, extra.replace("+", ",")) if c)
    return env


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lib", required=False, default="")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=3, help="timed seconds per loop")
    p.add_argument("--child", default="")
    args = p.parse_args()
    if args.child:
        child(args.child, args.seconds)
        return
    modes = args.modes.split(",")
    for m in modes:
        if m.partition("@")[0] not in MODES:
            p.error(f"unknown mode {m!r} (one of {', '.join(MODES)})")
        if m != "torch" and not args.lib:
            p.error(f"mode {m} needs --lib")
    lib = os.path.abspath(args.lib) if args.lib else ""
    runs = []
    for rnd in range(args.rounds):
        order = modes[rnd % len(modes):] + modes[:rnd % len(modes)]
        for mode in order:
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode,
                                "--seconds", str(args.seconds)],
                               env=run_env(mode, lib), capture_output=True, text=True,
                               timeout=300)
            lines = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
            if r.returncode != 0 or not lines:
                tail = r.stderr.strip().splitlines()[-3:]
                print(f"round {rnd} {mode}: FAILED rc={r.returncode} {tail}", flush=True)
                continue
            res = json.loads(lines[-1][7:])
            runs.append(dict(mode=mode, round=rnd, **res))
            print(f"round {rnd} {mode:28s} " +
                  "  ".join(f"{k} {v:.2f} µs/iter" for k, v in res.items()), flush=True)
    print("\n| loop | mode | µs/iter (median of rounds) | ÷ torch, same round: median [min–max] |")
    print("|---|---|---|---|")
    for loop in ("chain", "mlp"):
        base = {r["round"]: r[loop] for r in runs if r["mode"] == "torch"}
        for mode in modes:
            mine = [r for r in runs if r["mode"] == mode]
            if not mine:
                continue
            ratios = [r[loop] / base[r["round"]] for r in mine if r["round"] in base]
            med = statistics.median(r[loop] for r in mine)
            spread = (f"{statistics.median(ratios):.3f} [{min(ratios):.3f}–{max(ratios):.3f}]"
                      if ratios else "—")
            print(f"| {loop} | {mode} | {med:.2f} | {spread} |")
    print("JSON " + json.dumps({"rounds": args.rounds, "runs": runs}))


if __name__ == "__main__":
    main()
