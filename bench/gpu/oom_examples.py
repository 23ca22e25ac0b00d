"""Two deliberate out-of-memory errors under a memory cap, with fragfree's OOM
report (the observability issue's H200 check): one where activations dominate (a
huge batch), one where persistent state dominates (a model whose AdamW state
cannot fit). fragfree runs in native-API mode (torch.cuda.OutOfMemoryError) with
fragfree.watch(model, optimizer), and writes each report's JSON and HTML to
--out; the text report (the exception's message) goes to <out>/<case>.txt.

  python3 bench/gpu/oom_examples.py --case activations|persistent --out DIR

Prints "RESULT {json}" with the case, the step and phase of the OOM, the cause the
report named and its first advice.
"""
import argparse
import json
import os
import sys

p = argparse.ArgumentParser()
p.add_argument("--case", required=True, choices=["activations", "persistent"])
p.add_argument("--out", required=True)
p.add_argument("--mode", default="native", choices=["native", "pluggable"])
args = p.parse_args()
os.makedirs(args.out, exist_ok=True)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "integrations", "python"))
import fragfree  # noqa: E402

CAP_MB = {"activations": 12 * 1024, "persistent": 14 * 1024}[args.case]
fragfree.enable(args.mode, memory_limit_mb=CAP_MB, oom_report_path=args.out)

import torch  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

dev = torch.device("cuda")
torch.manual_seed(0)
if args.case == "activations":
    # GPT-2 124M (~2 GiB of parameters, gradients and AdamW state) with a batch
    # of 64 x 1024 tokens: the activations need several times the cap.
    cfg = AutoConfig.for_model("gpt2", n_layer=12, n_embd=768, n_head=12, n_positions=1024,
                               vocab_size=50257)
    batch, seq = 64, 1024
else:
    # A 1.3B-parameter Llama: fp32 parameters and gradients (~10 GiB) fit under
    # 14 GiB, AdamW's two moments (another ~10 GiB) do not; a batch of 1 x 128.
    cfg = AutoConfig.for_model("llama", hidden_size=2048, intermediate_size=5504,
                               num_hidden_layers=24, num_attention_heads=16,
                               num_key_value_heads=16, vocab_size=32000,
                               max_position_embeddings=2048)
    batch, seq = 1, 128
model = AutoModelForCausalLM.from_config(cfg).to(dev)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
fragfree.watch(model, opt)

phase, step, message = "", -1, ""
try:
    for step in range(3):
        x = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)
        phase = "forward"
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=x, labels=x)
        phase = "backward"
        out.loss.backward()
        phase = "optimizer step"
        opt.step()
        opt.zero_grad(set_to_none=True)
        del out, x
    phase = "none"
except torch.cuda.OutOfMemoryError as e:
    message = str(e)
except RuntimeError as e:  # pluggable mode: the shim's exception
    message = str(e)

with open(os.path.join(args.out, f"{args.case}.txt"), "w") as f:
    f.write(message)
reports = sorted(n for n in os.listdir(args.out) if n.startswith("fragfree-oom-") and n.endswith(".json"))
res = dict(case=args.case, mode=args.mode, cap_mb=CAP_MB, oom_step=step, oom_phase=phase,
           raised=bool(message), reports=reports)
if reports:
    with open(os.path.join(args.out, reports[-1])) as f:
        rep = json.load(f)
    diag = rep["diagnosis"]
    res["cause"] = diag["cause"]
    res["summary"] = diag["summary"]
    res["categories"] = diag["categories"]
    res["first_advice"] = [a["title"] for a in rep["advice"][:3]]
    res["skipped"] = rep["skipped"]
print("RESULT " + json.dumps(res, default=str)[:3000], flush=True)
