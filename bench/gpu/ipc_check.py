"""CUDA IPC with fragfree (docs/ipc.md), on a GPU, against PyTorch's allocators.

  python3 bench/gpu/ipc_check.py --lib build/lib/libfragfree.so [--modes ...]

Modes (each in its own processes): default (PyTorch's native allocator),
expandable (expandable_segments:True), native (fragfree.enable("native")),
preload (LD_PRELOAD=libfragfree.so). For each: what cuMemGetAddressRange and
cuPointerGetAttribute(RANGE_*) answer today for a 10 MiB tensor (several 2 MiB
pages) next to ff_get_address_range; a tensor shared parent -> spawned child
and child -> parent, read and written on both sides; 1000 share/release
cycles (device memory must come back); export cost and open latency per size.
Also the cost of cuMemCreate with and without POSIX-fd shareable handles.
Prints a table and one JSON line (prefix "JSON ").
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

MIB = 1 << 20


def cu():
    lib = ctypes.CDLL("libcuda.so.1")
    return lib


def driver_range(ptr):
    lib = cu()
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    r = lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
    out = {"cuMemGetAddressRange": [r, base.value - ptr if r == 0 else None, size.value]}
    for name, attr in (("RANGE_START_ADDR", 11), ("RANGE_SIZE", 12)):
        v = ctypes.c_uint64()
        r = lib.cuPointerGetAttribute(ctypes.byref(v), attr, ctypes.c_uint64(ptr))
        out[name] = [r, (v.value - ptr) if name == "RANGE_START_ADDR" and r == 0 else v.value]
    return out


def ff_range(ptr):
    path = os.environ.get("FRAGFREE_LIBRARY")
    try:
        lib = ctypes.CDLL(path) if path else ctypes.CDLL(None)
        f = lib.ff_get_address_range
    except (OSError, AttributeError):
        return None
    base, size = ctypes.c_void_p(), ctypes.c_size_t()
    f.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
    r = f(ctypes.c_void_p(ptr), ctypes.byref(base), ctypes.byref(size))
    return [r, (base.value or 0) - ptr if r == 0 else None, size.value]


def setup(mode):
    if mode == "native":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "integrations", "python"))
        import fragfree as ff
        ff.enable(mode="native")
    import torch
    torch.cuda.init()
    return torch


def consumer(mode, q_in, q_out):
    torch = setup(mode)
    while True:
        msg = q_in.get()
        kind = msg[0]
        if kind == "stop":
            return
        if kind == "rw":  # read the parent's tensor, write it, send one back
            t = msg[1]
            ok = bool((t == 1).all())
            t.fill_(2)
            torch.cuda.synchronize()
            mine = torch.full((5 * MIB // 4,), 3.0, device="cuda")
            q_out.put(("rw", ok, mine))
            back = q_in.get()  # the parent wrote 4 into ours
            q_out.put(("rw2", bool((mine == 4).all())))
            del back
        elif kind == "cycle":
            t = msg[1]
            t.add_(1)
            torch.cuda.synchronize()
            del t
            q_out.put(("ok",))
        elif kind == "open":  # time the rebuild of a storage from its handle
            args = msg[1]
            t0 = time.perf_counter()
            s = torch.UntypedStorage._new_shared_cuda(*args)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            del s
            q_out.put(("open", dt))


def run_mode(mode):
    torch = setup(mode)
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    out = {"mode": mode}
    t = torch.ones(10 * MIB // 4, device="cuda")
    out["ranges"] = {"driver": driver_range(t.data_ptr()), "fragfree": ff_range(t.data_ptr())}
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=consumer, args=(mode, q_in, q_out))
    p.start()
    try:
        q_in.put(("rw", t))
        _, child_read_ok, theirs = q_out.get(timeout=120)
        torch.cuda.synchronize()
        out["parent_to_child_read"] = child_read_ok
        out["child_write_seen"] = bool((t == 2).all())
        out["child_to_parent_read"] = bool((theirs == 3).all())
        theirs.fill_(4)
        torch.cuda.synchronize()
        q_in.put(("ack", None))
        out["parent_write_seen"] = q_out.get(timeout=120)[1]
        del theirs
        torch.cuda.synchronize()
        torch.cuda.ipc_collect()
        before = torch.cuda.memory_allocated()
        free_before = torch.cuda.mem_get_info()[0]
        for i in range(1000):
            x = torch.zeros((1 + i % 8) * MIB // 4, device="cuda")
            q_in.put(("cycle", x))
            q_out.get(timeout=60)
            del x
        torch.cuda.synchronize()
        torch.cuda.ipc_collect()
        time.sleep(0.5)
        torch.cuda.ipc_collect()
        out["cycles_allocated_delta"] = torch.cuda.memory_allocated() - before
        torch.cuda.empty_cache()
        out["cycles_device_free_delta_mib"] = (torch.cuda.mem_get_info()[0] - free_before) / MIB
        costs = {}
        for mib in (2, 20, 200):
            x = torch.empty(mib * MIB, dtype=torch.uint8, device="cuda")
            s = x.untyped_storage()
            t0 = time.perf_counter()
            args = s._share_cuda_()
            export = time.perf_counter() - t0
            q_in.put(("open", args))
            opened = q_out.get(timeout=120)[1]
            costs[mib] = {"export_us": export * 1e6, "export_us_per_page": export * 1e6 / max(1, mib // 2),
                          "open_us": opened * 1e6, "handle_bytes": len(args[1])}
            del s, x
        out["costs"] = costs
    except Exception as e:  # noqa: BLE001 - reported in the table
        out["error"] = f"{type(e).__name__}: {e}"[:400]
    finally:
        q_in.put(("stop",))
        p.join(timeout=60)
    print("RESULT " + json.dumps(out), flush=True)


def create_cost(n=200):
    lib = cu()
    lib.cuInit(0)
    ctx = ctypes.c_void_p()
    dev = ctypes.c_int()
    lib.cuDeviceGet(ctypes.byref(dev), 0)
    lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    lib.cuCtxSetCurrent(ctx)

    class Prop(ctypes.Structure):  # CUmemAllocationProp
        _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                    ("loc_type", ctypes.c_int), ("loc_id", ctypes.c_int),
                    ("win32", ctypes.c_void_p), ("compression", ctypes.c_ubyte),
                    ("rdma", ctypes.c_ubyte), ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]
    res = {}
    for name, ht in (("plain", 0), ("posix_fd", 1)):
        prop = Prop(type=1, requestedHandleTypes=ht, loc_type=1, loc_id=0)
        hs = []
        t0 = time.perf_counter()
        for _ in range(n):
            h = ctypes.c_uint64()
            r = lib.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(2 * MIB), ctypes.byref(prop), ctypes.c_uint64(0))
            if r != 0:
                res[name] = f"cuMemCreate error {r}"
                break
            hs.append(h)
        else:
            res[name] = (time.perf_counter() - t0) * 1e6 / n
        for h in hs:
            lib.cuMemRelease(h)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/lib/libfragfree.so")
    ap.add_argument("--modes", default="default,expandable,native,preload")
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.child:
        run_mode(a.child)
        return
    try:
        scope = open("/proc/sys/kernel/yama/ptrace_scope").read().strip()
    except OSError:
        scope = "absent"
    results = {"ptrace_scope": scope, "create_us_per_2mib": create_cost(), "modes": []}
    for mode in a.modes.split(","):
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if mode == "expandable":
            env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        if mode in ("native", "preload"):
            env["FRAGFREE_LIBRARY"] = os.path.abspath(a.lib)
        if mode == "preload":
            env["LD_PRELOAD"] = os.path.abspath(a.lib)
        r = subprocess.run([sys.executable, __file__, "--child", mode], env=env,
                           capture_output=True, text=True, timeout=900)
        line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
        if not line:
            results["modes"].append({"mode": mode, "error": f"rc={r.returncode} {r.stderr[-800:]}"})
            continue
        results["modes"].append(json.loads(line[-1][7:]))
    print(f"ptrace_scope={scope}  cuMemCreate 2 MiB: {results['create_us_per_2mib']} us")
    hdr = ("mode", "p->c read", "c write", "c->p read", "p write", "1000 cycles dAlloc",
           "export us/page (200M)", "open us (2M/20M/200M)", "driver range", "ff range")
    print(" | ".join(hdr))
    for m in results["modes"]:
        if "error" in m and "costs" not in m:
            print(f"{m['mode']} | ERROR {m['error'][:300]}")
            continue
        c = m.get("costs", {})
        opens = "/".join(f"{c[k]['open_us']:.0f}" for k in (2, 20, 200) if k in c)
        exp = f"{c[200]['export_us_per_page']:.1f}" if 200 in c else "-"
        print(" | ".join(str(x) for x in (
            m["mode"], m.get("parent_to_child_read"), m.get("child_write_seen"),
            m.get("child_to_parent_read"), m.get("parent_write_seen"),
            m.get("cycles_allocated_delta"), exp, opens,
            m["ranges"]["driver"], m["ranges"]["fragfree"])))
    print("JSON " + json.dumps(results))


if __name__ == "__main__":
    main()
