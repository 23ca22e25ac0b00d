"""PyTorch under LD_PRELOAD=libfragfree.so, with no code change (label gpu).

Run as: LD_PRELOAD=path/to/libfragfree.so python3 torch_smoke.py
Exits 77 (skipped) without torch or a GPU. Checks that the library set
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, that tensor memory comes from
fragfree (ff_allocation_size), that torch.cuda.memory_stats() and
empty_cache() reflect fragfree, that a small training loop on two streams
computes the same result as on the CPU, that pinned memory works, and that a
CUDA graph captures and replays.
"""

import ctypes
import os
import sys

try:
    import torch
except ImportError:
    print("skip: no torch")
    sys.exit(77)
if not torch.cuda.is_available():
    print("skip: no CUDA device")
    sys.exit(77)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


preload = os.environ.get("LD_PRELOAD", "")
check("libfragfree" in preload, "run me with LD_PRELOAD=libfragfree.so")
check(os.environ.get("PYTORCH_CUDA_ALLOC_CONF") == "backend:cudaMallocAsync",
      "PYTORCH_CUDA_ALLOC_CONF=%r" % os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))
check(torch.cuda.get_allocator_backend() == "cudaMallocAsync",
      "allocator backend is %s" % torch.cuda.get_allocator_backend())

lib = ctypes.CDLL(None)  # the preloaded library's symbols are global
if not hasattr(lib, "ff_allocation_size"):
    print("FAIL: libfragfree.so is not preloaded", file=sys.stderr)
    sys.exit(1)
lib.ff_allocation_size.restype = ctypes.c_size_t
lib.ff_allocation_size.argtypes = [ctypes.c_void_p, ctypes.c_int]


def owned(t):
    return lib.ff_allocation_size(t.data_ptr(), t.device.index or 0) > 0


x = torch.randn(1 << 20, device="cuda")
check(owned(x), "a tensor is not fragfree memory")
stats = torch.cuda.memory_stats()
check(stats["allocated_bytes.all.current"] >= x.numel() * 4,
      "memory_stats allocated %d" % stats["allocated_bytes.all.current"])
check(stats["reserved_bytes.all.current"] >= stats["allocated_bytes.all.current"],
      "reserved < allocated")
check(torch.cuda.memory_allocated() >= x.numel() * 4, "memory_allocated")

# Training on the default stream and a side stream; compare with the CPU.
torch.manual_seed(0)
model_cpu = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10)).cuda()
model.load_state_dict(model_cpu.state_dict())
opt_cpu = torch.optim.SGD(model_cpu.parameters(), lr=0.1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
side = torch.cuda.Stream()
for step in range(20):
    data = torch.randn(64 + step * 8, 256)
    target = torch.randint(0, 10, (data.shape[0],))
    loss_cpu = torch.nn.functional.cross_entropy(model_cpu(data), target)
    opt_cpu.zero_grad()
    loss_cpu.backward()
    opt_cpu.step()
    with torch.cuda.stream(side):  # copies and a temporary on a side stream
        d = data.pin_memory().cuda(non_blocking=True)
        t = target.cuda(non_blocking=True)
        scratch = torch.empty(1 << 18, device="cuda").fill_(1.0)
    torch.cuda.current_stream().wait_stream(side)
    d.record_stream(torch.cuda.current_stream())
    t.record_stream(torch.cuda.current_stream())
    del scratch
    loss = torch.nn.functional.cross_entropy(model(d), t)
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
for p_cpu, p in zip(model_cpu.parameters(), model.parameters()):
    check(torch.allclose(p_cpu, p.cpu(), atol=1e-4), "parameters diverged")

# empty_cache returns fragfree's free pages.
del x
big = [torch.empty(32 << 20, dtype=torch.uint8, device="cuda") for _ in range(8)]
del big
reserved_before = torch.cuda.memory_reserved()
torch.cuda.empty_cache()
check(torch.cuda.memory_reserved() < reserved_before, "empty_cache freed nothing")
torch.cuda.reset_peak_memory_stats()
check(torch.cuda.max_memory_allocated() <= reserved_before, "peak reset")

# CUDA graphs: capture allocations go to the runtime, replay is correct.
static_in = torch.randn(1024, device="cuda")
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    static_out = static_in * 2 + 1  # warm-up
torch.cuda.current_stream().wait_stream(s)
with torch.cuda.graph(g):
    static_out = static_in * 2 + 1
static_in.copy_(torch.arange(1024, device="cuda", dtype=torch.float32))
g.replay()
torch.cuda.synchronize()
check(torch.equal(static_out.cpu(), torch.arange(1024.0) * 2 + 1), "graph replay")

# Out of memory is torch.cuda.OutOfMemoryError.
try:
    torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
    check(False, "no OOM for 1 PiB")
except torch.cuda.OutOfMemoryError:
    pass

if failures:
    print("torch_smoke: %d failure(s)" % len(failures), file=sys.stderr)
    sys.exit(1)
print("torch_smoke: all checks passed")
