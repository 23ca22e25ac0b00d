"""Step time under each allocator, alternated over rounds so that the drift of a
shared GPU machine falls on every allocator alike.

  python3 bench/gpu/step_time.py --lib path/to/libfragfree.so --out DIR
      [--workloads gpt2,gpt2+ckpt,llama+ckpt,fsdp,moe]
      [--modes torch,expandable,ff-native,ff-pluggable,ff-preload]
      [--rounds 3] [--warmup 5] [--steps 20] [--budget-s 530]
      [--lockstep] [--device cpu]   (cpu: the plumbing, tiny workloads, no allocator swap)
  python3 bench/gpu/step_time.py --out DIR --pool CALL/step_time.json [CALL2/step_time.json ...]

Workloads (bench/gpu/workloads.py, seeded: every allocator sees the same
requests): gpt2, gpt2+ckpt, llama, llama+ckpt (HF models built from config,
variable sequence length; "+flash" keeps attention off cuDNN's kernels, whose
per-call graph building on the CPU dominates those steps), fsdp (two streams: the next layer's weights gathered
on a side stream), moe (6 layers x 16 experts, a new token count per expert
every step, 4k..32k tokens a step).

Modes: torch (PyTorch's default caching allocator), expandable
(expandable_segments:True), ff-native (fragfree.enable(mode="native")),
ff-pluggable (fragfree.enable(mode="pluggable")), ff-preload
(LD_PRELOAD=libfragfree.so). A fragfree mode may carry engine options after
"@", added to FRAGFREE_CONF ("+" for ","): ff-native@defer_unmap:False or
ff-native@time_calls:False+page_size_mb:8. Any mode may carry
a label after "#" that only names its row: torch#again runs PyTorch's default
once more in every round, an A/A control whose ratio to torch is the spread
that no allocator causes (one process against another: on the H200, 1-4%).

Every (workload, mode, round) is its own process. Rounds are the outer loop;
within a round each workload runs under every mode back to back, the modes'
order rotated by one each round. A run: --warmup steps, then --steps timed
steps (each ends with a synchronise); fragfree's stats are read before and
after the timed steps, so the per-step figures (CPU time inside fragfree's
Malloc and Free, backend calls and their time, pages remapped, fence waits)
cover exactly the timed steps (docs/stats.md, "Where the time goes"); each
run's RESULT line carries reserved_series (torch.cuda.memory_reserved() after
every timed step, in every mode) and, with --series, for fragfree, ff_series, the same stats
read after every timed step (pages created and remapped, fence waits, CPU time inside fragfree,
reserved bytes): how fragfree's memory converges, and what a step that grows
costs against one that does not. --series is off by default: reading and parsing
fragfree's stats between steps is work only fragfree's modes would do, and the
step after it starts with the CPU's caches holding that work instead of the
step's (with the series read, fragfree's first gather of an FSDP-style step was
0.02 ms longer in every way in, LD_PRELOAD included; without it, PyTorch's:
bench/results/2026-12-06-h100-session39.md).

Reported per workload and mode: the median step time (the median of the
rounds' medians), its ratio to torch (median of the rounds' ratios) with the
spread (min-max of the per-round ratios), the allocator's peak reserved (min-max
(mean) over the runs where they differ) and
allocated memory, and the per-step fragfree figures. With PyTorch's default in
the modes more than once (torch,torch#again), a second table gives each run's
ratio to the mean of those runs in its round. --budget-s: a round is
started only if it is expected to finish within that many seconds of the
start (the first always runs), so one GPU call of 10 minutes gives as many
whole rounds as fit; --workloads/--modes split the matrix over several calls,
and --pool reads several calls' step_time.json back as one set of runs (each
call's rounds kept apart) and writes the same tables over all of them.

Each run's record holds cpu_ms, the process's CPU time in each timed step
beside its wall time, and sync_ms, the time the step's closing synchronise
waited for the GPU (workloads.sync_wait_s). cpu_ms equals the wall time
whenever the CPU spins in that synchronise, so it cannot say whose pace a step
is; sync_ms can: near zero, the GPU had finished before the CPU got there and
the step is the CPU's (a table "Whose pace" gives the median and its share of
the step). A workload that marks its phases (workloads.py's _mark; FSDP-style
does) adds phase_ms, each phase's wall ms per timed step, and with --lockstep
a table pairs each step's phases with torch's: where the GPU waited through a
phase (the step's start, or after its closing synchronise), a longer phase is
a longer step. --profile-steps N runs N more steps after the timed ones
under cProfile, and one under torch.profiler (the GPU's busy time against the
step's), into the run's log: where a CPU-bound step's time goes.

--lockstep runs a round differently: every mode's process of a workload is set
up at once, and then the parent lets one process run one timed step at a time,
the modes' order shuffled each step (LockstepChild and LockstepKid speak
READY / GO / END over the children's stdin and stdout). Step k of every mode
then runs within a few steps' time of the others', so a host whose CPU speed
drifts over seconds (a CPU-paced step's time moves ±20% within one process:
bench/results/2026-12-03-h200-session16.md) moves them alike, and a table "Step
by step" gives each mode's steps ÷ torch's steps of the same index and round:
the median with its 95% confidence interval, and the 10th-90th percentiles;
then with the run as the unit (each run's median ratio; the median over runs,
its interval and in how many runs it is above 1: a run's steps share their
process's luck, so the per-step interval is too narrow where runs differ);
and the CPU part of each step (the step less its closing wait) less torch's
same step's, per run likewise. With PyTorch's default in the modes again
(torch#again), a table "Against PyTorch's second process" pairs each run with
that control round by round (both divided by the same torch run, whose luck
then cancels): the median difference, in how many rounds the run is the slower,
and the sign test's p: whether a mode lands anywhere a second PyTorch process
would not.
The processes share the GPU (an idle one holds its memory) and wall-clock time:
fragfree's move time budget (Note [Move time budget] in docs/design.md) counts
the others' steps as time in which it moved nothing, so with N modes a fragfree
process may move pages ~N times as long a step as it would alone; on a workload
that moves pages, give fragfree modes 1/N of the budget for the run alone's
behaviour (five modes: ff-native@move_time_budget:0.004), or the meter the
process's CPU time (ff-native@move_clock:cpu), which stands still while a
process waits its turn.

--probe N times N launches of a 1-element add_ before every timed step (outside
its timing; µs a launch in the record's probe_us): the process's CPU speed at
that moment. On a machine whose CPU speed moves from process to process
(bench/results/2026-12-02-h200-session11.md: launches at 6.3-10.6 µs), a
second table then gives each mode's step time per probe microsecond against
torch's (the ratio with that speed divided out), beside the plain ratio.

--pin-cpus LIST (e.g. 2-5 or 2,3,4,5) runs every child on those CPUs alone
(sched_setaffinity), so that runs do not differ by where the scheduler put
them. Each run's record also holds the GPU's SM clock (MHz), temperature (C) and
power draw (W) read with nvidia-smi just before it starts (gpu_before), so that
a round whose runs all moved together can be told from an allocator's cost.

Writes DIR/step_time.json (every run, and the summary rows) and
DIR/step_time.md (the table), logs DIR/logs/<run>.log; prints the table last.
This file runs the processes and records them; bench/gpu/step_summary.py turns
the records into rows and tables.
"""
import argparse
import json
import os
import random
import select
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from step_summary import FF_COUNTERS, pool, write_summary  # noqa: E402
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
MODES = ("torch", "expandable", "ff-native", "ff-pluggable", "ff-preload")
# Read after every timed step (counters as deltas, gauges as they are).
FF_SERIES = ("create_calls", "pages_remapped", "fence_waits", "alloc_cpu_ns",
             "reserved_bytes.all.current")


