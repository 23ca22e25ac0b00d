#!/usr/bin/env python3
"""Sleep and wake, end to end (docs/sleep.md): pause a training run, use its
GPU memory for inference with another model, resume, and train on as if
nothing had happened.

1. Reference: a GPT-style model (plain torch, fp32, deterministic kernels)
   trains for --steps-before + --steps-after steps; its losses and final
   parameters are kept.
2. The same run again (same seeds) with its parameters, gradients, AdamW state
   and activations allocated inside ``fragfree.region("train")``; after
   --steps-before steps a CUDA graph of an eval forward pass is captured, then
   ``fragfree.pause(["train"], backup="cpu")``: the device's free memory must
   rise by the tag's footprint.
3. In the freed memory: a second model (GPT-2-medium-sized
   transformers.GPT2LMHeadModel built from its config, fp16, no download;
   the plain torch model when transformers is missing) generates tokens
   greedily, then is freed.
4. ``fragfree.resume(["train"])``: parameter addresses unchanged, the graph
   replays to the same output, and training continues for --steps-after
   steps. Every loss and every final parameter must equal the reference's
   bit for bit.

Gradients: backward runs on autograd's device thread, outside the region (a
region tags the allocations of the thread that opened it), so the script
creates the ``.grad`` tensors inside the region and zeroes them in place
(``zero_grad(set_to_none=False)``): backward accumulates into them. Library
caches made on first use (cuBLAS workspaces) are made before any region, so
that the pause does not take them from the inference model.

Works with fragfree enabled in native mode (``--mode native``, the default;
``auto``/``pluggable`` too) and under ``LD_PRELOAD=libfragfree.so`` (the
library's bootstrap installs the native adapter; the script then does not
call enable). ``--device cpu`` runs the same steps on the CPU against the
library's host backend (a check of the script itself: nothing is paused).
Prints a table and one JSON line; exits 1 when a check fails.

  FRAGFREE_LIBRARY=build/lib/libfragfree.so PYTHONPATH=integrations/python \\
      python3 bench/gpu/sleep_demo.py
  LD_PRELOAD=$PWD/build/lib/libfragfree.so PYTHONPATH=integrations/python \\
      python3 bench/gpu/sleep_demo.py
"""
import argparse
import gc
import json
import math
import os
import sys
import time

GiB = 1 << 30

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
ap.add_argument("--mode", choices=("native", "auto", "pluggable"), default="native",
                help="fragfree.enable(mode=...) (ignored under LD_PRELOAD)")
ap.add_argument("--steps-before", type=int, default=20)
ap.add_argument("--steps-after", type=int, default=20)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--layers", type=int, default=None)
ap.add_argument("--width", type=int, default=None)
ap.add_argument("--vocab", type=int, default=None)
ap.add_argument("--seq", type=int, default=None)
ap.add_argument("--batch", type=int, default=None)
ap.add_argument("--new-tokens", type=int, default=32)
args = ap.parse_args()
cuda = args.device == "cuda"
# Model sizes: ~218 M parameters (3.5 GB of fp32 training state) on the GPU,
# a toy on the CPU.
for key, gpu, cpu in (("layers", 12, 2), ("width", 1024, 64), ("vocab", 32768, 256),
                      ("seq", 256, 32), ("batch", 8, 4)):
    if getattr(args, key) is None:
        setattr(args, key, gpu if cuda else cpu)

# Deterministic cuBLAS: set before CUDA is initialised.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
preloaded = "libfragfree" in os.environ.get("LD_PRELOAD", "")
if preloaded:
    import torch  # the bootstrap installs the native adapter here
    import fragfree
else:
    import fragfree
    if cuda:
        fragfree.enable(mode=args.mode)
    else:
        # No GPU: the library on its host backend (regions and pause/resume
        # run; CPU tensors do not come from it).
        fragfree.library().init("backend:host,host_capacity_mb:64")
    import torch
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

