"""One process runs a workload's steps in one mode for a CPU profile taken from
outside (bench/gpu/cpu_profile.sh attaches `perf record -p`): after the warm-up
it touches a flag file and runs steps for --seconds more, printing the mean
step and the process's CPU time a step. Blocking sync
(CU_CTX_SCHED_BLOCKING_SYNC), so that waits for the GPU sleep instead of
spinning: the on-CPU samples and the CPU time are the CPU's work alone.

Then, with --kernel-steps N, N more steps under torch.profiler (after the
profiled ones): the GPU time of each kernel and copy by name, a step, and the
step's GPU time from the first to the last of its work on the current stream
(CUDA events), so that two modes' GPU sides compare apart from their CPU
sides: one JSON line, "KERNELS {...}". Then N more with the profiler's CPU
side on too: every CUDA runtime and driver call it saw (cudaLaunchKernel,
cudaMemcpyAsync, cuLaunchKernel from the libraries, ...), calls and CPU
microseconds a step by name, one JSON line, "API {...}", so that where a mode
spends more time in libcuda the call that pays it is named (waits for the GPU,
cudaStreamSynchronize and the like, sleep under blocking sync and are listed
like any other call: read them apart; the profiler adds its own cost to every
call, alike in every mode). The workload's random source is reseeded before
each: every mode times the same shapes, however many steps its profiled
seconds ran.
  python3 profile_steps.py MODE WORKLOAD FLAG_FILE [--seconds 6] [--warmup 20]
      [--kernel-steps 0]
"""
import argparse
import collections
import ctypes
import json
import os
import sys
import time

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("mode", help="torch | ff-native | ff-pluggable | ff-preload (LD_PRELOAD set by the caller)")
p.add_argument("workload")
p.add_argument("flag")
p.add_argument("--seconds", type=float, default=6.0)
p.add_argument("--warmup", type=int, default=20)
p.add_argument("--kernel-steps", type=int, default=0)
args = p.parse_args()

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
print("cuDevicePrimaryCtxSetFlags:", cu.cuDevicePrimaryCtxSetFlags(0, 4), flush=True)
if args.mode in ("ff-native", "ff-pluggable"):
    sys.path.insert(0, os.path.join(REPO, "integrations", "python"))
    import fragfree as ff
    ff.enable(args.mode[3:])
import torch  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402

dev = torch.device("cuda")
wl = workloads.make(args.workload, dev, seed=0)
for _ in range(args.warmup):
    wl.step()
torch.cuda.synchronize()
open(args.flag, "w").close()
t0, n = time.perf_counter(), 0
c0 = time.process_time()
while time.perf_counter() - t0 < args.seconds:
    wl.step()
    n += 1
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(f"PROFILED {args.mode} {args.workload}: {n} steps, {1e3 * wall / n:.3f} ms a step, "
      f"process CPU {1e3 * cpu / n:.3f} ms a step", flush=True)

if args.kernel_steps > 0:
    from torch.profiler import ProfilerActivity, profile
    spans = []
    wl.rng.seed(1)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.kernel_steps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            wl.step()  # ends synchronised
            end.record()
            end.synchronize()
            spans.append(start.elapsed_time(end) * 1e3)
    by_name = collections.Counter()
    for e in prof.key_averages():
        if e.self_device_time_total > 0:
            by_name[e.key[:70]] += e.self_device_time_total / args.kernel_steps
    print("KERNELS " + json.dumps(dict(
        mode=args.mode, workload=args.workload, steps=args.kernel_steps,
        gpu_busy_us=round(sum(by_name.values()), 1),
        span_us=sorted(round(s, 1) for s in spans),
        top=[(k, round(v, 1)) for k, v in by_name.most_common(12)])), flush=True)

    wl.rng.seed(2)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.kernel_steps):
            wl.step()
    api = {}  # name -> [calls a step, CPU µs a step]
    for e in prof.key_averages():
        if e.key.startswith("cu") and e.self_device_time_total == 0 and e.self_cpu_time_total > 0:
            api[e.key[:40]] = [round(e.count / args.kernel_steps, 1),
                               round(e.self_cpu_time_total / args.kernel_steps, 1)]
    print("API " + json.dumps(dict(mode=args.mode, workload=args.workload, steps=args.kernel_steps,
                                   calls=dict(sorted(api.items(), key=lambda kv: -kv[1][1])))),
          flush=True)
