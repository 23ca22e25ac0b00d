"""Drop-in check of fragfree against PyTorch's own behaviour (needs a CUDA GPU
and torch; not collected by pytest). PyTorch's default allocator is the spec:
every check must pass with ``--mode default`` too.

    python gpu_dropin.py --mode default      # PyTorch's allocator, no fragfree
    python gpu_dropin.py --mode auto         # fragfree.enable()
    python gpu_dropin.py --mode native       # fragfree.enable(mode="native")
    python gpu_dropin.py --mode pluggable    # fragfree.enable(mode="pluggable")
    LD_PRELOAD=/path/libfragfree.so python gpu_dropin.py --mode preload
                                             # no fragfree import by this script

Prints one JSON line: {"mode", "torch", "backend", "ok", "checks": {name: {"ok":
true/false/null (skipped), "detail"}}}; exits 1 if a check failed. Pluggable
mode's documented limits (docs/python.md) are reported as "expected_fail" and
do not fail the run. Owns nothing else; single-threaded.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import traceback

MIB = 1 << 20
OUT = tempfile.mkdtemp(prefix="fragfree_dropin_")
OOM_DIR = os.path.join(OUT, "oom_reports")

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--mode", required=True,
                    choices=["default", "pluggable", "native", "auto", "preload"])
args = parser.parse_args()
MODE = args.mode
FRAGFREE = MODE != "default"

if FRAGFREE:
    # Read by libfragfree when it is configured (enable() or, preloaded, its
    # first use), which is after this line in every mode.
    os.makedirs(OOM_DIR, exist_ok=True)
    conf = os.environ.get("FRAGFREE_CONF", "")
    if "oom_report_path" not in conf:
        os.environ["FRAGFREE_CONF"] = ",".join(x for x in (conf, f"oom_report_path:{OOM_DIR}") if x)

fragfree = None
if MODE in ("pluggable", "native", "auto"):
    import fragfree  # noqa: E402

    fragfree.enable() if MODE == "auto" else fragfree.enable(mode=MODE)
elif MODE == "preload" and "libfragfree" not in os.environ.get("LD_PRELOAD", ""):
    sys.exit("--mode preload: run with LD_PRELOAD=/path/to/libfragfree.so")

import torch  # noqa: E402

PLUGGABLE = MODE == "pluggable" or (fragfree is not None and fragfree.mode() == "pluggable")
results: dict[str, dict] = {}


def check(name, expected_fail_in_pluggable=False):
    def run(fn):
        try:
            detail = fn()
            results[name] = {"ok": True, "detail": detail}
        except Skip as s:
            results[name] = {"ok": None, "detail": f"skipped: {s}"}
        except Exception as e:  # noqa: BLE001 - every failure is reported
            tb = traceback.format_exc(limit=3).strip().splitlines()[-1]
            entry = {"ok": False, "detail": f"{type(e).__name__}: {str(e)[:300]} [{tb[:200]}]"}
            if expected_fail_in_pluggable and PLUGGABLE:
                entry = {"ok": None, "detail": "expected_fail (pluggable, docs/python.md): "
                         + entry["detail"]}
            results[name] = entry
        torch.cuda.synchronize()
        return fn

    return run


class Skip(Exception):
    pass


def oom_error_type():
    """The exception class an OOM is expected to raise in this mode."""
    return torch.cuda.OutOfMemoryError


def allocate_or_oom(nbytes):
    """Allocates nbytes; returns the OOM exception raised (pluggable mode:
    through fragfree.translate_oom(), as docs/python.md says), or None."""
    try:
        if PLUGGABLE:
            try:
                torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            except RuntimeError as raw:
                assert not isinstance(raw, torch.cuda.OutOfMemoryError)
                with fragfree.translate_oom():
                    raise raw
        else:
            torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError as e:
        return e
    return None


torch.cuda.init()
TOTAL = torch.cuda.get_device_properties(0).total_memory


@check("preload_native")
def _():
    if MODE != "preload":
        raise Skip("only with --mode preload")
    ff = sys.modules.get("fragfree")
    assert ff is not None, "the LD_PRELOAD bootstrap did not import fragfree"
    assert ff.mode() == "native", f"fragfree.mode() is {ff.mode()!r}"
    return {"library": ff.library().path}


@check("memory_stats")
def _():
    before = torch.cuda.memory_stats()
    x = torch.empty(1024, dtype=torch.uint8, device="cuda")
    mid = torch.cuda.memory_stats()
    del x
    after = torch.cuda.memory_stats()
    for key in ("active_bytes.all.freed", "num_ooms", "num_alloc_retries",
                "allocated_bytes.all.peak", "reserved_bytes.all.current"):
        assert key in after, f"memory_stats() has no {key}"
    freed = after["active_bytes.all.freed"] - before.get("active_bytes.all.freed", 0)
    assert freed >= 1024, f"active_bytes.all.freed grew by {freed} after freeing 1 KiB"
    assert mid["active_bytes.all.current"] >= before.get("active_bytes.all.current", 0) + 1024
    big = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
    peak = torch.cuda.max_memory_allocated()
    assert peak >= 64 * MIB, f"max_memory_allocated {peak}"
    del big
    torch.cuda.reset_peak_memory_stats()
    after_reset = torch.cuda.max_memory_allocated()
    assert after_reset < 64 * MIB, f"peak {after_reset} after reset_peak_memory_stats"
    assert after_reset == torch.cuda.memory_allocated()
    return {"freed": freed, "peak": peak, "peak_after_reset": after_reset}


@check("memory_history_snapshot")
def _():
    torch.cuda.memory._record_memory_history(max_entries=10000)
    xs = [torch.empty(n * MIB, dtype=torch.uint8, device="cuda") for n in (1, 3, 5)]
    del xs[1]
    path = os.path.join(OUT, "snapshot.pickle")
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    import pickle

    with open(path, "rb") as f:
        snap = pickle.load(f)
    traces = sum(len(t) for t in snap.get("device_traces", []))
    actions = {e.get("action") for t in snap.get("device_traces", []) for e in t}
    assert traces >= 4, f"the dumped snapshot has {traces} trace events (3 allocs + 1 free made)"
    assert {"alloc", "free_requested"} <= actions or {"alloc", "free_completed"} <= actions, actions
    html = os.path.join(OUT, "trace.html")
    r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", path,
                        "-o", html], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"_memory_viz trace_plot: {r.stderr[-300:]}"
    assert os.path.getsize(html) > 1000, "trace_plot wrote no plot"
    del xs
    return {"segments": len(snap["segments"]), "trace_events": traces}


@check("empty_cache")
def _():
    x = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
    del x
    free_before = torch.cuda.mem_get_info()[0]
    torch.cuda.empty_cache()
    free_after = torch.cuda.mem_get_info()[0]
    gained = free_after - free_before
    assert gained >= 128 * MIB, f"empty_cache gave back {gained / MIB:.1f} MiB of 256"
    return {"gained_mib": gained // MIB}


@check("cuda_graph")
def _():
    x = torch.ones(1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = x * 2 + 1
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2 + 1
    x.fill_(3)
    g.replay()
    torch.cuda.synchronize()
    assert float(y[0]) == 7.0, f"replay gave {float(y[0])}"
    del g, y
    return {"replayed": True}


@check("torch_compile_reduce_overhead", expected_fail_in_pluggable=True)
def _():
    def f(a):
        return (a * 2).sin() + 1

    compiled = torch.compile(f, mode="reduce-overhead")
    try:
        for n in (256, 256, 256, 512, 512, 512):
            a = torch.randn(n, device="cuda")
            out = compiled(a)
            torch.testing.assert_close(out, f(a))
    except Exception as e:  # noqa: BLE001
        text = f"{type(e).__name__}: {e}"
        missing = ("not found", "No such file", "triton", "Compiler", "gcc", "cc1plus",
                   "Python.h", "CUDA_HOME", "nvcc")
        if any(m in text for m in missing) and "allocator" not in text.lower():
            raise Skip(f"compile toolchain missing: {text[:200]}") from e
        raise
    return {"shapes": [256, 512]}


@check("oom")
def _():
    stats0 = torch.cuda.memory_stats()
    reserved0 = torch.cuda.memory_reserved()
    free0 = torch.cuda.mem_get_info()[0]
    reports0 = set(glob.glob(os.path.join(OOM_DIR, "*")))
    err = allocate_or_oom(TOTAL * 4)
    assert err is not None, "a request of 4x the device memory did not fail"
    assert isinstance(err, oom_error_type())
    if FRAGFREE:
        assert "fragfree" in str(err), f"OOM message without fragfree: {str(err)[:200]}"
    stats1 = torch.cuda.memory_stats()
    grew = stats1["num_ooms"] - stats0.get("num_ooms", 0)
    assert grew >= 1, f"num_ooms grew by {grew}"
    free1 = torch.cuda.mem_get_info()[0]
    # Nothing of the failed request stays mapped; cached memory may be released.
    assert free1 >= free0 - 2 * MIB, f"free memory fell by {(free0 - free1) / MIB:.1f} MiB"
    assert free1 <= free0 + reserved0 + 2 * MIB, "free memory rose beyond the cache"
    detail = {"type": type(err).__name__, "num_ooms_delta": grew,
              "free_delta_mib": (free1 - free0) / MIB}
    if FRAGFREE:
        reports = set(glob.glob(os.path.join(OOM_DIR, "*"))) - reports0
        assert reports, f"oom_report_path={OOM_DIR} got no file"
        detail["reports"] = len(reports)
    return detail


@check("memory_fraction")
def _():
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(0.1)
    try:
        err = allocate_or_oom(int(TOTAL * 0.2))
        assert err is not None, "0.2 of the device under a 0.1 fraction did not fail"
        small = torch.empty(int(TOTAL * 0.05), dtype=torch.uint8, device="cuda")
        del small
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    return {"type": type(err).__name__}


@check("caching_allocator_alloc")
def _():
    base = torch.cuda.memory_allocated()
    p = torch.cuda.caching_allocator_alloc(3 * MIB)
    mid = torch.cuda.memory_allocated()
    side = torch.cuda.Stream()
    q = torch.cuda.caching_allocator_alloc(5 * MIB, stream=side)
    torch.cuda.caching_allocator_delete(p)
    torch.cuda.caching_allocator_delete(q)
    end = torch.cuda.memory_allocated()
    assert mid - base >= 3 * MIB and end == base, (base, mid, end)
    return {"allocated": [base, mid, end]}


@check("memory_snapshot_blocks")
def _():
    x = torch.empty(7 * MIB, dtype=torch.uint8, device="cuda")
    segments = torch.cuda.memory_snapshot()
    found = any(b.get("state") == "active_allocated" and b["size"] >= 7 * MIB
                for seg in segments for b in seg["blocks"])
    keys = sorted(segments[0].keys()) if segments else []
    del x
    assert found, f"no active 7 MiB block in memory_snapshot(); segment keys {keys}"
    return {"segment_keys": keys}


@check("peaks_and_nested_stats")
def _():
    torch.cuda.reset_peak_memory_stats()
    y = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
    peak_allocated = torch.cuda.max_memory_allocated()
    peak_reserved = torch.cuda.max_memory_reserved()
    del y
    nested = torch.cuda.memory_stats_as_nested_dict()
    assert peak_allocated >= 64 * MIB and peak_reserved >= peak_allocated, (peak_allocated, peak_reserved)
    assert "allocated_bytes" in nested
    torch.cuda.reset_max_memory_allocated()
    return {"peaks": [peak_allocated, peak_reserved], "after_reset": torch.cuda.max_memory_allocated()}


@check("empty_cache_reserved")
def _():
    z = torch.empty(1024 * MIB, dtype=torch.uint8, device="cuda")
    del z
    reserved0, free0 = torch.cuda.memory_reserved(), torch.cuda.mem_get_info()[0]
    torch.cuda.empty_cache()
    reserved1, free1 = torch.cuda.memory_reserved(), torch.cuda.mem_get_info()[0]
    assert reserved1 < reserved0 and free1 > free0, (reserved0, reserved1, free0, free1)
    return {"reserved": [reserved0, reserved1], "freed": free1 - free0}


@check("allocator_settings")
def _():
    torch.cuda.memory._set_allocator_settings("roundup_power2_divisions:4")
    a = torch.empty(1000 * 1000 + 3, dtype=torch.uint8, device="cuda")
    return {"storage_bytes": a.untyped_storage().nbytes()}


@check("memory_fraction_get")
def _():
    get = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if get is None:
        raise Skip("torch.cuda.get_per_process_memory_fraction is absent in this torch")
    torch.cuda.set_per_process_memory_fraction(0.5)
    try:
        value = get()
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert abs(value - 0.5) < 1e-6, value
    return {"fraction": value}


@check("record_stream")
def _():
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = torch.ones(16 * MIB // 4, device="cuda")
    t.record_stream(torch.cuda.current_stream())
    torch.cuda.current_stream().wait_stream(side)
    total = float(t.sum())
    del t
    torch.cuda.synchronize()
    assert total == 4 * MIB, total
    return {"sum": total}



@check("record_stream_waited_for_before_oom")
def _():
    # A block freed while another stream still uses it is not lost to a
    # request that needs it: PyTorch waits for the stream before it reports
    # an OOM. Under a cap that holds one 0.6-cap block but not two, the
    # second is requested while the side stream is still busy with the first.
    torch.cuda.empty_cache()
    cap = int(TOTAL * 0.1)
    torch.cuda.set_per_process_memory_fraction(0.1)
    side = torch.cuda.Stream()
    try:
        first = torch.empty(int(cap * 0.6), dtype=torch.uint8, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(1_000_000_000)  # ~0.5 s of GPU time
            first.fill_(1)
        first.record_stream(side)
        del first
        busy = not side.query()
        err = allocate_or_oom(int(cap * 0.6))
        assert err is None, f"the freed block was not waited for: {str(err)[:200]}"
    finally:
        torch.cuda.synchronize()
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    return {"side_stream_busy_at_request": busy}

ok = all(r["ok"] is not False for r in results.values())
print(json.dumps({
    "mode": MODE,
    "fragfree_mode": None if fragfree is None else fragfree.mode(),
    "torch": torch.__version__,
    "backend": torch.cuda.memory.get_allocator_backend(),
    "ok": ok,
    "checks": results,
    "artifacts": OUT,
}))
sys.exit(0 if ok else 1)
