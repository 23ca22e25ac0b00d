"""The hot path's A/B: steady_state_bench binaries side by side, so that a change
is judged against the build before it in one run on one machine.

  python3 bench/micro/hot_ab.py [--rounds 6] [--live 100,1000,10000]
      [--min-time 0.3] [--budget-s 0] [--entry pluggable|adapter] [--cpu N]
      [--backends cuda,host] NAME=BINARY NAME=BINARY ...
  python3 bench/micro/hot_ab.py --callgrind [--ll-bytes 2097152] NAME=BINARY ...

--entry: the pairs through PyTorch's pluggable ABI (BM_SteadyPairs, the
default) or through the native adapter's calls (BM_SteadyPairsAdapter).

Wall clock (default): every round runs each binary once
(--benchmark_filter=SteadyPairs/(N|N...)$), the binaries' order rotated by one
each round, and reads each count's p50_ns / p99_ns. Printed per count: each
binary's p50 per round, the median p50, the median of the per-round ratios to
the first binary with their min-max, the rounds in which it was slower than the
first, and the median and largest p99. The machine's drift falls on every
binary alike; a single round ranks nothing (docs/design.md, Note [Hot path]).
--budget-s: no round starts past that many seconds (0: no limit).
--cpu: run every binary on that one CPU (sched_setaffinity), so that no run
is moved between cores or shares one with another run's threads.
--backends cuda,host: each binary once per backend in every round (named
NAME/BACKEND; BACKEND alone with one binary), FRAGFREE_BENCH_BACKEND set for
each run: whether a pair costs on the GPU what the data structures cost.

--callgrind: each binary once per count under valgrind's callgrind with its
cache and branch models (--LL of --ll-bytes, 16-way, 64-byte lines), counting
only the timed pairs (the benchmark toggles collection around each pair's two
calls; valgrind headers needed at build time), divided by the pairs it ran (the calls of
fragfree_malloc): instructions, D1 load misses, last-level load and store
misses and mispredicted branches a pair. Deterministic for one binary and
machine model; it does not model prefetchers (a pair's misses on the H200 host
are not these: Note [Hot path]).

The backend is the benchmark's (FRAGFREE_BENCH_BACKEND: cuda on the GPU,
simulated for callgrind on a host without one).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

# The benchmark of each --entry (bench/micro/steady_state_bench.cc): pairs through
# PyTorch's pluggable ABI, or through the native adapter's calls.
BENCHMARKS = {"pluggable": "SteadyPairs", "adapter": "SteadyPairsAdapter"}
# The call made once a pair, whose count under callgrind is the pairs run.
PAIR_CALL = {"SteadyPairs": "fragfree_malloc", "SteadyPairsAdapter": "ff_malloc"}


def _line(bench):
    return re.compile(r"BM_%s/(\d+)\s.*?p50_ns=([0-9.]+)([kM]?)\s.*?p99_ns=([0-9.]+)([kM]?)" % bench)


def _error(bench):
    return re.compile(r"BM_%s/(\d+)\s+ERROR OCCURRED: '([^']*)'" % bench)
_SCALE = {"": 1.0, "k": 1e3, "M": 1e6}
CALLGRIND_EVENTS = ("Ir", "D1mr", "DLmr", "DLmw", "Bcm")


def parse_bench_output(text, bench="SteadyPairs"):
    """{live count: (p50 ns, p99 ns)} of BM_<bench> from Google Benchmark's
    console output."""
    out = {}
    for m in _line(bench).finditer(text):
        out[int(m.group(1))] = (float(m.group(2)) * _SCALE[m.group(3)],
                                float(m.group(4)) * _SCALE[m.group(5)])
    return out


def round_order(names, rnd):
    """The binaries' order in round `rnd`: rotated by one each round."""
    k = rnd % len(names)
    return names[k:] + names[:k]


