#!/usr/bin/env python3
"""fragfree's PyTorch integration on a real GPU: one line PASS/FAIL per check.

Owns the GPU checks of both modes. Each check runs in its own interpreter
(fragfree.enable() is once per process, and a crash must not take the others
down). tests/test_gpu.py runs the same checks under pytest.

  python3 integrations/python/tests/gpu_smoke.py               # all checks
  python3 integrations/python/tests/gpu_smoke.py --mode native # one mode
  python3 integrations/python/tests/gpu_smoke.py --check p_cuda_graph
  python3 integrations/python/tests/gpu_smoke.py --list

Needs torch with CUDA and libfragfree.so built with CUDA (found as the package
finds it: $FRAGFREE_LIBRARY, the repository's build*/lib, ...). Exit status 0
only if every selected check passed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE_ROOT = HERE.parent
if str(PACKAGE_ROOT) not in sys.path:
    sys.path.insert(0, str(PACKAGE_ROOT))

MiB = 1 << 20

# The keys torch.cuda.memory_stats() has on PyTorch 2.11's native allocator.
STAT_ARRAYS = ["allocation", "segment", "active", "inactive_split", "allocated_bytes",
               "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes"]
TORCH_KEYS = (
    [f"{g}.{p}.{m}" for g in STAT_ARRAYS for p in ("all", "small_pool", "large_pool")
     for m in ("current", "peak", "allocated", "freed")]
    + [f"{g}.{m}" for g in ("oversize_allocations", "oversize_segments")
       for m in ("current", "peak", "allocated", "freed")]
    + ["num_alloc_retries", "num_ooms", "max_split_size", "num_sync_all_streams",
       "num_device_alloc", "num_device_free"]
)


class CheckFailed(AssertionError):
    pass


def expect(cond, message):
    if not cond:
        raise CheckFailed(message)


# --------------------------------------------------------------------------- helpers


def _enable(mode):
    import fragfree

    fragfree.enable(mode=mode)
    return fragfree


def _train_step(torch, steps=3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 10)
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(512, 256, device="cuda")
    y = torch.randint(0, 10, (512,), device="cuda")
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    torch.cuda.synchronize()
    expect(all(l == l and l < 100 for l in losses), f"bad losses {losses}")
    expect(steps < 2 or losses[-1] < losses[0], f"loss did not decrease: {losses}")
    return model


def _forward_backward(mode):
    fragfree = _enable(mode)
    import torch

    _train_step(torch)
    allocated = torch.cuda.memory_allocated()
    expect(allocated > 0, "memory_allocated() is 0 after training")
    expect(allocated == fragfree.stats()["allocated_bytes.all.current"],
           "torch.cuda.memory_allocated() differs from fragfree.stats()")
    return f"allocated {allocated // MiB} MiB, peak {torch.cuda.max_memory_allocated() // MiB} MiB"


def _stats_and_summary(mode):
    fragfree = _enable(mode)
    import torch

    _train_step(torch, steps=1)
    stats = torch.cuda.memory_stats()
    missing = [k for k in TORCH_KEYS if k not in stats]
    expect(not missing, f"memory_stats() lacks {missing[:5]}")
    text = torch.cuda.memory_summary()
    expect("PyTorch CUDA memory summary" in text, "torch.cuda.memory_summary() output unexpected")
    ours = fragfree.memory_summary()
    expect("U_alloc" in ours, "fragfree.memory_summary() lacks U_alloc")
    return f"{len(stats)} keys"


def _allocated_matches(mode):
    fragfree = _enable(mode)
    import torch

    torch.cuda.init()
    base = torch.cuda.memory_allocated()
    t = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    grown = torch.cuda.memory_allocated() - base
    expect(grown >= 64 * MiB, f"memory_allocated grew by {grown}, expected >= 64 MiB")
    expect(torch.cuda.memory_allocated() == fragfree.stats()["allocated_bytes.all.current"],
           "memory_allocated != fragfree allocated_bytes.all.current")
    expect(torch.cuda.max_memory_allocated() >= torch.cuda.memory_allocated(), "peak < current")
    expect(torch.cuda.memory_reserved() >= torch.cuda.memory_allocated(), "reserved < allocated")
    del t
    torch.cuda.reset_peak_memory_stats()
    expect(torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated(),
           "reset_peak_memory_stats did not reset the peak")
    torch.cuda.reset_accumulated_memory_stats()
    expect(torch.cuda.memory_stats()["allocated_bytes.all.freed"] == 0,
           "reset_accumulated_memory_stats did not reset")
    return f"grew {grown // MiB} MiB"


def _empty_cache(mode):
    fragfree = _enable(mode)
    import torch

    xs = [torch.empty(128 * MiB, dtype=torch.uint8, device="cuda") for _ in range(4)]
    del xs
    torch.cuda.synchronize()
    before = torch.cuda.memory_reserved()
    free_before = torch.cuda.mem_get_info()[0]
    torch.cuda.empty_cache()
    after = torch.cuda.memory_reserved()
    free_after = torch.cuda.mem_get_info()[0]
    expect(after <= before, f"reserved grew on empty_cache: {before} -> {after}")
    expect(after < before or before == 0,
           f"empty_cache released nothing ({before // MiB} MiB reserved)")
    fragfree.empty_cache()
    return (f"reserved {before // MiB} -> {after // MiB} MiB, device free "
            f"{free_before // MiB} -> {free_after // MiB} MiB")


def _memory_fraction(mode):
    _enable(mode)
    import torch

    torch.cuda.init()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(0.05)
    expect(abs(torch.cuda.get_per_process_memory_fraction() - 0.05) < 1e-9,
           "get_per_process_memory_fraction() does not return the fraction set")
    raised = None
    try:
        big = torch.empty(int(total * 0.2), dtype=torch.uint8, device="cuda")
        big.fill_(1)
        torch.cuda.synchronize()
    except Exception as e:  # OutOfMemoryError (native) or RuntimeError (pluggable)
        raised = e
    expect(raised is not None, "allocating 20% of the GPU under a 5% fraction did not fail")
    kind = type(raised).__name__
    if mode == "native":
        expect(isinstance(raised, torch.cuda.OutOfMemoryError),
               f"expected torch.cuda.OutOfMemoryError, got {kind}")
    torch.cuda.set_per_process_memory_fraction(1.0)
    ok = torch.empty(int(total * 0.1), dtype=torch.uint8, device="cuda")
    ok.fill_(1)
    torch.cuda.synchronize()
    return f"over-limit allocation raised {kind}"


def _record_stream(mode):
    _enable(mode)
    import torch

    side = torch.cuda.Stream()
    results = []
    for i in range(20):
        x = torch.full((4 * MiB,), float(i), device="cuda")  # on the current stream
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(1_000_000)  # keep x in use on the side stream a while
            y = x * 2
        x.record_stream(side)
        del x  # freed while the side stream may still read it
        z = torch.full((4 * MiB,), -1.0, device="cuda")  # must not reuse x's memory early
        torch.cuda.current_stream().wait_stream(side)
        results.append((float(y[0]), float(y[-1]), float(z[0])))
    torch.cuda.synchronize()
    for i, (a, b, c) in enumerate(results):
        expect(a == b == 2.0 * i and c == -1.0, f"iteration {i}: got {(a, b, c)}")
    return "20 iterations correct"


def _cuda_graph(mode):
    _enable(mode)
    import torch

    static_x = torch.zeros(1 << 20, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm up outside the capture
            tmp = static_x * 2 + 1
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        tmp = static_x * 2  # an intermediate freed inside the capture
        static_y = tmp + 1
        del tmp
    for k in range(3):
        src = torch.arange(1 << 20, device="cuda", dtype=torch.float32) * (k + 1)
        static_x.copy_(src)
        # Allocations between replays must not take the graph's memory.
        noise = [torch.full((1 << 20,), 7.0, device="cuda") for _ in range(8)]
        g.replay()
        torch.cuda.synchronize()
        expect(torch.equal(static_y, src * 2 + 1), f"replay {k} gave wrong values")
        expect(all(float(n[0]) == 7.0 for n in noise), f"replay {k} overwrote other tensors")
        del noise
    del g
    return "3 replays correct"


def _snapshot_viz(mode):
    _enable(mode)
    import torch

    from fragfree._snapshot import check_pickle_opcodes

    torch.cuda.memory._record_memory_history(max_entries=100000)
    _train_step(torch, steps=2)
    tmp = Path(tempfile.mkdtemp(prefix="fragfree_viz_"))
    snap_path = tmp / "snap.pickle"
    torch.cuda.memory._dump_snapshot(str(snap_path))
    data = snap_path.read_bytes()
    import pickle

    snap = pickle.loads(data)
    expect(set(snap) >= {"segments", "device_traces"}, f"snapshot keys {sorted(snap)}")
    if mode == "pluggable":
        check_pickle_opcodes(data)
    for seg in snap["segments"]:
        expect(sum(b["size"] for b in seg["blocks"]) == seg["total_size"],
               f"blocks do not tile segment at {seg['address']:#x}")
    html = tmp / "plot.html"
    r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot",
                        str(snap_path), "-o", str(html)], capture_output=True, text=True)
    expect(r.returncode == 0, f"_memory_viz trace_plot failed: {r.stderr[-500:]}")
    expect(html.is_file() and "snapshot.pickle" in html.read_text(), "trace_plot wrote no HTML")
    r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "stats",
                        str(snap_path)], capture_output=True, text=True)
    expect(r.returncode == 0, f"_memory_viz stats failed: {r.stderr[-500:]}")
    events = sum(len(t) for t in snap["device_traces"])
    return f"{len(snap['segments'])} segments, {events} trace events, {html}"


def _allocate_in_a_named_function(torch):
    keep = torch.empty(3 * MiB + 4096, dtype=torch.uint8, device="cuda")
    gone = torch.empty(5 * MiB + 4096, dtype=torch.uint8, device="cuda")
    del gone
    return keep


def _snapshot_stacks(mode):
    """Python stacks through the integration: _record_memory_history with
    stacks="python" gives trace entries and live blocks their frames, and the
    trace keeps fragfree's Unix-microsecond times."""
    _enable(mode)
    import torch

    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python",
                                             max_entries=100000)
    t0 = time.time()
    keep = _allocate_in_a_named_function(torch)
    _train_step(torch, steps=1)
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snap["device_traces"][torch.cuda.current_device()]
    named = "_allocate_in_a_named_function"

    def has_frame(entry):
        return any(f.get("name") == named for f in entry.get("frames", []))

    allocs = [e for e in trace if e["action"] == "alloc" and has_frame(e)]
    frees = [e for e in trace if e["action"] == "free_requested" and has_frame(e)]
    expect(len(allocs) == 2, f"{len(allocs)} alloc entries carry the allocating function's "
           f"frame (want 2); first entry: {trace[:1]}")
    expect(len(frees) == 1, f"{len(frees)} free_requested entries carry it (want 1)")
    live = [b for seg in snap["segments"] for b in seg["blocks"]
            if b["state"] == "active_allocated" and any(
                f.get("name") == named for f in b.get("frames", []))]
    expect(len(live) == 1 and live[0]["requested_size"] == 3 * MiB + 4096,
           f"live blocks with the frame: {[(b['size'], b['requested_size']) for b in live]}")
    times = [e["time_us"] for e in trace]
    expect(times == sorted(times), "trace times are not in order")
    expect(abs(times[0] / 1e6 - t0) < 60 and times[-1] > times[0],
           f"trace times {times[0]}..{times[-1]} are not Unix microseconds of this run")
    del keep
    with_frames = sum(1 for e in trace if e.get("frames"))
    return f"{len(trace)} trace events, {with_frames} with Python frames"