def child(args):
    """One run: prints "RESULT {json}"."""
    mode, cpu = args.child_mode, args.device == "cpu"
    ff = None
    if mode.startswith("ff-"):
        sys.path.insert(0, os.path.join(REPO, "integrations", "python"))
        import fragfree as ff
        if mode in ("ff-native", "ff-pluggable") and not cpu:
            ff.enable(mode[3:])
    import torch
    sys.path.insert(0, HERE)
    import workloads
    dev = torch.device(args.device)
    if not cpu:
        torch.cuda.init()
        # cuBLAS's workspace (kept for the process's life) is made now.
        w = torch.randn(256, 256, device=dev, requires_grad=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            (w @ w).sum().backward()
        del w
        torch.cuda.synchronize()

    def ff_stats():
        if ff is None:
            return None
        return ff.stats(0)

    t_setup = time.perf_counter()
    wl = workloads.make(args.child_workload, dev, seed=args.seed, tiny=cpu)
    for _ in range(args.warmup):
        wl.step()
    gate = LockstepChild() if args.lockstep else None
    before = ff_stats()
    times, losses = [], []
    # Per timed step, outside the timing: pages created / remapped, fence waits
    # and reserved bytes (how fragfree converges, step by step).
    series = {k: [] for k in FF_SERIES} if ff is not None and args.series else None
    # Reserved bytes after every timed step as PyTorch reports them, in every
    # mode (torch.cuda.memory_reserved): whether an allocator still grows.
    reserved = []
    # The process's CPU time per timed step (every thread). It equals the wall
    # time whenever the CPU spins in a synchronise, so whose pace a step is
    # comes from sync_ms: the time the step's closing synchronise waited for
    # the GPU, near zero when the GPU had finished before the CPU got there.
    cpu_ms = []
    sync_ms = []
    # Each marked phase's wall ms per timed step (workloads.phase_marks), for
    # step_phases.py: which part of a step one allocator lengthens.
    phase_ms = {}
    probe_us = []
    probe_x = torch.zeros(1, device=dev) if args.probe and not cpu else None
    last = before
    for _ in range(args.steps):
        if gate is not None and not gate.wait():
            break
        if probe_x is not None:
            torch.cuda.synchronize()
            p0 = time.perf_counter()
            for _ in range(args.probe):
                probe_x.add_(1)
            torch.cuda.synchronize()
            probe_us.append(round((time.perf_counter() - p0) / args.probe * 1e6, 3))
        elif not cpu:  # (the probe ends synchronised)
            torch.cuda.synchronize()
        w0 = workloads.sync_wait_s
        c0, t0 = time.process_time(), time.perf_counter()
        workloads.phase_marks = [("start", t0)]
        losses.append(wl.step())  # synchronises (reads the loss)
        times.append(time.perf_counter() - t0)
        marks, workloads.phase_marks = workloads.phase_marks, None
        for (_, a), (phase, b) in zip(marks, marks[1:]):
            phase_ms.setdefault(phase, []).append(round(1000 * (b - a), 4))
        cpu_ms.append(round(1000 * (time.process_time() - c0), 3))
        if not cpu:
            sync_ms.append(round(1000 * (workloads.sync_wait_s - w0), 3))
        if reserved is not None and not cpu:
            try:
                reserved.append(torch.cuda.memory_reserved())
            except Exception:  # an allocator that does not answer it
                reserved = None
        if series is not None and last is not None:
            now = ff_stats()
            for k in FF_SERIES:
                gauge = k.endswith(".current")
                series[k].append(now.get(k, 0) - (0 if gauge else last.get(k, 0)))
            last = now
    if gate is not None:
        gate.wait()  # the parent's "END": every process has run its steps
    after = ff_stats()
    if args.profile_steps:
        profile_steps(wl, args.profile_steps)
    res = dict(workload=args.child_workload, mode=mode, steps=len(times),
               step_ms=[round(1000 * t, 3) for t in times], cpu_ms=cpu_ms, sync_ms=sync_ms,
               step_ms_median=round(1000 * statistics.median(times), 3),
               setup_s=round(time.perf_counter() - t_setup, 2),
               losses=[round(v, 4) for v in losses[-3:]], reserved_series=reserved)
    if probe_us:
        res["probe_us"] = probe_us
    if phase_ms:
        res["phase_ms"] = phase_ms
    if ff is not None and after is not None:
        per_step = {k: (after.get(k, 0) - before.get(k, 0)) / max(1, len(times))
                    for k in FF_COUNTERS}
        res["ff_per_step"] = {k: round(v, 2) for k, v in per_step.items()}
        res["ff_series"] = series
        res["peak_reserved"] = after["reserved_bytes.all.peak"]
        res["peak_allocated"] = after["allocated_bytes.all.peak"]
    elif not cpu:
        res["peak_reserved"] = torch.cuda.max_memory_reserved()
        res["peak_allocated"] = torch.cuda.max_memory_allocated()
    print("RESULT " + json.dumps(res), flush=True)


class LockstepChild:
    """A child's side of --lockstep: at every gate (before each timed step,
    and once after the last) it says READY on stdout and blocks until the
    parent's next line: GO runs the step, anything else (END, or the pipe
    closed) ends the timed steps."""

    def wait(self):
        print("READY", flush=True)
        return sys.stdin.readline().strip() == "GO"


def profile_steps(wl, n):
    """Runs `n` more steps (after the timed ones, so their figures are not
    touched) under cProfile and prints where the Python side's time went, by
    own time and by cumulative time (the run's log keeps it)."""
    import cProfile
    import io
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        wl.step()
    prof.disable()
    for key in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats(key).print_stats(30)
        print(f"PROFILE {n} steps by {key}\n" + text.getvalue(), flush=True)
    if wl.dev.type != "cuda":
        return
    # One more step under torch.profiler: the GPU's busy time against the
    # step's wall time (a step the GPU waits on is the CPU's to shorten).
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        t0 = time.perf_counter()
        wl.step()
        wall = time.perf_counter() - t0
    events = p.key_averages()
    gpu_us = sum(e.self_device_time_total for e in events)
    print(f"PROFILE gpu busy {gpu_us / 1e3:.1f} ms of a {wall * 1e3:.1f} ms step (profiled)\n"
          + events.table(sort_by="self_cpu_time_total", row_limit=25) + "\n"
          + events.table(sort_by="self_device_time_total", row_limit=20), flush=True)


def base_mode(mode):
    """The mode without its "#" label and "@" engine options."""
    return mode.partition("#")[0].partition("@")[0]


def run_env(mode, lib, device):
    """The child's environment. A mode may carry engine options after "@"
    (e.g. ff-native@defer_unmap:False), added to FRAGFREE_CONF."""
    mode, _, extra = mode.partition("#")[0].partition("@")
    env = dict(os.environ)
    for k in ("PYTORCH_CUDA_ALLOC_CONF", "LD_PRELOAD"):
        env.pop(k, None)
    if lib:
        env["FRAGFREE_LIBRARY"] = lib
    if mode == "expandable" and device != "cpu":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if mode == "ff-preload" and device != "cpu":
        env["LD_PRELOAD"] = lib
    if mode.startswith("ff-"):
        # The per-call CPU time (alloc_cpu_ns) is read only with time_calls on
        # (two TSC reads per call; off by default).
        conf = env.get("FRAGFREE_CONF", "")
        env["FRAGFREE_CONF"] = ",".join(
            c for c in ("time_calls:True", conf, extra.replace("+", ",")) if c)
    return env


def cpu_list(text):
    """CPUs from "2-5" or "2,3,4,5" (empty: none). ValueError if malformed."""
    cpus = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def gpu_state(device):
    """The GPU's SM clock, temperature and power now (nvidia-smi), or {}."""
    if device == "cpu":
        return {}
    try:
        r = subprocess.run(["nvidia-smi", "--id=0", "--query-gpu=clocks.sm,temperature.gpu,"
                            "power.draw", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=10)
        sm, temp, power = (v.strip() for v in r.stdout.strip().split(","))
        return dict(sm_mhz=float(sm), temp_c=float(temp), power_w=float(power))
    except (OSError, ValueError, subprocess.SubprocessError):
        return {}


def warm_native_adapter(lib, device, logdir):
    """fragfree's native adapter compiles on first use (~30-40 s): once here,
    into TORCH_EXTENSIONS_DIR, so that no timed run pays for it."""
    t0 = time.time()
    code = ("import sys; sys.path.insert(0, %r); import fragfree as ff; ff.enable('native'); "
            "import torch; torch.empty(1, device='cuda'); print('adapter ready')"
            % os.path.join(REPO, "integrations", "python"))
    r = subprocess.run([sys.executable, "-c", code], env=run_env("ff-native", lib, device),
                       capture_output=True, text=True, timeout=240)
    with open(os.path.join(logdir, "warm_native_adapter.log"), "w") as f:
        f.write(r.stdout + "\n--- stderr ---\n" + r.stderr)
    print(f"native adapter: rc={r.returncode} ({time.time() - t0:.0f} s)", flush=True)


def child_cmd(wl, mode, args):
    """The command line of one run's child process."""
    return [sys.executable, os.path.abspath(__file__), "--child-workload", wl,
            "--child-mode", base_mode(mode), "--device", args.device, "--warmup",
            str(args.warmup), "--steps", str(args.steps), "--seed", str(args.seed),
            "--profile-steps", str(args.profile_steps), "--probe", str(args.probe)] + (
                ["--series"] if args.series else [])


def pin_to(cpus):
    """A preexec_fn that pins the child to `cpus`, or None for no pinning."""
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


def record_run(results, run, output, before, t0, start, logdir, lockstep=False):
    """Writes a finished run's log, appends its record (or a failure) to
    `results` and prints its line. run = (workload, mode, round);
    output = (stdout, stderr, exit status)."""
    wl, mode, rnd = run
    stdout, stderr, rc = output
    name = f"{wl}-{mode}-r{rnd}"
    with open(os.path.join(logdir, name + ".log"), "w") as f:
        f.write(stdout + "\n--- stderr ---\n" + stderr)
    lines = [l for l in stdout.splitlines() if l.startswith("RESULT ")]
    if rc != 0 or not lines:
        last = stderr.strip().splitlines()[-1:] if stderr.strip() else []
        print(f"[{time.time() - start:5.0f} s] {name}: FAILED rc={rc} {last}", flush=True)
        results.append(dict(workload=wl, mode=mode, round=rnd, failed=True))
        return
    res = json.loads(lines[-1][7:])
    # The child knows its base mode; the row is the mode as asked (with its
    # "@" options).
    res["mode"], res["round"], res["lockstep"] = mode, rnd, lockstep
    res["wall_s"] = round(time.time() - t0, 1)
    res["gpu_before"] = before
    results.append(res)
    extra = ""
    if "ff_per_step" in res:
        f = res["ff_per_step"]
        extra = f", fragfree {f['alloc_cpu_ns'] / 1e3:.0f} µs/step, {f['map_calls']:.1f} maps/step"
    print(f"[{time.time() - start:5.0f} s] {name}: {res['step_ms_median']:.2f} ms{extra} "
          f"({res['wall_s']} s)", flush=True)


class LockstepKid:
    """The parent's side of one --lockstep child: its process, its stdout read
    line by line with a deadline (select on the raw pipe), its stderr in a
    file."""

    def __init__(self, cmd, env, preexec, stderr_path):
        self.err_path = stderr_path
        self.err = open(stderr_path, "w")
        self.proc = subprocess.Popen(cmd + ["--lockstep"], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, preexec_fn=preexec)
        self.pending = b""
        self.out = []  # stdout lines other than READY
        self.alive = True

    def _line(self, deadline):
        """The next stdout line, or None at EOF or past the deadline."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            left = deadline - time.time()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode(errors="replace")

    def until_ready(self, timeout):
        """Reads up to the child's next READY; False (and the child is dead
        to the round) if it exits or takes longer than `timeout` seconds."""
        deadline = time.time() + timeout
        while self.alive:
            line = self._line(deadline)
            if line is None:
                self.alive = False
            elif line == "READY":
                return True
            else:
                self.out.append(line)
        return False

    def send(self, word):
        try:
            self.proc.stdin.write((word + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            self.alive = False

    def finish(self, timeout):
        """Ends the child (END, then the pipe closed); (stdout, stderr, rc)."""
        if self.alive:
            self.send("END")
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        deadline = time.time() + timeout
        while (line := self._line(deadline)) is not None:
            self.out.append(line)
        try:
            rc = self.proc.wait(max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = "timeout"
        self.err.close()
        with open(self.err_path) as f:
            stderr = f.read()
        os.unlink(self.err_path)
        return "\n".join(self.out + [self.pending.decode(errors="replace")]), stderr, rc


def run_lockstep(wl, order, rnd, args, lib, pinned, logdir, start, results):
    """One --lockstep round of workload `wl`: every mode's process set up at
    once, then the parent lets one process run one timed step at a time, the
    modes' order shuffled each step (seeded; a fixed rotation would always run
    each mode right after the same other one), so that step k of every mode
    runs within a few steps' time of the others (the machine's drift, seconds
    long, falls on all of them alike)."""
    before = gpu_state(args.device)
    t0 = time.time()
    kids = {m: LockstepKid(child_cmd(wl, m, args), run_env(m, lib, args.device), pin_to(pinned),
                           os.path.join(logdir, f"{wl}-{m}-r{rnd}.stderr"))
            for m in order}
    for m in order:
        kids[m].until_ready(args.timeout)
    shuffle = random.Random(f"{args.seed}-{wl}-{rnd}").shuffle
    for _ in range(args.steps):
        step_order = list(order)
        shuffle(step_order)
        for m in step_order:
            if kids[m].alive:
                kids[m].send("GO")
                kids[m].until_ready(args.timeout)
    for m in order:
        record_run(results, (wl, m, rnd), kids[m].finish(args.timeout), before, t0, start,
                   logdir, lockstep=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", default="")
    p.add_argument("--out", default="")
    p.add_argument("--workloads", default="gpt2,gpt2+ckpt,llama+ckpt,fsdp,moe")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-s", type=float, default=530)
    p.add_argument("--timeout", type=float, default=180, help="seconds per run")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--pin-cpus", default="", help="run each child on these CPUs, e.g. 2-5")
    p.add_argument("--series", action="store_true",
                   help="read fragfree's stats after every timed step (ff_series)")
    p.add_argument("--probe", type=int, default=0,
                   help="launches timed before each timed step (the CPU's speed)")
    p.add_argument("--profile-steps", type=int, default=0,
                   help="after the timed steps, run this many more under cProfile (log)")
    p.add_argument("--lockstep", action="store_true",
                   help="run a round's modes at once, one timed step at a time in turn")
    p.add_argument("--child-workload", default="")
    p.add_argument("--child-mode", default="")
    p.add_argument("--pool", nargs="+", default=[], metavar="JSON",
                   help="summarise the runs of these step_time.json files together; runs nothing")
    args = p.parse_args()
    if args.child_workload:
        child(args)
        return
    if not args.out:
        p.error("--out is required")
    if args.pool:
        os.makedirs(args.out, exist_ok=True)
        runs, workloads, modes, rounds = pool(args.pool)
        write_summary(args.out, runs, workloads, modes, rounds, dict(pool=args.pool))
        return
    try:
        pinned = cpu_list(args.pin_cpus)
    except ValueError:
        p.error(f"--pin-cpus {args.pin_cpus!r}: expected a list such as 2-5 or 2,3,4,5")
    lib = os.path.abspath(args.lib) if args.lib else ""
    workloads = args.workloads.split(",")
    modes = args.modes.split(",")
    for m in modes:
        if base_mode(m) not in MODES:
            p.error(f"unknown mode {m!r} (one of {', '.join(MODES)})")
        if m.startswith("ff-") and not lib:
            p.error(f"mode {m} needs --lib")
    logdir = os.path.join(args.out, "logs")
    os.makedirs(logdir, exist_ok=True)
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", "/tmp/fragfree_torch_ext")
    start = time.time()
    if any(m.startswith("ff-native") for m in modes) and args.device != "cpu":
        warm_native_adapter(lib, args.device, logdir)
    results, round_s = [], []
    for rnd in range(args.rounds):
        elapsed = time.time() - start
        if rnd > 0 and elapsed + max(round_s) > args.budget_s:
            print(f"budget: {elapsed:.0f} s spent, a round takes ~{max(round_s):.0f} s: "
                  f"stopping after {rnd} round(s) of {args.rounds}", flush=True)
            break
        t_round = time.time()
        order = modes[rnd % len(modes):] + modes[:rnd % len(modes)]
        for wl in workloads:
            if args.lockstep:
                run_lockstep(wl, order, rnd, args, lib, pinned, logdir, start, results)
                continue
            for mode in order:
                before = gpu_state(args.device)
                t0 = time.time()
                try:
                    r = subprocess.run(child_cmd(wl, mode, args),
                                       env=run_env(mode, lib, args.device), capture_output=True,
                                       text=True, timeout=args.timeout, preexec_fn=pin_to(pinned))
                    stdout, stderr, rc = r.stdout, r.stderr, r.returncode
                except subprocess.TimeoutExpired as e:
                    stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
                    stderr = (e.stderr.decode() if isinstance(e.stderr, bytes)
                              else (e.stderr or "")) + "\nTIMEOUT"
                    rc = "timeout"
                record_run(results, (wl, mode, rnd), (stdout, stderr, rc), before, t0, start,
                           logdir)
        round_s.append(time.time() - t_round)
    write_summary(args.out, results, workloads, modes, len(round_s), vars(args))


if __name__ == "__main__":
    main()
