"""What bench/gpu/step_time.py reports from its runs' records: the rows per
workload and mode (medians over rounds, ratios to PyTorch's run of the same
round or to the mean of PyTorch's runs, step by step and run by run in
lockstep, each run against PyTorch's second process with the sign test, whose
pace a step is, what fragfree's counters say), their markdown tables, and
several calls' records pooled into one set. Pure functions of the records: no
GPU, no torch, no process started (tests/bench_scripts/step_time_summary_test.py).
The records' fields and what each table means: step_time.py's docstring.
"""
import json
import math
import operator
import os
import statistics

# fragfree's counters read before and after the timed steps (docs/stats.md).
FF_COUNTERS = ("alloc_cpu_ns", "alloc_cpu_calls", "map_calls", "map_ns", "unmap_calls",
               "unmap_ns", "set_access_calls", "set_access_ns", "create_calls", "create_ns",
               "release_calls", "release_ns", "pages_mapped", "pages_unmapped",
               "pages_remapped", "fence_waits", "fence_wait_ns", "fences_recorded",
               "num_alloc_retries")

def median(values):
    return statistics.median(values) if values else None


def growth_split(runs):
    """fragfree's CPU time per step (median, µs) in the steps that created
    pages and in the others, over every timed step of `runs` (ff_series), with
    how many steps each; {} without series."""
    grow, other = [], []
    for r in runs:
        series = r.get("ff_series") or {}
        for cpu, created in zip(series.get("alloc_cpu_ns", []), series.get("create_calls", [])):
            (grow if created > 0 else other).append(cpu / 1e3)
    if not grow and not other:
        return {}
    return dict(cpu_us_growing=round(median(grow), 1) if grow else None, steps_growing=len(grow),
                cpu_us_not_growing=round(median(other), 1) if other else None,
                steps_not_growing=len(other))


def gpu_wait(runs):
    """The median over runs of each run's median wait for the GPU at a step's
    end (ms), and that wait as a share of the run's median step."""
    waits = [(median(r["sync_ms"]), r["step_ms_median"]) for r in runs if r.get("sync_ms")]
    if not waits:
        return {}
    shares = [w / s for w, s in waits if s > 0]
    return dict(sync_ms=round(median([w for w, _ in waits]), 3),
                sync_share=round(median(shares), 4) if shares else 0.0)


def summarise(results, workloads, modes):
    """Rows per workload and mode: medians over the rounds and the per-round
    ratios to torch (a round's ratio: the mode's median / torch's median)."""
    rows = []
    for wl in workloads:
        base = {r["round"]: r["step_ms_median"] for r in results
                if r["workload"] == wl and r["mode"] == "torch" and not r.get("failed")}
        for mode in modes:
            mine = [r for r in results if r["workload"] == wl and r["mode"] == mode]
            if not mine:  # not run on this workload (pooled calls ran different sets)
                continue
            ok = [r for r in mine if not r.get("failed")]
            row = dict(workload=wl, mode=mode, runs=len(ok), failed=len(mine) - len(ok))
            if ok:
                ms = [r["step_ms_median"] for r in ok]
                row["step_ms"] = round(median(ms), 3)
                row["step_ms_range"] = [min(ms), max(ms)]
                ratios = [r["step_ms_median"] / base[r["round"]] for r in ok if r["round"] in base]
                if ratios:
                    row["ratio"] = round(median(ratios), 4)
                    row["ratio_range"] = [round(min(ratios), 4), round(max(ratios), 4)]
                peaks = [r["peak_reserved"] for r in ok if "peak_reserved" in r]
                if peaks:
                    row["peak_reserved_gib"] = round(max(peaks) / 2**30, 3)
                    row["peak_reserved_gib_min"] = round(min(peaks) / 2**30, 3)
                    row["peak_reserved_gib_mean"] = round(sum(peaks) / len(peaks) / 2**30, 3)
                    row["peak_allocated_gib"] = round(
                        max(r["peak_allocated"] for r in ok if "peak_allocated" in r) / 2**30, 3)
                ff = [r["ff_per_step"] for r in ok if "ff_per_step" in r]
                if ff:
                    row["ff_per_step"] = {k: round(median([f[k] for f in ff]), 2)
                                          for k in FF_COUNTERS}
                row.update(gpu_wait(ok))
                row.update(growth_split(ok))
                row.update(probe_ratio(ok, results, wl))
                row.update(control_ratio(ok, results, wl))
                row.update(step_ratio(ok, results, wl))
                row.update(versus_controls(ok, results, wl))
            rows.append(row)
    return rows