def summarise_wall(rounds, names, lives):
    """Rows per (live count, binary) from rounds = [{name: {live: (p50, p99)}}].
    Rounds that lack a binary's figure for a count are skipped for it."""
    rows = []
    base = names[0]
    for live in lives:
        for name in names:
            figures = [r[name][live] for r in rounds if live in r.get(name, {})]
            if not figures:
                continue
            p50, p99 = [f[0] for f in figures], [f[1] for f in figures]
            ratios = [r[name][live][0] / r[base][live][0] for r in rounds
                      if live in r.get(name, {}) and live in r.get(base, {})]
            rows.append(dict(
                live=live, name=name, p50=p50, p50_median=statistics.median(p50),
                ratio=statistics.median(ratios) if ratios else None,
                ratio_range=[min(ratios), max(ratios)] if ratios else None,
                slower=sum(x > 1.0 for x in ratios), rounds=len(ratios),
                p99_median=statistics.median(p99), p99_max=max(p99)))
    return rows


def format_wall(rows, base):
    lines = ["| live blocks | binary | p50 ns per round | p50 median | ÷ %s median [min–max] | "
             "slower in | p99 median (max) |" % base, "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = ("%.3f [%.3f–%.3f]" % (r["ratio"], *r["ratio_range"])
                 if r["name"] != base and r["ratio"] is not None else "1")
        slower = "%d of %d" % (r["slower"], r["rounds"]) if r["name"] != base else ""
        lines.append("| %d | %s | %s | %.0f | %s | %s | %.0f (%.0f) |" % (
            r["live"], r["name"], " ".join("%.0f" % x for x in r["p50"]), r["p50_median"],
            ratio, slower, r["p99_median"], r["p99_max"]))
    return "\n".join(lines)


def parse_callgrind(text, entry="fragfree_malloc"):
    """(event totals, calls of `entry`) from a callgrind output file's text.
    Names may be compressed ("fn=(7) name" once, then "cfn=(7)")."""
    names, events, totals, calls, callee = {}, [], None, 0, None
    for line in text.splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith(("summary:", "totals:")):
            totals = [int(x) for x in line.split()[1:]]
        else:
            m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?$", line)
            if m:
                if m.group(3):
                    names[m.group(2)] = m.group(3)
                callee = names.get(m.group(2), "") if m.group(1) == "cfn" else None
            elif line.startswith("calls=") and callee is not None:
                if callee == entry or callee.endswith(":" + entry) or callee.endswith(" " + entry):
                    calls += int(line.split()[0][len("calls="):])
                callee = None
    if totals is None:
        raise ValueError("no summary or totals line: not a callgrind output file")
    return dict(zip(events, totals + [0] * (len(events) - len(totals)))), calls


def per_pair(totals, pairs):
    if pairs == 0:
        raise ValueError("no pairs counted: was collection toggled around the timed pairs?")
    return {e: totals.get(e, 0) / pairs for e in CALLGRIND_EVENTS}


def format_callgrind(results):
    lines = ["| live blocks | binary | pairs | instructions | D1 load misses | LL load misses | "
             "LL store misses | mispredicts |", "|---|---|---|---|---|---|---|---|"]
    for live, name, pairs, p in results:
        lines.append("| %d | %s | %d | %.1f | %.2f | %.2f | %.2f | %.2f |" % (
            live, name, pairs, p["Ir"], p["D1mr"], p["DLmr"], p["DLmw"], p["Bcm"]))
    return "\n".join(lines)


def _filter(lives, bench):
    return "--benchmark_filter=%s/(%s)$" % (bench, "|".join(str(n) for n in lives))


def with_backends(binaries, backends):
    """NAME -> PATH as NAME -> (PATH, the FRAGFREE_BENCH_BACKEND of its runs or
    None): each binary once per backend in `backends` (empty: as given)."""
    if not backends:
        return {name: (path, None) for name, path in binaries.items()}
    return {(b if len(binaries) == 1 else "%s/%s" % (name, b)): (path, b)
            for name, path in binaries.items() for b in backends}


