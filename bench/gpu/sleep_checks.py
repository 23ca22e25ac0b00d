"""Sleep and wake with the rest of a PyTorch program (needs a GPU, torch and
NCCL): a torch.compile'd module whose parameters are tagged is paused with a
CPU backup and resumed, and gives bit-identical outputs after; a single-rank
NCCL process group keeps working across a pause/resume of other memory (an
all-reduce runs while the tag is paused and after it is resumed). Prints one
JSON line; exits 1 on a failed check. Single-threaded.

    FRAGFREE_LIBRARY=build/lib/libfragfree.so PYTHONPATH=integrations/python \\
        python3 bench/gpu/sleep_checks.py
"""

import json
import os
import sys

import fragfree

fragfree.enable()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

results = {"mode": fragfree.mode()}
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29517")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)

with fragfree.region("model"):
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024)).cuda()
compiled = torch.compile(model)
inp = torch.randn(256, 1024, device="cuda")
ref = compiled(inp).clone()
torch.cuda.synchronize()
ptrs = [p.data_ptr() for p in model.parameters()]
free0 = torch.cuda.mem_get_info()[0]
fragfree.pause("model", backup="cpu")
results["freed_mib"] = (torch.cuda.mem_get_info()[0] - free0) / 2**20
y = torch.full((1 << 20,), 2.0, device="cuda")
dist.all_reduce(y)  # NCCL while the tag is paused
torch.cuda.synchronize()
results["allreduce_during_pause"] = bool(y[0].item() == 2.0)
fragfree.resume("model")
out = compiled(inp)
results["compiled_same_after_resume"] = bool(torch.equal(out, ref))
results["same_addresses"] = ptrs == [p.data_ptr() for p in model.parameters()]
dist.all_reduce(x)
torch.cuda.synchronize()
results["allreduce_after_resume"] = bool(x[0].item() == 1.0)
dist.destroy_process_group()
results["ok"] = all(v for k, v in results.items() if isinstance(v, bool))
print(json.dumps(results))
sys.exit(0 if results["ok"] else 1)
