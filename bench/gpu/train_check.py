"""One training run of bench/gpu/train.py's workload, measured the way
the PyTorch-integration and LD_PRELOAD issues ask: the loss of every step, step
time (median of the last 20 steps), peak device memory in use, U_alloc (peak
allocated / peak reserved-or-mapped), and live bytes after the run and a cleanup
against the baseline before the model existed (a leak shows as a difference).

  python3 bench/gpu/train_check.py --mode MODE --model gpt2|llama [--ckpt]
        [--steps 100] [--batch 8] [--label X] [--snapshot FILE]

MODE: native (PyTorch's default), expandable (expandable_segments:True), async
(PyTorch's cudaMallocAsync backend on CUDA's own pool: what LD_PRELOAD's path
costs without fragfree),
enable (fragfree.enable(), pluggable), enable-native (fragfree.enable("native")),
preload (run under LD_PRELOAD=libfragfree.so; the stats come from fragfree).
Prints one line "RESULT {json}". bench/gpu/train_matrix.py runs the modes side by
side and compares them.
"""
import argparse
import gc
import json
import os
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--mode", required=True,
               choices=["native", "expandable", "async", "enable", "enable-native",
                        "preload"])
p.add_argument("--model", default="gpt2", choices=["gpt2", "llama"])
p.add_argument("--steps", type=int, default=100)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq-min", type=int, default=64)
p.add_argument("--seq-max", type=int, default=1024)
p.add_argument("--ckpt", action="store_true")
p.add_argument("--seed", type=int, default=0)
p.add_argument("--label", default="")
p.add_argument("--snapshot", default="", help="write a snapshot (pickle) at the end of training")
args = p.parse_args()

if args.mode == "expandable":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
if args.mode == "async":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"

ff = None
if args.mode in ("enable", "enable-native", "preload"):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "integrations", "python"))
    import fragfree as ff  # noqa: E402
    if args.mode != "preload":
        ff.enable("native" if args.mode == "enable-native" else "pluggable")

import torch  # noqa: E402

if args.snapshot and args.mode != "preload":
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=200_000)
torch.cuda.init()
dev = torch.device("cuda")


def fragfree_stats():
    return ff.stats(0) if ff is not None else None


def live_bytes():
    """Bytes allocated and not freed, as the allocator in use counts them."""
    torch.cuda.synchronize()
    if args.mode == "preload":
        return fragfree_stats()["allocated_bytes.all.current"]
    return torch.cuda.memory_allocated()


# cuBLAS keeps a workspace per handle and stream for the process's life, made
# on the first matmul: make it before the baseline so it is not counted as a
# leak.
w = torch.randn(256, 256, device=dev, requires_grad=True)
with torch.autocast("cuda", dtype=torch.bfloat16):
    (w @ w).sum().backward()
(w @ w).sum().backward()
del w
gc.collect()
baseline = live_bytes()
free_base, _ = torch.cuda.mem_get_info()

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads import LmWorkload  # noqa: E402

wl = LmWorkload(dev, args.model, ckpt=args.ckpt, batch=args.batch, seq_min=args.seq_min,
                seq_max=args.seq_max, seed=args.seed)
peak_used = 0
times, losses = [], []


def used():
    f, _ = torch.cuda.mem_get_info()
    return free_base - f


def probe():
    global peak_used
    peak_used = max(peak_used, used())


wl.probe = probe
for step in range(args.steps):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    losses.append(wl.step())  # synchronises
    times.append(time.perf_counter() - t0)
    probe()

res = dict(label=args.label or args.mode, mode=args.mode, model=args.model, ckpt=args.ckpt,
           batch=args.batch, steps=len(times), peak_used_gib=round(peak_used / 2**30, 3))
tail = sorted(times[-20:])
res["step_ms_median"] = round(1000 * tail[len(tail) // 2], 2)
if args.mode in ("native", "expandable", "async"):
    res["peak_allocated"] = torch.cuda.max_memory_allocated()
    res["peak_reserved"] = torch.cuda.max_memory_reserved()
else:
    st = fragfree_stats()
    res["peak_allocated"] = st["allocated_bytes.all.peak"]
    res["peak_reserved"] = st["mapped_bytes.peak"]
    res["fragfree_allocations"] = st["allocation.all.allocated"]
    res["pages_remapped"] = st.get("pages_remapped")
    if args.mode != "preload":  # torch's own API answers from fragfree
        res["torch_max_allocated"] = torch.cuda.max_memory_allocated()
res["u_alloc"] = round(res["peak_allocated"] / max(1, res["peak_reserved"]), 4)
if args.snapshot:
    if ff is not None:
        ff.dump_snapshot(args.snapshot)
    else:
        torch.cuda.memory._dump_snapshot(args.snapshot)
    res["snapshot"] = args.snapshot

wl.close()
del wl
gc.collect()
torch.cuda.empty_cache()
res["live_before"] = baseline
res["live_after_cleanup"] = live_bytes()
res["leak_bytes"] = res["live_after_cleanup"] - baseline
res["losses"] = [round(v, 5) for v in losses]
print("RESULT " + json.dumps(res), flush=True)
