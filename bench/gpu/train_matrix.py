"""Runs bench/gpu/train_check.py for several workloads under several allocators,
the allocators alternated within each workload, and compares them with PyTorch's
default allocator: losses (max |difference| over all steps), U_alloc, step time
ratio, peak device memory in use, and live bytes after the run and a cleanup.

  python3 bench/gpu/train_matrix.py --lib path/to/libfragfree.so --out DIR
      [--configs gpt2,gpt2+ckpt,llama,llama+ckpt] [--modes native,enable,preload]
      [--steps 100] [--rounds 1]
  --rounds N runs every mode N times, alternated (native, enable, preload,
  native, ...): step time is then the median of the N runs' medians, with the
  spread shown, because the shared GPU machines drift by more than the
  differences measured.
  A mode may carry its own FRAGFREE_CONF: enable@reclaim_before_grow:False.

Writes DIR/train_matrix.json (every RESULT) and DIR/train_matrix.md (the table),
and prints the table last.
"""
import argparse
import json
import os
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--lib", required=True)
p.add_argument("--out", required=True)
p.add_argument("--configs", default="gpt2,gpt2+ckpt,llama,llama+ckpt")
p.add_argument("--modes", default="native,enable,preload")
p.add_argument("--steps", type=int, default=100)
p.add_argument("--timeout", type=float, default=240)
p.add_argument("--rounds", type=int, default=1)
args = p.parse_args()
os.makedirs(args.out, exist_ok=True)
here = os.path.dirname(os.path.abspath(__file__))
lib = os.path.abspath(args.lib)

results = []
runs = [(config, rnd, spec) for config in args.configs.split(",")
        for rnd in range(args.rounds) for spec in args.modes.split(",")]
for config, rnd, spec in runs:
    model, _, extra = config.partition("+")
    # "enable@reclaim_before_grow:False": a mode with its own FRAGFREE_CONF.
    mode, _, conf = spec.partition("@")
    cmd = [sys.executable, os.path.join(here, "train_check.py"), "--mode", mode,
           "--model", model, "--steps", str(args.steps)]
    if extra == "ckpt":
        cmd.append("--ckpt")
    env = dict(os.environ, FRAGFREE_LIBRARY=lib)
    if conf:
        env["FRAGFREE_CONF"] = conf
    if mode == "preload":
        env["LD_PRELOAD"] = lib
    name = f"{config}-{spec}" + (f"-r{rnd}" if args.rounds > 1 else "")
    t0 = time.time()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    with open(os.path.join(args.out, f"train_{name}.log"), "w") as f:
        f.write(r.stdout + "\n--- stderr ---\n" + r.stderr)
    lines = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
    if r.returncode != 0 or not lines:
        print(f"{name}: FAILED rc={r.returncode} {r.stderr.strip().splitlines()[-1:]}", flush=True)
        results.append(dict(config=config, mode=spec, failed=True))
        continue
    res = json.loads(lines[-1][7:])
    res["config"], res["wall_s"] = config, round(time.time() - t0, 1)
    res["mode"], res["round"] = spec, rnd
    results.append(res)
    print(f"{name}: {res['steps']} steps, {res['step_ms_median']} ms, U {res['u_alloc']}, "
          f"leak {res['leak_bytes']} B ({res['wall_s']} s)", flush=True)

with open(os.path.join(args.out, "train_matrix.json"), "w") as f:
    json.dump(results, f, indent=1)


def median(values):
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


rows = ["| workload | allocator | max abs loss diff vs native | U_alloc | step ms (median last 20"
        + (f"; median of {args.rounds} runs [min–max]" if args.rounds > 1 else "") + ") | "
        "step time ÷ native | peak used GiB | live after cleanup − before (B) | fragfree allocations |",
        "|---|---|---|---|---|---|---|---|---|"]
for config in args.configs.split(","):
    ok = [r for r in results if r["config"] == config and not r.get("failed")]
    base_runs = [r for r in ok if r["mode"] == "native"]
    base_ms = median([r["step_ms_median"] for r in base_runs]) if base_runs else None
    for spec in args.modes.split(","):
        mine = [r for r in ok if r["mode"] == spec]
        if not mine:
            rows.append(f"| {config} | {spec} | FAILED | | | | | | |")
            continue
        r = mine[0]
        ms = [x["step_ms_median"] for x in mine]
        step = f"{median(ms):.2f}" + (f" [{min(ms):.1f}–{max(ms):.1f}]" if len(ms) > 1 else "")
        diff = ratio = ""
        if base_runs:
            base = base_runs[0]
            n = min(len(base["losses"]), len(r["losses"]))
            diff = f"{max(abs(a - b) for a, b in zip(base['losses'][:n], r['losses'][:n])):.4g}"
            ratio = f"{median(ms) / base_ms:.3f}"
        rows.append(f"| {config} | {spec} | {diff} | {r['u_alloc']:.3f} | {step} | "
                    f"{ratio} | {r['peak_used_gib']} | {r['leak_bytes']} | "
                    f"{r.get('fragfree_allocations', '')} |")
table = "\n".join(rows)
with open(os.path.join(args.out, "train_matrix.md"), "w") as f:
    f.write(table + "\n")
print(table)