def probe_ratio(ok, results, wl):
    """With --probe: each run's median step per median probe microsecond, as
    a ratio to torch's in the same round (median and min-max over rounds)."""
    def per_probe(r):
        return r["step_ms_median"] / statistics.median(r["probe_us"])
    base = {r["round"]: per_probe(r) for r in results
            if r["workload"] == wl and r["mode"] == "torch" and r.get("probe_us")}
    mine = [r for r in ok if r.get("probe_us")]
    ratios = [per_probe(r) / base[r["round"]] for r in mine if r["round"] in base]
    if not ratios:
        return {}
    return dict(probe_us=round(median([median(r["probe_us"]) for r in mine]), 3),
                ratio_probe=round(median(ratios), 4),
                ratio_probe_range=[round(min(ratios), 4), round(max(ratios), 4)])


def pytorch_runs(results, wl):
    """The finished runs of PyTorch's default allocator on `wl` (modes torch,
    torch#again, ...): the baselines the ratios below divide by."""
    return [r for r in results if r["workload"] == wl
            and r["mode"].partition("#")[0] == "torch" and not r.get("failed")]


def control_ratio(ok, results, wl):
    """With PyTorch's default run more than once a round (torch, torch#again):
    each run's median step against the mean of those runs' medians in its round
    (median and min-max over rounds). One control run's luck then moves the
    baseline by half as much, and the controls' own rows show how far apart
    two identical processes land."""
    controls = {}
    for r in pytorch_runs(results, wl):
        controls.setdefault(r["round"], []).append(r["step_ms_median"])
    base = {k: statistics.mean(v) for k, v in controls.items() if len(v) >= 2}
    ratios = [r["step_ms_median"] / base[r["round"]] for r in ok if r["round"] in base]
    if not ratios:
        return {}
    return dict(ratio_controls=round(median(ratios), 4),
                ratio_controls_range=[round(min(ratios), 4), round(max(ratios), 4)],
                controls_per_round=min(len(controls[k]) for k in base))


def median_ci(values):
    """The median of `values` with a distribution-free 95% confidence
    interval: the order statistics n/2 -+ 0.98 sqrt(n) (the sign test's
    normal approximation), clamped to the ends for small n."""
    v = sorted(values)
    n = len(v)
    half = 0.98 * n ** 0.5
    return median(v), v[max(0, int(n / 2 - half))], v[min(n - 1, int(n / 2 + half))]


def cpu_part(run):
    """Each timed step's CPU part, ms: the step less its closing synchronise's
    wait for the GPU (step_ms - sync_ms). REQUIRES: run["sync_ms"]."""
    return [a - b for a, b in zip(run["step_ms"], run["sync_ms"])]


