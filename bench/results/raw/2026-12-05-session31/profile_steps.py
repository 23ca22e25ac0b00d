"""One process runs a workload's steps in one mode; after the warm-up it touches
a flag file and runs steps for --seconds more, printing the mean step. The
caller attaches `perf record -p` once the flag appears. Blocking sync
(CU_CTX_SCHED_BLOCKING_SYNC) so that waits for the GPU sleep instead of
spinning: the profile's on-CPU samples are the CPU's work alone.
  python3 profile_steps.py MODE WORKLOAD FLAG_FILE [--seconds 6] [--warmup 20]
"""
import ctypes
import os
import sys
import time

mode, workload, flag = sys.argv[1], sys.argv[2], sys.argv[3]
seconds = float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 6.0
warmup = int(sys.argv[sys.argv.index("--warmup") + 1]) if "--warmup" in sys.argv else 20
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
print("cuDevicePrimaryCtxSetFlags:", cu.cuDevicePrimaryCtxSetFlags(0, 4), flush=True)
if mode.startswith("ff-"):
    sys.path.insert(0, os.path.join(REPO, "integrations", "python"))
    import fragfree as ff
    if mode in ("ff-native", "ff-pluggable"):
        ff.enable(mode[3:])
import torch  # noqa: E402
sys.path.insert(0, os.path.join(REPO, "bench", "gpu"))
import workloads  # noqa: E402
dev = torch.device("cuda")
wl = workloads.make(workload, dev, seed=0)
for _ in range(warmup):
    wl.step()
torch.cuda.synchronize()
open(flag, "w").close()
t0, n = time.perf_counter(), 0
c0 = time.process_time()
while time.perf_counter() - t0 < seconds:
    wl.step()
    n += 1
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(f"PROFILED {mode} {workload}: {n} steps, {1e3 * wall / n:.3f} ms a step, "
      f"process CPU {1e3 * cpu / n:.3f} ms a step", flush=True)