# warn_only: an op without a deterministic kernel warns; the bitwise
# comparison with the reference run is the check.
torch.use_deterministic_algorithms(True, warn_only=True)
torch.backends.cudnn.benchmark = False
torch.backends.cuda.matmul.allow_tf32 = False
dev = torch.device(args.device)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        # Plain attention (no fused kernel): deterministic forward and backward.
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        att = att.masked_fill(mask[:t, :t], float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class LM(nn.Module):
    def __init__(self, vocab, d, layers, seq):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, max(1, d // 64)) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x, self.mask)
        return self.head(self.ln(x))


def batch(step):
    """The step's tokens, the same in every run (a CPU generator per step)."""
    g = torch.Generator().manual_seed(args.seed * 100003 + step)
    data = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g)
    return data[:, :-1].contiguous().to(dev), data[:, 1:].contiguous().to(dev)


class Trainer:
    """Model, optimizer and gradients, all allocated inside region `tag`."""

    def __init__(self, tag):
        self.tag = tag
        torch.manual_seed(args.seed)
        model = LM(args.vocab, args.width, args.layers, args.seq)  # CPU init: same in every run
        with fragfree.region(tag):
            self.model = model.to(dev)
            for p in self.model.parameters():
                p.grad = torch.zeros_like(p)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-4, weight_decay=0.1)
        self.losses = []

    def train(self, steps):
        for _ in range(steps):
            step = len(self.losses)
            with fragfree.region(self.tag):
                x, y = batch(step)
                loss = F.cross_entropy(self.model(x).view(-1, args.vocab), y.view(-1))
                loss.backward()  # accumulates into the region's .grad tensors
                self.opt.step()  # AdamW state made at the first step: in the region
                self.opt.zero_grad(set_to_none=False)
            self.losses.append(loss.item())

    def params(self):
        return list(self.model.parameters())


def sync():
    if cuda:
        torch.cuda.synchronize()


def free_bytes():
    return torch.cuda.mem_get_info()[0] if cuda else 0


def tag_info(tag):
    for d in fragfree.paused().get("devices", []):
        for t in d["tags"]:
            if t["tag"] == tag and (not cuda or d["device"] == torch.cuda.current_device()):
                return t
    return {"mapped_bytes": 0, "live_bytes": 0}


def inference():
    """A second model in the freed memory: builds it, generates greedily,
    frees it. (description, parameters, seconds, tokens, peak bytes it
    allocated on top of what was allocated before: the paused tensors count
    as allocated)."""
    t0 = time.perf_counter()
    base = 0
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        GPT2LMHeadModel = None
    torch.manual_seed(args.seed + 1)
    prompt = torch.randint(0, 1000, (4, 16)).to(dev)
    dtype = torch.float16 if cuda else torch.float32
    if GPT2LMHeadModel is not None:
        cfg = GPT2Config(n_layer=24, n_embd=1024, n_head=16) if cuda else GPT2Config(
            n_layer=2, n_embd=64, n_head=2)
        model = GPT2LMHeadModel(cfg).to(device=dev, dtype=dtype).eval()
        what = f"transformers GPT2LMHeadModel ({cfg.n_layer} layers, {cfg.n_embd} wide)"
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=args.new_tokens, do_sample=False,
                                 pad_token_id=0, attention_mask=torch.ones_like(prompt))
    else:
        layers, d = (24, 1024) if cuda else (2, 64)
        seq = prompt.shape[1] + args.new_tokens
        model = LM(50257 if cuda else 1000, d, layers, seq).to(device=dev, dtype=dtype).eval()
        what = f"plain torch LM ({layers} layers, {d} wide; transformers not installed)"
        out = prompt
        with torch.no_grad():
            for _ in range(args.new_tokens):
                out = torch.cat([out, model(out)[:, -1].argmax(-1, keepdim=True)], 1)
    sync()
    n_params = sum(p.numel() for p in model.parameters())
    tokens = int(out.shape[0] * (out.shape[1] - prompt.shape[1]))
    peak = torch.cuda.max_memory_allocated() - base if cuda else 0
    del model, out, prompt
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return what, n_params, time.perf_counter() - t0, tokens, peak


def capture_graph(trainer):
    """A CUDA graph of an eval forward pass over the tagged parameters
    (captured before the pause: its memory is the graph pool's, untagged).
    (replay function -> output unchanged, expected output, what must stay
    alive) or None on the CPU."""
    if not cuda:
        return None
    x, _ = batch(10**6)
    model = trainer.model
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(2):
            model(x)  # warm-up
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        y = model(x)
    graph.replay()
    sync()
    expected = y.clone()

    def replay():
        graph.replay()
        sync()
        return torch.equal(y, expected)

    return replay, expected, (graph, x, y)