def step_ratio(ok, results, wl):
    """With --lockstep: each timed step against torch's step of the same index
    in the same round (the two ran within seconds of each other): the median
    ratio with its 95% confidence interval, and the 10th-90th percentiles.
    With PyTorch's default run more than once a round (torch, torch#again),
    also each step against the mean of those runs' steps of the same index
    (step_ratio_controls): one PyTorch process's speed then moves the baseline
    half as much, as control_ratio does for whole runs.

    The steps of one run share that process's luck (its CPU, where its memory
    landed), so the per-step interval is narrower than the truth when runs
    differ. Hence also the run as the unit (step_ratio_runs): each run's median
    step ratio, their median with its interval over runs, and in how many runs
    it is above 1. And, where runs record their closing waits, the CPU's part
    of each step (the step less that wait) less torch's same step's, per run
    likewise (cpu_part_delta_ms): where the GPU sets the pace, a step ratio
    above 1 with a longer CPU part says the CPU fell behind the GPU somewhere
    in the step."""
    controls = {}
    cpu_parts = {}  # round -> torch's CPU part of each step
    for r in pytorch_runs(results, wl):
        if r.get("lockstep"):
            controls.setdefault(r["round"], {})[r["mode"]] = r["step_ms"]
            if r["mode"] == "torch" and r.get("sync_ms"):
                cpu_parts[r["round"]] = cpu_part(r)
    mine = [r for r in ok if r.get("lockstep")]

    def per_run(base, value, combine):  # [combine(value(run)[i], base[round][i])] per run
        return [[combine(a, b) for a, b in zip(value(r), base[r["round"]])]
                for r in mine if r["round"] in base]

    def per_step(base):  # each lockstep step ÷ base[round][its index]
        return [x for run in per_run(base, lambda r: r["step_ms"], operator.truediv)
                for x in run]

    def over_runs(runs):  # ((median, lo, hi) of the runs' medians, or None; the medians)
        meds = [median(run) for run in runs if run]
        return (median_ci(meds), meds) if len(meds) >= 2 else (None, meds)

    base = {k: v["torch"] for k, v in controls.items() if "torch" in v}
    ratio_runs = per_run(base, lambda r: r["step_ms"], operator.truediv)
    ratios = [x for run in ratio_runs for x in run]
    if len(ratios) < 2:
        return {}
    mid, lo, hi = median_ci(ratios)
    tenth = statistics.quantiles(ratios, n=10, method="inclusive")
    out = dict(step_ratio=round(mid, 4), step_ratio_ci=[round(lo, 4), round(hi, 4)],
               step_ratio_range=[round(tenth[0], 4), round(tenth[-1], 4)],
               step_pairs=len(ratios))
    stats, meds = over_runs(ratio_runs)
    if stats:
        out.update(step_ratio_runs=round(stats[0], 4),
                   step_ratio_runs_ci=[round(stats[1], 4), round(stats[2], 4)],
                   runs_above=sum(m > 1 for m in meds), runs=len(meds))
    stats, meds = over_runs(per_run(
        cpu_parts, lambda r: cpu_part(r) if r.get("sync_ms") else [], operator.sub))
    if stats:
        out.update(cpu_part_delta_ms=round(stats[0], 3),
                   cpu_part_delta_ms_ci=[round(stats[1], 3), round(stats[2], 3)],
                   cpu_part_runs_above=sum(m > 0 for m in meds))
    to_means = per_step({k: [statistics.mean(steps) for steps in zip(*v.values())]
                         for k, v in controls.items() if len(v) >= 2})
    if len(to_means) >= 2:
        mid, lo, hi = median_ci(to_means)
        out.update(step_ratio_controls=round(mid, 4),
                   step_ratio_controls_ci=[round(lo, 4), round(hi, 4)])
    return out


def sign_test_p(above, below):
    """Two-sided exact sign test: the chance, were above and below equally
    likely, of a split at least as uneven as `above` of `above + below`."""
    n = above + below
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(above, below) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def versus_controls(ok, results, wl):
    """With --lockstep and PyTorch's default run again as a mode (torch#again):
    round by round, this run against PyTorch's second process. Each run's
    median of its steps ÷ torch's steps of the same index (the per-run ratio
    of step_ratio), less the mean of the control runs' same figure in that
    round: the median difference with its 95% CI, in how many rounds this run
    is the slower, and the sign test's p that it is slower (or faster) in no
    more rounds than chance would give. Both sides divide by the same torch
    run, so that run's luck cancels; what is left is how far this mode lands
    from where a second PyTorch process lands."""
    if ok and ok[0]["mode"].partition("#")[0] == "torch":
        return {}
    torch_steps = {r["round"]: r["step_ms"] for r in pytorch_runs(results, wl)
                   if r["mode"] == "torch" and r.get("lockstep")}

    def run_ratio(r):
        return median([a / b for a, b in zip(r["step_ms"], torch_steps[r["round"]])])
    controls = {}
    for r in pytorch_runs(results, wl):
        if r["mode"] != "torch" and r.get("lockstep") and r["round"] in torch_steps:
            controls.setdefault(r["round"], []).append(run_ratio(r))
    diffs = [run_ratio(r) - statistics.mean(controls[r["round"]])
             for r in ok if r.get("lockstep") and r["round"] in controls]
    if len(diffs) < 2:
        return {}
    mid, lo, hi = median_ci(diffs)
    above, below = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    return dict(vs_controls=round(mid, 4), vs_controls_ci=[round(lo, 4), round(hi, 4)],
                vs_controls_above=above, vs_controls_rounds=len(diffs),
                vs_controls_p=round(sign_test_p(above, below), 4))


