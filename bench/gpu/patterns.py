"""Training patterns where expandable segments stay below 0.97 utilisation, as
allocation traces for the replay tool (docs/replay.md).

Each pattern runs a few steps under PyTorch's native allocator with
torch.cuda.memory._record_memory_history and writes the device trace in the
format of data/traces/ (action,addr,size,stream,time_us; gzip). It also prints
one RESULT line per pattern with PyTorch's own peak allocated / reserved.

  python3 bench/gpu/patterns.py --out DIR [--pattern fsdp,generate,offload,pipeline]

Patterns:
  fsdp      FSDP-style: layer i+1's full weights are gathered on a second stream
            while layer i computes (record_stream, free after use).
  generate  HF GPT-2 generation with variable prompt lengths and batch sizes
            (KV cache grows token by token).
  offload   AdamW state for odd-sized parameters parked in pinned host memory and
            brought back each step.
  pipeline  1F1B schedule: 8 microbatches, activations of up to 4 alive at once.
"""
import argparse, gzip, json, os, random, sys, time

import torch

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--pattern", default="fsdp,generate,offload,pipeline")
p.add_argument("--steps", type=int, default=6)
args = p.parse_args()
os.makedirs(args.out, exist_ok=True)
dev = torch.device("cuda")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def dump(name):
    snap = torch.cuda.memory._snapshot()
    tr = snap["device_traces"][0]
    path = os.path.join(args.out, f"{name}.csv.gz")
    with gzip.open(path, "wt") as f:
        f.write("action,addr,size,stream,time_us\n")
        for e in tr:
            if e["action"] in ("alloc", "free_requested", "free_completed"):
                f.write(f'{e["action"]},{e["addr"]},{e["size"]},{e["stream"]},{e["time_us"]}\n')
    return path, len(tr)


def fsdp(steps):
    from workloads import FsdpWorkload
    wl = FsdpWorkload(dev)
    for _ in range(steps):
        wl.step()
    torch.cuda.synchronize()
    wl.close()


def generate(steps):
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.for_model("gpt2", n_layer=12, n_embd=768, n_head=12)
    model = AutoModelForCausalLM.from_config(cfg).to(dev).eval()
    rng = random.Random(0)
    with torch.no_grad():
        for _ in range(steps * 2):
            b, L = rng.choice([1, 4, 8, 16]), rng.randint(16, 512)
            ids = torch.randint(0, cfg.vocab_size, (b, L), device=dev)
            model.generate(ids, max_new_tokens=rng.randint(16, 128), do_sample=False,
                           pad_token_id=0)
    torch.cuda.synchronize()


def offload(steps):
    rng = random.Random(0)
    params = [torch.randn(rng.randint(1, 64) * 1_000_003 // 7, device=dev, requires_grad=True)
              for _ in range(48)]
    state = [(torch.zeros(p.shape, pin_memory=True), torch.zeros(p.shape, pin_memory=True))
             for p in params]
    for _ in range(steps):
        loss = sum((p * p).sum() for p in params)
        loss.backward()
        with torch.no_grad():
            for p, (m, v) in zip(params, state):
                md, vd = m.to(dev, non_blocking=True), v.to(dev, non_blocking=True)
                md.mul_(0.9).add_(p.grad, alpha=0.1)
                vd.mul_(0.99).addcmul_(p.grad, p.grad, value=0.01)
                p.sub_(1e-3 * md / (vd.sqrt() + 1e-8))
                m.copy_(md, non_blocking=True); v.copy_(vd, non_blocking=True)
                p.grad = None
        del loss
    torch.cuda.synchronize()


def pipeline(steps):
    width, layers = 4096, 8
    stage = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)]).to(dev)
    rng = random.Random(0)
    for _ in range(steps):
        micro = [torch.randn(rng.randint(256, 2048), width, device=dev) for _ in range(8)]
        inflight = []
        for i, mb in enumerate(micro):
            out = stage(mb)
            inflight.append(out)
            if len(inflight) >= 4 or i == len(micro) - 1:
                o = inflight.pop(0)
                o.float().pow(2).mean().backward()
        for o in inflight:
            o.float().pow(2).mean().backward()
        stage.zero_grad(set_to_none=True)
        del micro, inflight
    torch.cuda.synchronize()


for name in args.pattern.split(","):
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=4_000_000)
    t0 = time.time()
    globals()[name](args.steps)
    path, n = dump(name)
    torch.cuda.memory._record_memory_history(enabled=None)
    res = dict(pattern=name, events=n, seconds=round(time.time() - t0, 1),
               max_allocated_gib=round(torch.cuda.max_memory_allocated() / 2**30, 3),
               max_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 3),
               alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), trace=path)
    res["u_alloc"] = round(res["max_allocated_gib"] / max(res["max_reserved_gib"], 1e-9), 3)
    print("RESULT " + json.dumps(res), flush=True)
    torch.cuda.empty_cache()