def main():
    results = {"mode": "preload" if preloaded else (args.mode if cuda else "host"),
               "fragfree_mode": fragfree.mode(), "device": args.device}
    if cuda:
        results["gpu"] = torch.cuda.get_device_name()
    total = args.steps_before + args.steps_after
    # Library caches made on first use (this thread's cuBLAS workspace) are
    # made here, outside any region: made inside "train", they would be
    # paused with it while the inference model needs them.
    w = torch.ones(64, 64, device=dev)
    (w @ w).sum().item()
    del w

    # 1. Reference run, no pause.
    ref = Trainer("reference")
    t0 = time.perf_counter()
    ref.train(total)
    sync()
    results["reference_s"] = time.perf_counter() - t0
    ref_losses = ref.losses
    ref_params = [p.detach().cpu() for p in ref.params()]
    del ref
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()

    # 2. The same run, paused half way.
    run = Trainer("train")
    run.train(args.steps_before)
    graph = capture_graph(run)
    sync()
    ptrs = [p.data_ptr() for p in run.params()] + [
        t.data_ptr() for s in run.opt.state.values() for t in s.values() if torch.is_tensor(t)]
    info = tag_info("train")
    footprint = info["mapped_bytes"]
    results["n_params"] = sum(p.numel() for p in run.params())
    results["footprint_GiB"] = footprint / GiB
    free0 = free_bytes()
    t0 = time.perf_counter()
    fragfree.pause(["train"], backup="cpu")
    results["pause_s"] = time.perf_counter() - t0
    free1 = free_bytes()
    results["freed_GiB"] = (free1 - free0) / GiB
    results["paused"] = tag_info("train").get("paused", False)
    # Pinning fresh host memory maps it into the GPU's page tables (~8 bytes
    # per 4 KiB: docs/sleep.md), which comes out of device memory.
    results["freed_ge_footprint"] = (not cuda) or (free1 - free0) + footprint * 0.003 >= footprint

    # 3. Inference in the freed memory (the RNG states are the training run's).
    rng = (torch.get_rng_state(), torch.cuda.get_rng_state() if cuda else None)
    what, n, secs, tokens, peak = inference()
    torch.set_rng_state(rng[0])
    if cuda:
        torch.cuda.set_rng_state(rng[1])
    results.update({"inference_model": what, "inference_params": n, "inference_s": secs,
                    "inference_tokens": tokens, "inference_peak_GiB": peak / GiB})

    # 4. Resume and continue.
    t0 = time.perf_counter()
    fragfree.resume(["train"])
    sync()
    results["resume_s"] = time.perf_counter() - t0
    results["same_addresses"] = ptrs == [p.data_ptr() for p in run.params()] + [
        t.data_ptr() for s in run.opt.state.values() for t in s.values() if torch.is_tensor(t)]
    results["graph_replay_ok"] = graph[0]() if graph else None
    run.train(args.steps_after)
    sync()
    diffs = [abs(a - b) for a, b in zip(run.losses, ref_losses)]
    results["steps"] = total
    results["losses_identical"] = run.losses == ref_losses
    results["max_abs_loss_diff"] = max(diffs) if diffs else 0.0
    results["params_identical"] = all(
        torch.equal(p.detach().cpu(), q) for p, q in zip(run.params(), ref_params))
    results["first_loss"], results["last_loss"] = run.losses[0], run.losses[-1]
    results["loss_at_pause"] = run.losses[args.steps_before - 1]
    checks = ("freed_ge_footprint", "same_addresses", "graph_replay_ok", "losses_identical",
              "params_identical")
    results["ok"] = all(results[k] is not False for k in checks)
    del graph, run
    gc.collect()

    def ok(v):
        return "n/a" if v is None else ("ok" if v else "FAIL")

    r = results
    print(f"fragfree sleep/wake demo: mode {r['mode']} (fragfree {r['fragfree_mode']}), "
          f"{r.get('gpu', 'CPU, host backend')}")
    rows = [
        ("training model", f"{r['n_params'] / 1e6:.1f} M params; tag 'train' maps "
                           f"{r['footprint_GiB']:.2f} GiB (params, grads, AdamW state)"),
        ("pause (cpu backup)", f"{r['pause_s']:.3f} s; device free memory "
                               f"+{r['freed_GiB']:.2f} GiB  [{ok(r['freed_ge_footprint'])}]"),
        ("inference", f"{r['inference_model']}, {r['inference_params'] / 1e6:.0f} M params: "
                      f"{r['inference_tokens']} tokens in {r['inference_s']:.2f} s, peak "
                      f"{r['inference_peak_GiB']:.2f} GiB"),
        ("resume", f"{r['resume_s']:.3f} s; addresses unchanged [{ok(r['same_addresses'])}], "
                   f"graph replay [{ok(r['graph_replay_ok'])}]"),
        ("losses vs reference", f"{r['steps']} steps ({args.steps_before} before the pause), "
                                f"max abs diff {r['max_abs_loss_diff']:g}, bitwise "
                                f"[{ok(r['losses_identical'])}]"),
        ("final parameters", f"bitwise equal to the reference [{ok(r['params_identical'])}]"),
        ("loss", f"{r['first_loss']:.4f} -> {r['loss_at_pause']:.4f} (pause) -> "
                 f"{r['last_loss']:.4f}"),
    ]
    for k, v in rows:
        print(f"  {k:<20} {v}")
    print("RESULT:", "PASS" if r["ok"] else "FAIL")
    print(json.dumps({"bench": "sleep_demo", **results}))
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