def ratio_cell(row, key):
    """A ratio and its per-round range (row[key], row[key + "_range"]) as a
    table cell; empty when the row has none."""
    if key not in row:
        return ""
    lo, hi = row[key + "_range"]
    return f"{row[key]:.3f} [{lo:.3f}–{hi:.3f}]"


def sub_table(intro, columns, rows):
    """The lines of one of the tables after the main one: a blank line, `intro`,
    a blank line, then a row per (row, cells) with the workload and mode first."""
    out = ["", intro, "", "| workload | mode | " + " | ".join(columns) + " |",
           "|" + "---|" * (len(columns) + 2)]
    for r, cells in rows:
        out.append("| " + " | ".join([r["workload"], r["mode"]] + cells) + " |")
    return out


def peak_reserved_cell(r):
    """The runs' peak reserved GiB: one figure when every run peaked alike, else
min–max (mean), since where a run's memory settles can differ from run to run
(Note [Move time budget] in docs/design.md)."""
    lo = r.get("peak_reserved_gib_min", r["peak_reserved_gib"])
    if lo == r["peak_reserved_gib"]:
        return f"{r['peak_reserved_gib']}"
    return f"{lo}–{r['peak_reserved_gib']} ({r['peak_reserved_gib_mean']})"


def table(rows, rounds):
    head = ("| workload | mode | step ms (median of rounds' medians) [min–max] | ÷ torch "
            "[per-round min–max] | peak reserved / allocated GiB | fragfree CPU µs/step "
            "(calls) | map / set-access / unmap calls per step | create / release per step "
            "| pages remapped per step | backend ms/step | fence waits/step (ms) "
            "| CPU µs in steps that create pages (steps) / in the others (steps), with --series |")
    out = [f"Step time, {rounds} round(s) alternated; each run its own process.", "",
           head, "|" + "---|" * 12]
    for r in rows:
        if not r["runs"]:
            out.append(f"| {r['workload']} | {r['mode']} | FAILED ({r['failed']}) |" + " |" * 9)
            continue
        lo, hi = r["step_ms_range"]
        cells = [r["workload"], r["mode"], f"{r['step_ms']:.2f} [{lo:.1f}–{hi:.1f}]"]
        cells.append(ratio_cell(r, "ratio"))
        cells.append(f"{peak_reserved_cell(r)} / {r['peak_allocated_gib']}"
                     if "peak_reserved_gib" in r else "")
        f = r.get("ff_per_step")
        if f:
            backend_ns = sum(f[k] for k in ("map_ns", "unmap_ns", "set_access_ns", "create_ns",
                                            "release_ns"))
            cells += [f"{f['alloc_cpu_ns'] / 1e3:.0f} ({f['alloc_cpu_calls']:.0f})",
                      f"{f['map_calls']:.1f} / {f['set_access_calls']:.1f} / "
                      f"{f['unmap_calls']:.1f}",
                      f"{f['create_calls']:.1f} / {f['release_calls']:.1f}",
                      f"{f['pages_remapped']:.1f}", f"{backend_ns / 1e6:.2f}",
                      f"{f['fence_waits']:.1f} ({f['fence_wait_ns'] / 1e6:.2f})"]
        else:
            cells += [""] * 6
        if "steps_growing" in r:
            def part(cpu, n):
                return f"{cpu:.0f} ({n})" if cpu is not None else f"– ({n})"
            cells.append(part(r["cpu_us_growing"], r["steps_growing"]) + " / " +
                         part(r["cpu_us_not_growing"], r["steps_not_growing"]))
        else:
            cells.append("")
        if r["failed"]:
            cells[2] += f" ({r['failed']} failed)"
        out.append("| " + " | ".join(cells) + " |")
    controlled = [r for r in rows if "ratio_controls" in r]
    if controlled:
        n = min(r["controls_per_round"] for r in controlled)
        out += sub_table(
            f"Against PyTorch's default run {n} times a round (torch and torch#... modes): each "
            "run's step ÷ the mean of those runs' steps in its round.",
            ["÷ torch [per-round min–max]", "÷ mean of PyTorch's runs [per-round min–max]"],
            [(r, [ratio_cell(r, "ratio"), ratio_cell(r, "ratio_controls")]) for r in controlled])
    waited = [r for r in rows if "sync_ms" in r]
    if waited:
        out += sub_table(
            "Whose pace: the wait for the GPU in a step's closing synchronise (median of the "
            "runs' medians). Near zero, the GPU had finished first: the CPU set the step's pace, "
            "and the CPU's speed in that process moves the step.",
            ["wait for the GPU, ms a step", "share of the step"],
            [(r, [f"{r['sync_ms']:.2f}", f"{100 * r['sync_share']:.1f}%"]) for r in waited])
    stepped = [r for r in rows if "step_ratio" in r]
    if stepped:
        def ci_cell(r, key):
            return "{:.3f} [{:.3f}–{:.3f}]".format(r[key], *r[key + "_ci"]) if key in r else ""

        def runs_cell(r, key, above):
            return f"{ci_cell(r, key)}, {r[above]} of {r['runs']}" if key in r else ""
        to_means = any("step_ratio_controls" in r for r in stepped)
        by_run = any("step_ratio_runs" in r for r in stepped)
        parts = any("cpu_part_delta_ms" in r for r in stepped)
        out += sub_table(
            "Step by step (--lockstep): each timed step ÷ torch's step of the same index and "
            "round, run within seconds of it" + (
                "; and ÷ the mean of PyTorch's runs' steps of that index and round"
                if to_means else "") + "." + (
                " Per run: each run's median of those ratios, the median over runs with its "
                "95% CI, and in how many runs it is above 1. A run's steps share its process's "
                "luck, so where runs differ the per-step interval is too narrow: read the "
                "per-run one." if by_run else "") + (
                " CPU part: the step less its closing wait for the GPU, less torch's same "
                "step's, in ms, per run likewise (and in how many runs it is longer)."
                if parts else ""),
            ["median [95% CI]", "10th–90th percentile", "steps"] + (
                ["÷ mean of PyTorch's steps: median [95% CI]"] if to_means else []) + (
                ["per run: median [95% CI], above 1 in"] if by_run else []) + (
                ["CPU part − torch's, ms, per run: median [95% CI], longer in"]
                if parts else []),
            [(r, [ci_cell(r, "step_ratio"), "{:.3f}–{:.3f}".format(*r["step_ratio_range"]),
                  str(r["step_pairs"])] + ([ci_cell(r, "step_ratio_controls")] if to_means
                                            else []) + (
                      [runs_cell(r, "step_ratio_runs", "runs_above")] if by_run else []) + (
                      [runs_cell(r, "cpu_part_delta_ms", "cpu_part_runs_above")]
                      if parts else []))
             for r in stepped])
    paired = [r for r in rows if "vs_controls" in r]
    if paired:
        out += sub_table(
            "Against PyTorch's second process (--lockstep, torch#... in the modes), round by "
            "round: each run's per-run ratio less the control runs' in its round (both ÷ the "
            "same torch run), the median difference [95% CI], in how many rounds the run is "
            "the slower, and the sign test's two-sided p (small: slower, or faster, in more "
            "rounds than chance gives).",
            ["run − A/A: median [95% CI]", "slower than the A/A in", "sign test p"],
            [(r, ["{:+.4f} [{:+.4f}–{:+.4f}]".format(r["vs_controls"], *r["vs_controls_ci"]),
                  f"{r['vs_controls_above']} of {r['vs_controls_rounds']}",
                  f"{r['vs_controls_p']:.3g}"]) for r in paired])
    probed = [r for r in rows if "ratio_probe" in r]
    if probed:
        out += sub_table(
            "With the CPU's speed divided out (--probe): step ms per probe µs, ÷ torch's.",
            ["probe µs a launch (median)", "÷ torch [per-round min–max]",
             "÷ torch per probe µs [per-round min–max]"],
            [(r, [f"{r['probe_us']:.2f}", ratio_cell(r, "ratio"), ratio_cell(r, "ratio_probe")])
             for r in probed])
    return "\n".join(out)


