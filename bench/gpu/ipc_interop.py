"""CUDA tensors shared between processes with different allocators, and a
sharing stress, on a GPU (docs/ipc.md). Complements bench/gpu/ipc_check.py.

  python3 bench/gpu/ipc_interop.py --lib build/lib/libfragfree.so interop
  python3 bench/gpu/ipc_interop.py --lib build/lib/libfragfree.so stress [--iterations 300]

interop: for each pair PARENT>CHILD of allocator setups (default = PyTorch's
native allocator, expandable = expandable_segments:True, native =
fragfree.enable("native"), preload = LD_PRELOAD=libfragfree.so), the parent
sends a 10 MiB tensor to a spawned child, which reads it, writes it and sends
one of its own back, which the parent reads and writes. One RESULT line per
pair: each step's outcome, or the error text.
stress: parent and child both allocate and free random tensors while the
parent shares a fresh tensor every iteration and the child checks, writes and
drops it; at the end the parent's allocated memory and the device's free
memory must be back where they started. One RESULT line per setup.
Prints a table and one JSON line (prefix "JSON ").
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

MIB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def child_env(setup, lib):
    """The environment a process of `setup` starts with."""
    env = dict(os.environ)
    for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "LD_PRELOAD"):
        env.pop(k, None)
    if setup == "expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if setup in ("native", "preload"):
        env["FRAGFREE_LIBRARY"] = lib
    if setup == "preload":
        env["LD_PRELOAD"] = lib
    return env


def setup_torch(setup):
    if setup == "native":
        sys.path.insert(0, os.path.join(HERE, "..", "..", "integrations", "python"))
        import fragfree as ff
        ff.enable(mode="native")
    import torch
    torch.cuda.init()
    return torch


def consumer(setup, q_in, q_out):
    torch = setup_torch(setup)
    rng = random.Random(5)
    mine = []
    while True:
        msg = q_in.get()
        if msg[0] == "stop":
            return
        if msg[0] == "rw":
            t = msg[1]
            ok = bool((t == 1).all())
            t.fill_(2)
            torch.cuda.synchronize()
            own = torch.full((10 * MIB // 4,), 3.0, device="cuda")
            q_out.put(("rw", ok, own))
            q_in.get()  # the parent wrote 4 into ours
            q_out.put(("rw2", bool((own == 4).all())))
            del own
        elif msg[0] == "stress":
            t, value = msg[1], msg[2]
            mine.append(torch.empty(rng.randint(1, 24) * MIB + rng.randint(0, 4095),
                                    dtype=torch.uint8, device="cuda"))
            if len(mine) > 8:
                mine.pop(rng.randrange(len(mine)))
            ok = bool((t == value).all())
            t.add_(1)
            torch.cuda.synchronize()
            del t
            q_out.put(("stress", ok))
        elif msg[0] == "drop":
            mine.clear()
            torch.cuda.synchronize()
            q_out.put(("dropped",))


def spawn_child(torch, child_setup, lib):
    """A spawned consumer whose process starts with `child_setup`'s
    environment (spawn copies os.environ at start)."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    saved = dict(os.environ)
    env = child_env(child_setup, lib)  # read before os.environ is cleared
    os.environ.clear()
    os.environ.update(env)
    try:
        q_in, q_out = ctx.Queue(), ctx.Queue()
        p = ctx.Process(target=consumer, args=(child_setup, q_in, q_out))
        p.start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return p, q_in, q_out


def stop_child(p, q_in, out):
    """Stops the consumer, records its exit code and prints the RESULT line."""
    q_in.put(("stop",))
    p.join(timeout=60)
    if p.is_alive():
        p.kill()
    out["child_exit"] = p.exitcode
    print("RESULT " + json.dumps(out), flush=True)