def _hold_three_gib(torch):
    return torch.empty(3 << 30, dtype=torch.uint8, device="cuda")


def _oom_stacks(mode):
    """With stacks recorded, the OutOfMemoryError names where the largest live
    allocations were made."""
    _enable(mode)
    import torch

    torch.cuda.set_per_process_memory_fraction(0.05)
    torch.cuda.memory._record_memory_history(enabled="all", stacks="python")
    held = _hold_three_gib(torch)
    try:
        torch.empty(6 << 30, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError as e:
        msg = str(e)
    else:
        raise CheckFailed("no OutOfMemoryError under a 5% memory fraction")
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    expect(msg.startswith("CUDA out of memory."), f"message starts {msg[:80]!r}")
    at = msg.find("the largest live allocations, where they were made")
    expect(at >= 0, f"no stacks section in: {msg[-1500:]}")
    expect("_hold_three_gib" in msg[at:], f"the holder's frame is missing: {msg[at:at + 1500]}")
    del held
    first = msg[at:].splitlines()[1:4]
    return " | ".join(line.strip() for line in first)


def _enable_after_init(mode):
    import torch

    import fragfree

    torch.zeros(1, device="cuda")
    try:
        fragfree.enable(mode=mode)
    except RuntimeError as e:
        expect("before CUDA is initialised" in str(e), f"unhelpful message: {e}")
        expect(not fragfree.is_enabled(), "is_enabled() after a failed enable()")
        return "raised RuntimeError"
    raise CheckFailed("enable() after CUDA initialisation did not raise")


def _enable_twice(mode):
    fragfree = _enable(mode)
    fragfree.enable(mode=mode)  # identical: no-op
    try:
        fragfree.enable(mode=mode, reclaim_before_grow=False)
    except RuntimeError as e:
        expect("already called" in str(e), f"unhelpful message: {e}")
    else:
        raise CheckFailed("enable() with a different configuration did not raise")
    import torch

    torch.ones(10, device="cuda").sum().item()
    return "identical call is a no-op; a different one raises"


def _bad_key(mode):
    import fragfree

    try:
        fragfree.enable(mode=mode, no_such_key=1)
    except ValueError as e:
        expect("no_such_key" in str(e), f"error does not name the key: {e}")
    else:
        raise CheckFailed("unknown key accepted")
    fragfree.enable(mode=mode)  # still possible afterwards
    import torch

    torch.ones(3, device="cuda").sum().item()
    return "ValueError names the key"


def _cudnn_benchmark(mode):
    _enable(mode)
    import torch

    torch.backends.cudnn.benchmark = True
    conv = torch.nn.Conv2d(16, 32, 3, padding=1).cuda()
    x = torch.randn(8, 16, 64, 64, device="cuda", requires_grad=True)
    out = conv(x)
    out.float().sum().backward()
    torch.cuda.synchronize()
    ref = torch.nn.functional.conv2d(x.detach().double(), conv.weight.detach().double(),
                                     conv.bias.detach().double(), padding=1)
    expect(torch.allclose(out.double(), ref, atol=1e-2, rtol=1e-3), "conv result wrong")
    return "conv forward/backward with cudnn.benchmark"


def _oom_observer(mode):
    _enable(mode)
    import torch

    torch.cuda.init()
    seen = []
    torch._C._cuda_attach_out_of_memory_observer(lambda *args: seen.append(args))
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(0.05)
    try:
        torch.empty(int(total * 0.2), dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError as e:
        expect("CUDA out of memory" in str(e), f"message: {str(e)[:200]}")
    else:
        raise CheckFailed("no torch.cuda.OutOfMemoryError")
    expect(len(seen) == 1, f"OOM observer called {len(seen)} times")
    torch.cuda.set_per_process_memory_fraction(1.0)
    torch.ones(10, device="cuda").sum().item()  # still usable
    return f"observer got {seen[0]}"


def _compile_reduce_overhead(mode):
    _enable(mode)
    import torch

    def f(x, w):
        return torch.nn.functional.gelu(x @ w).sum(dim=-1) * 2

    cf = torch.compile(f, mode="reduce-overhead")
    w = torch.randn(256, 256, device="cuda")
    for i in range(5):
        x = torch.randn(128, 256, device="cuda")
        y = cf(x, w)
        expect(torch.allclose(y, f(x, w), atol=1e-3, rtol=1e-3), f"call {i} wrong")
    # A second shape: a new recording in the same cudagraph-trees pool.
    for i in range(3):
        x = torch.randn(64, 256, device="cuda")
        expect(torch.allclose(cf(x, w), f(x, w), atol=1e-3, rtol=1e-3), f"shape 2, call {i}")
    torch.cuda.synchronize()
    return "8 compiled calls correct"


def _mempool(mode):
    _enable(mode)
    import torch

    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        x = torch.ones(8 * MiB, device="cuda")
    expect(float(x.sum()) == 8 * MiB, "wrong values from pool memory")
    del x
    del pool
    torch.cuda.empty_cache()
    return "MemPool + use_mem_pool"


# name -> (mode, function)
CHECKS = {
    "p_forward_backward": ("pluggable", _forward_backward),
    "p_stats_and_summary": ("pluggable", _stats_and_summary),
    "p_allocated_matches": ("pluggable", _allocated_matches),
    "p_empty_cache": ("pluggable", _empty_cache),
    "p_memory_fraction": ("pluggable", _memory_fraction),
    "p_record_stream": ("pluggable", _record_stream),
    "p_cuda_graph": ("pluggable", _cuda_graph),
    "p_snapshot_viz": ("pluggable", _snapshot_viz),
    "p_enable_after_init": ("pluggable", _enable_after_init),
    "p_enable_twice": ("pluggable", _enable_twice),
    "p_bad_key": ("pluggable", _bad_key),
    "n_forward_backward": ("native", _forward_backward),
    "n_stats_and_summary": ("native", _stats_and_summary),
    "n_allocated_matches": ("native", _allocated_matches),
    "n_empty_cache": ("native", _empty_cache),
    "n_memory_fraction": ("native", _memory_fraction),
    "n_record_stream": ("native", _record_stream),
    "n_cuda_graph": ("native", _cuda_graph),
    "n_snapshot_viz": ("native", _snapshot_viz),
    "n_snapshot_stacks": ("native", _snapshot_stacks),
    "n_oom_stacks": ("native", _oom_stacks),
    "n_enable_after_init": ("native", _enable_after_init),
    "n_cudnn_benchmark": ("native", _cudnn_benchmark),
    "n_oom_observer": ("native", _oom_observer),
    "n_compile_reduce_overhead": ("native", _compile_reduce_overhead),
    "n_mempool": ("native", _mempool),
}


def run_one(name: str) -> int:
    """Runs one check in this process; prints its PASS/FAIL line."""
    mode, fn = CHECKS[name]
    start = time.time()
    try:
        detail = fn(mode)
    except Exception as e:  # noqa: BLE001 - report every failure the same way
        tb = traceback.format_exc(limit=6)
        print(tb, file=sys.stderr)
        msg = f"{type(e).__name__}: {e}".replace("\n", " ")
        print(f"FAIL {name}: {msg[:400]}")
        return 1
    print(f"PASS {name} ({time.time() - start:.1f}s) {detail or ''}".rstrip())
    return 0


def run_all(names: list[str], timeout: float) -> int:
    failures = 0
    for name in names:
        start = time.time()
        try:
            r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--check", name],
                               capture_output=True, text=True, timeout=timeout)
            lines = [l for l in r.stdout.splitlines() if l.startswith(("PASS ", "FAIL "))]
            if r.returncode == 0 and lines and lines[-1].startswith("PASS"):
                print(lines[-1], flush=True)
                continue
            tail = (lines[-1] if lines else "") or (r.stderr.strip().splitlines() or ["?"])[-1]
            if not lines:
                tail = f"FAIL {name}: exit status {r.returncode}: {tail[:300]}"
            print(tail, flush=True)
            if os.environ.get("FRAGFREE_SMOKE_VERBOSE"):
                print(r.stderr[-3000:], file=sys.stderr)
        except subprocess.TimeoutExpired:
            print(f"FAIL {name}: timed out after {time.time() - start:.0f}s", flush=True)
        failures += 1
    print(f"{len(names) - failures}/{len(names)} checks passed")
    return 1 if failures else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", help="run one check in this process")
    ap.add_argument("--mode", choices=["pluggable", "native", "all"], default="all")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per check")
    args = ap.parse_args(argv)
    if args.list:
        for name, (mode, _) in CHECKS.items():
            print(f"{name:28} {mode}")
        return 0
    if args.check:
        if args.check not in CHECKS:
            ap.error(f"unknown check {args.check!r}; --list shows them")
        return run_one(args.check)
    names = [n for n, (m, _) in CHECKS.items() if args.mode in ("all", m)]
    return run_all(names, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