def pool(paths):
    """The runs of several calls' step_time.json as one set, each call's rounds
    kept apart (renumbered after the previous call's), and the workloads and
    modes in the order they first appear: the same tables over every run, so
    that rounds from calls too short on their own count together. A ratio still
    compares a run only with PyTorch's runs of its own round."""
    runs, workloads, modes, offset = [], [], [], 0
    for path in paths:
        with open(path) as f:
            call = json.load(f)
        rounds = [r["round"] for r in call["runs"]]
        for r in call["runs"]:
            runs.append(dict(r, round=r["round"] + offset))
            for name, seen in ((r["workload"], workloads), (r["mode"], modes)):
                if name not in seen:
                    seen.append(name)
        offset += max(rounds, default=-1) + 1
    return runs, workloads, modes, offset


def phase_deltas(runs, wl, mode):
    """With --lockstep, for a workload that marks its phases (phase_ms): each
    timed step of `mode` less torch's step of the same index and round, ms,
    for the whole step, its CPU part and each phase: (median, 95% CI low,
    high, pairs) over every such pair. A longer phase lengthens the step only
    where the GPU waits for the CPU through it (the step's start, or after its
    closing synchronise, the phase "sync"); elsewhere the closing wait takes
    it back."""
    torch_runs = {r["round"]: r for r in runs if r["workload"] == wl and r["mode"] == "torch"
                  and r.get("lockstep") and r.get("phase_ms") and not r.get("failed")}
    diffs = {}
    for r in runs:
        base = torch_runs.get(r["round"])
        if (r["workload"] != wl or r["mode"] != mode or base is None or not r.get("phase_ms")
                or r.get("failed")):
            continue
        series = dict(step=(r["step_ms"], base["step_ms"]), cpu=(cpu_part(r), cpu_part(base)))
        series.update((k, (v, base["phase_ms"].get(k, []))) for k, v in r["phase_ms"].items())
        for k, (mine, theirs) in series.items():
            diffs.setdefault(k, []).extend(a - b for a, b in zip(mine, theirs))
    return {k: median_ci(v) + (len(v),) for k, v in diffs.items() if v}