def run_pair(parent_setup, child_setup, lib):
    torch = setup_torch(parent_setup)
    out = {"pair": f"{parent_setup}>{child_setup}"}
    p, q_in, q_out = spawn_child(torch, child_setup, lib)
    try:
        t = torch.ones(10 * MIB // 4, device="cuda")
        q_in.put(("rw", t))
        _, read_ok, theirs = q_out.get(timeout=180)
        torch.cuda.synchronize()
        out["child_reads"] = read_ok
        out["parent_sees_child_write"] = bool((t == 2).all())
        out["parent_reads_child_tensor"] = bool((theirs == 3).all())
        theirs.fill_(4)
        torch.cuda.synchronize()
        q_in.put(("ack",))
        out["child_sees_parent_write"] = q_out.get(timeout=180)[1]
        del theirs
    except Exception as e:  # noqa: BLE001 - recorded
        out["error"] = f"{type(e).__name__}: {e}"[:500]
    finally:
        stop_child(p, q_in, out)


def run_stress(setup, lib, iterations):
    torch = setup_torch(setup)
    out = {"setup": setup, "iterations": iterations}
    rng = random.Random(9)
    torch.cuda.synchronize()
    alloc0 = torch.cuda.memory_allocated()
    p, q_in, q_out = spawn_child(torch, setup, lib)
    live, bad = [], 0
    try:
        for i in range(iterations):
            value = float(i % 97)
            t = torch.full((rng.randint(1, 16) * MIB // 4 + rng.randint(0, 1000),), value,
                           device="cuda")
            q_in.put(("stress", t, value))
            for _ in range(3):  # churn while the child works
                live.append(torch.empty(rng.randint(1, 8) * MIB, dtype=torch.uint8,
                                        device="cuda"))
                if len(live) > 12:
                    live.pop(0)
            ok = q_out.get(timeout=120)[1]
            torch.cuda.synchronize()
            if not ok or not bool((t == value + 1).all()):
                bad += 1
            del t
        live.clear()
        q_in.put(("drop",))
        q_out.get(timeout=120)
        torch.cuda.synchronize()
        torch.cuda.ipc_collect()
        time.sleep(0.5)
        torch.cuda.ipc_collect()
        out["bad_iterations"] = bad
        out["allocated_delta"] = torch.cuda.memory_allocated() - alloc0
    except Exception as e:  # noqa: BLE001 - recorded
        out["error"] = f"{type(e).__name__}: {e}"[:500]
    finally:
        stop_child(p, q_in, out)


def run_child(args, lib, env_setup, timeout=900):
    r = subprocess.run([sys.executable, __file__, "--lib", lib] + args,
                       env=child_env(env_setup, lib), capture_output=True, text=True,
                       timeout=timeout)
    lines = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
    if not lines:
        return {"error": f"rc={r.returncode} {r.stderr[-600:]}"}
    return json.loads(lines[-1][7:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/lib/libfragfree.so")
    ap.add_argument("what", choices=["interop", "stress", "pair-child", "stress-child"])
    ap.add_argument("--pairs", default="expandable>native,native>expandable,"
                    "expandable>preload,preload>expandable,default>native,native>default,"
                    "native>preload,preload>native")
    ap.add_argument("--setups", default="native,preload,expandable,default")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--arg", default="")
    a = ap.parse_args()
    lib = os.path.abspath(a.lib)
    if a.what == "pair-child":
        parent, child = a.arg.split(">")
        run_pair(parent, child, lib)
        return
    if a.what == "stress-child":
        run_stress(a.arg, lib, a.iterations)
        return
    results = []
    if a.what == "interop":
        keys = ("child_reads", "parent_sees_child_write", "parent_reads_child_tensor",
                "child_sees_parent_write")
        print("pair (parent>child) | " + " | ".join(keys) + " | error")
        for pair in a.pairs.split(","):
            r = run_child(["pair-child", "--arg", pair], lib, pair.split(">")[0])
            r.setdefault("pair", pair)
            results.append(r)
            print(" | ".join([pair] + [str(r.get(k)) for k in keys] +
                             [r.get("error", "")[:200]]), flush=True)
    else:
        print("setup | iterations | bad | allocated delta | child exit | error")
        for setup in a.setups.split(","):
            r = run_child(["stress-child", "--arg", setup, "--iterations",
                           str(a.iterations)], lib, setup)
            r.setdefault("setup", setup)
            results.append(r)
            print(" | ".join(str(x) for x in (
                setup, r.get("iterations"), r.get("bad_iterations"), r.get("allocated_delta"),
                r.get("child_exit"), r.get("error", "")[:200])), flush=True)
    print("JSON " + json.dumps({a.what: results}))


if __name__ == "__main__":
    main()