def run_wall(binaries, lives, rounds, min_time, budget_s, bench, cpu=None):
    """`binaries`: NAME -> (PATH, backend or None), as with_backends makes."""
    names = list(binaries)
    pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    results, start = [], time.monotonic()
    for rnd in range(rounds):
        if rnd > 0 and budget_s > 0 and time.monotonic() - start > budget_s:
            break
        this = {}
        for name in round_order(names, rnd):
            path, backend = binaries[name]
            env = None if backend is None else dict(os.environ, FRAGFREE_BENCH_BACKEND=backend)
            proc = subprocess.run([path, _filter(lives, bench),
                                   "--benchmark_min_time=%g" % min_time],
                                  capture_output=True, text=True, preexec_fn=pin, env=env)
            text = proc.stdout + proc.stderr
            this[name] = parse_bench_output(text, bench)
            for m in _error(bench).finditer(text):  # the benchmark's own checks
                sys.stderr.write("%s, %s live blocks: %s\n" % (name, m.group(1), m.group(2)))
            if proc.returncode != 0 or not this[name]:
                sys.stderr.write("%s exited %d:\n%s\n" % (name, proc.returncode, proc.stderr[-2000:]))
        results.append(this)
        print("round %d (%.0f s): %s" % (rnd + 1, time.monotonic() - start, " ".join(
            "%s %s" % (n, "/".join("%.0f" % this[n][k][0] for k in sorted(this[n])))
            for n in round_order(names, rnd))), flush=True)
    print(format_wall(summarise_wall(results, names, lives), names[0]))


def run_callgrind(binaries, lives, min_time, ll_bytes, bench):
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for live in lives:
            for name, binary in binaries.items():
                out = os.path.join(tmp, "cg.%s.%d" % (name, live))
                subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                                "--collect-atstart=no", "--cache-sim=yes", "--branch-sim=yes",
                                "--LL=%d,16,64" % ll_bytes, binary, _filter([live], bench),
                                "--benchmark_min_time=%g" % min_time],
                               check=True, capture_output=True)
                with open(out) as f:
                    totals, pairs = parse_callgrind(f.read(), PAIR_CALL[bench])
                results.append((live, name, pairs, per_pair(totals, pairs)))
    print(format_callgrind(results))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("binaries", nargs="+", help="NAME=PATH of a steady_state_bench; the first is the base")
    p.add_argument("--live", default="100,1000,10000")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--min-time", type=float, default=0.3)
    p.add_argument("--budget-s", type=float, default=0)
    p.add_argument("--callgrind", action="store_true")
    p.add_argument("--ll-bytes", type=int, default=2 << 20)
    p.add_argument("--entry", choices=sorted(BENCHMARKS), default="pluggable")
    p.add_argument("--cpu", type=int, default=None, help="run every binary on this CPU alone")
    p.add_argument("--backends", default="", help="e.g. cuda,host: each binary on each backend")
    args = p.parse_args(argv)
    binaries = {}
    for b in args.binaries:
        name, sep, path = b.partition("=")
        if not sep or not name or not path:
            p.error("binary %r is not NAME=PATH" % b)
        if name in binaries:
            p.error("binary name %r given twice" % name)
        if not os.access(path, os.X_OK):
            p.error("%s is not an executable file" % path)
        binaries[name] = path
    lives = [int(x) for x in args.live.split(",")]
    if args.callgrind and args.backends:
        p.error("--backends is for the wall clock; under --callgrind set FRAGFREE_BENCH_BACKEND")
    if args.callgrind:
        run_callgrind(binaries, lives, args.min_time, args.ll_bytes, BENCHMARKS[args.entry])
    else:
        if args.cpu is not None and args.cpu not in os.sched_getaffinity(0):
            p.error("--cpu %d is not among this process's CPUs %s"
                    % (args.cpu, sorted(os.sched_getaffinity(0))))
        backends = [b for b in args.backends.split(",") if b]
        run_wall(with_backends(binaries, backends), lives, args.rounds, args.min_time,
                 args.budget_s, BENCHMARKS[args.entry], args.cpu)


if __name__ == "__main__":
    main()