def phase_table(runs, workloads, modes):
    """phase_deltas of every workload that marks phases, as a markdown table
    ("" when none does)."""
    out = []
    for wl in workloads:
        rows = [(m, phase_deltas(runs, wl, m)) for m in modes if m != "torch"]
        rows = [(m, d) for m, d in rows if d]
        if not rows:
            continue
        keys = list(rows[0][1])
        out += ["", f"{wl}: each timed step less torch's of the same index and round, ms, median "
                "[95% CI] over the pairs (phases: bench/gpu/workloads.py's marks).", "",
                "| workload | mode | pairs | " + " | ".join(keys) + " |",
                "|---|---|---|" + "---|" * len(keys)]
        for m, d in rows:
            cells = [f"{d[k][0]:+.3f} [{d[k][1]:+.3f}, {d[k][2]:+.3f}]" if k in d else "–"
                     for k in keys]
            out.append(f"| {wl} | {m} | {d['step'][3]} | " + " | ".join(cells) + " |")
    return "\n".join(out + [""] if out else [])


def write_summary(out, runs, workloads, modes, rounds, args):
    """step_time.json and step_time.md in `out`; the table printed."""
    rows = summarise(runs, workloads, modes)
    with open(os.path.join(out, "step_time.json"), "w") as f:
        json.dump(dict(rounds=rounds, args=args, rows=rows, runs=runs), f, indent=1)
    text = table(rows, rounds) + phase_table(runs, workloads, modes)
    with open(os.path.join(out, "step_time.md"), "w") as f:
        f.write(text + "\n")
    print(text)
