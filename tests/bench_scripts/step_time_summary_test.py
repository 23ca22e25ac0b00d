"""bench/gpu/step_summary.py, step_time.py's summary, on made-up runs (no GPU, no torch): the
ratio to PyTorch's run of the same round, and, when PyTorch's default runs
more than once a round (torch, torch#again), the ratio to the mean of those
runs."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
import step_summary  # noqa: E402
import step_time  # noqa: E402

WL = "wl"


def run(mode, rnd, ms):
    return dict(workload=WL, mode=mode, round=rnd, step_ms_median=ms)


RUNS = [run("torch", 0, 100.0), run("torch#again", 0, 120.0), run("ff-native", 0, 99.0),
        run("torch", 1, 80.0), run("torch#again", 1, 80.0), run("ff-native", 1, 88.0)]
MODES = ["torch", "ff-native", "torch#again"]


def rows_by_mode(runs, modes):
    return {r["mode"]: r for r in step_summary.summarise(runs, [WL], modes)}


def test_ratio_to_the_rounds_torch_run():
    native = rows_by_mode(RUNS, MODES)["ff-native"]
    assert native["ratio_range"] == [0.99, 1.1]
    assert native["ratio"] == round((0.99 + 1.1) / 2, 4)


def test_ratio_to_the_mean_of_pytorchs_runs_in_each_round():
    rows = rows_by_mode(RUNS, MODES)
    native = rows["ff-native"]
    # Round 0: 99 / mean(100, 120) = 0.9; round 1: 88 / 80 = 1.1.
    assert native["ratio_controls_range"] == [0.9, 1.1]
    assert native["controls_per_round"] == 2
    # The controls against their own mean: 100/110, 120/110, 80/80, 80/80.
    assert rows["torch"]["ratio_controls_range"] == [round(100 / 110, 4), 1.0]
    assert rows["torch#again"]["ratio_controls_range"] == [1.0, round(120 / 110, 4)]
    text = step_summary.table(list(rows.values()), 2)
    assert "÷ mean of PyTorch's runs" in text
    assert "| wl | ff-native | 1.045 [0.990–1.100] | 1.000 [0.900–1.100] |" in text


def test_no_control_table_with_one_pytorch_run_a_round():
    runs = [r for r in RUNS if r["mode"] != "torch#again"]
    rows = rows_by_mode(runs, ["torch", "ff-native"])
    assert "ratio_controls" not in rows["ff-native"]
    assert "mean of PyTorch's runs" not in step_summary.table(list(rows.values()), 2)


def test_wait_for_the_gpu_at_the_steps_end():
    runs = [dict(r) for r in RUNS]
    # PyTorch's runs wait 30 / 10 ms of 100 / 80 ms steps; ff-native's run of
    # round 1 has no wait record (a run from before the field): left out.
    runs[0]["sync_ms"] = [30.0, 40.0, 20.0]   # torch, round 0: median 30
    runs[3]["sync_ms"] = [10.0, 10.0]         # torch, round 1: median 10
    runs[2]["sync_ms"] = [0.0, 0.5, 0.1]      # ff-native, round 0: median 0.1
    rows = rows_by_mode(runs, MODES)
    assert rows["torch"]["sync_ms"] == 20.0
    assert rows["torch"]["sync_share"] == round((30 / 100 + 10 / 80) / 2, 4)
    assert rows["ff-native"]["sync_ms"] == 0.1
    assert rows["ff-native"]["sync_share"] == round(0.1 / 99, 4)
    assert "sync_ms" not in rows["torch#again"]
    text = step_summary.table(list(rows.values()), 2)
    assert "| wl | torch | 20.00 | 21.2% |" in text
    assert "| wl | ff-native | 0.10 | 0.1% |" in text


def test_no_wait_table_without_wait_records():
    assert "Whose pace" not in step_summary.table(list(rows_by_mode(RUNS, MODES).values()), 2)


def lockstep_run(mode, rnd, steps):
    return dict(workload=WL, mode=mode, round=rnd, step_ms=steps,
                step_ms_median=sorted(steps)[len(steps) // 2], lockstep=True)


def test_step_by_step_ratio_pairs_steps_of_the_same_index_and_round():
    torch_steps = [[100.0, 200.0, 100.0, 100.0], [50.0, 50.0, 50.0, 50.0]]
    ff_steps = [[90.0, 220.0, 100.0, 110.0], [50.0, 45.0, 55.0, 50.0]]
    runs = [lockstep_run("torch", r, s) for r, s in enumerate(torch_steps)]
    runs += [lockstep_run("ff-native", r, s) for r, s in enumerate(ff_steps)]
    rows = rows_by_mode(runs, ["torch", "ff-native"])
    native = rows["ff-native"]
    # Ratios 0.9, 1.1, 1.0, 1.1, 1.0, 0.9, 1.1, 1.0: median 1.0.
    assert native["step_pairs"] == 8
    assert native["step_ratio"] == 1.0
    lo, hi = native["step_ratio_ci"]
    assert 0.9 <= lo <= 1.0 <= hi <= 1.1
    assert rows["torch"]["step_ratio"] == 1.0
    text = step_summary.table(list(rows.values()), 2)
    assert "Step by step (--lockstep)" in text
    assert "| wl | ff-native | 1.000 [" in text


def test_per_run_ratio_takes_each_runs_median():
    # Round 0: ff-native's steps are 2% slower in 3 of 4 steps; round 1: 1% faster in all;
    # round 2: 3% slower in all. Runs' medians 1.02, 0.99, 1.03.
    torch_steps = [100.0, 100.0, 100.0, 100.0]
    ff_steps = [[102.0, 102.0, 100.0, 102.0], [99.0] * 4, [103.0] * 4]
    runs = [lockstep_run("torch", r, torch_steps) for r in range(3)]
    runs += [lockstep_run("ff-native", r, s) for r, s in enumerate(ff_steps)]
    native = rows_by_mode(runs, ["torch", "ff-native"])["ff-native"]
    assert native["step_ratio_runs"] == 1.02
    assert native["step_ratio_runs_ci"] == [0.99, 1.03]
    assert (native["runs_above"], native["runs"]) == (2, 3)
    text = step_summary.table(list(rows_by_mode(runs, ["torch", "ff-native"]).values()), 3)
    assert "per run: median [95% CI], above 1 in" in text
    assert "| 1.020 [0.990–1.030], 2 of 3 |" in text


def test_cpu_part_of_each_step_against_torchs_same_step_per_run():
    # Steps of 20 ms: torch waits 15 ms for the GPU (a 5 ms CPU part); ff-native
    # 14 ms (a 6 ms CPU part) in round 0, but for one step of 13 ms, and 15.5 ms
    # (4.5 ms) in round 1. Runs' medians +1.0 and -0.5 ms.
    runs = [lockstep_run("torch", r, [20.0] * 4) for r in range(2)]
    runs += [lockstep_run("ff-native", r, [20.0] * 4) for r in range(2)]
    for r in runs[:2]:
        r["sync_ms"] = [15.0] * 4
    runs[2]["sync_ms"] = [14.0, 14.0, 13.0, 14.0]
    runs[3]["sync_ms"] = [15.5] * 4
    rows = rows_by_mode(runs, ["torch", "ff-native"])
    native = rows["ff-native"]
    assert native["cpu_part_delta_ms"] == 0.25
    assert native["cpu_part_delta_ms_ci"] == [-0.5, 1.0]
    assert native["cpu_part_runs_above"] == 1
    assert rows["torch"]["cpu_part_delta_ms"] == 0.0
    text = step_summary.table(list(rows.values()), 2)
    assert "CPU part − torch's, ms, per run" in text
    assert "| 0.250 [-0.500–1.000], 1 of 2 |" in text


def test_no_cpu_part_column_without_wait_records():
    runs = [lockstep_run("torch", r, [10.0, 20.0]) for r in range(2)]
    runs += [lockstep_run("ff-native", r, [11.0, 19.0]) for r in range(2)]
    rows = rows_by_mode(runs, ["torch", "ff-native"])
    assert "cpu_part_delta_ms" not in rows["ff-native"]
    assert "step_ratio_runs" in rows["ff-native"]
    assert "CPU part" not in step_summary.table(list(rows.values()), 2)


def test_no_step_by_step_ratio_for_runs_one_after_another():
    rows = rows_by_mode(RUNS, MODES)
    assert "step_ratio" not in rows["ff-native"]
    assert "Step by step" not in step_summary.table(list(rows.values()), 2)


def test_median_confidence_interval_is_order_statistics_around_the_middle():
    mid, lo, hi = step_summary.median_ci(list(range(1, 101)))
    assert mid == 50.5
    # n = 100: ranks 50 -+ 9.8, i.e. the values at indices 40 and 59.
    assert (lo, hi) == (41, 60)
    assert step_summary.median_ci([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)


KID = r"""
import sys
steps = 0
print("noise before the first gate", flush=True)
while True:
    print("READY", flush=True)
    word = sys.stdin.readline().strip()
    if word != "GO":
        break
    steps += 1
print("RESULT {\"steps\": %d, \"last\": \"%s\"}" % (steps, word), flush=True)
"""


def test_lockstep_kid_runs_one_step_per_go_and_ends_on_end(tmp_path):
    kid = step_time.LockstepKid([sys.executable, "-c", KID], dict(os.environ), None,
                                str(tmp_path / "kid.stderr"))
    assert kid.until_ready(30)
    for _ in range(3):
        kid.send("GO")
        assert kid.until_ready(30)
    stdout, stderr, rc = kid.finish(30)
    assert rc == 0
    assert "noise before the first gate" in stdout
    assert 'RESULT {"steps": 3, "last": "END"}' in stdout
    assert "READY" not in stdout
    assert not (tmp_path / "kid.stderr").exists()


def test_lockstep_kid_that_dies_is_out_of_the_round(tmp_path):
    kid = step_time.LockstepKid([sys.executable, "-c", "import sys; sys.exit(3)"],
                                dict(os.environ), None, str(tmp_path / "kid.stderr"))
    assert not kid.until_ready(30)
    assert not kid.alive
    _, _, rc = kid.finish(30)
    assert rc == 3


def test_lockstep_kid_past_its_deadline_is_killed(tmp_path):
    kid = step_time.LockstepKid([sys.executable, "-c", "import time; time.sleep(60)"],
                                dict(os.environ), None, str(tmp_path / "kid.stderr"))
    assert not kid.until_ready(0.5)
    _, _, rc = kid.finish(0.5)
    assert rc == "timeout"


def test_step_by_step_ratio_to_the_mean_of_pytorchs_steps():
    torch_steps = [[100.0, 100.0, 100.0], [50.0, 50.0, 50.0]]
    again_steps = [[120.0, 80.0, 100.0], [70.0, 50.0, 30.0]]
    ff_steps = [[99.0, 90.0, 110.0], [60.0, 50.0, 40.0]]
    runs = [lockstep_run("torch", r, s) for r, s in enumerate(torch_steps)]
    runs += [lockstep_run("torch#again", r, s) for r, s in enumerate(again_steps)]
    runs += [lockstep_run("ff-native", r, s) for r, s in enumerate(ff_steps)]
    rows = rows_by_mode(runs, ["torch", "ff-native", "torch#again"])
    native = rows["ff-native"]
    # Means of PyTorch's steps: 110, 90, 100 and 60, 50, 40; ratios 0.9, 1.0,
    # 1.1, 1.0, 1.0, 1.0: median 1.0. Against torch's alone: 0.99, 0.9, 1.1,
    # 1.2, 1.0, 0.8: median 0.995.
    assert native["step_ratio_controls"] == 1.0
    assert native["step_ratio"] == 0.995
    lo, hi = native["step_ratio_controls_ci"]
    assert 0.9 <= lo <= 1.0 <= hi <= 1.1
    text = step_summary.table(list(rows.values()), 2)
    assert "÷ mean of PyTorch's steps" in text
    stepped = text.split("Step by step (--lockstep)")[1]
    line = [l for l in stepped.splitlines() if l.startswith("| wl | ff-native |")][0]
    assert line.startswith("| wl | ff-native | 0.995 [")
    # Per run: round 0's ratios 0.99, 0.9, 1.1 (median 0.99), round 1's 1.2,
    # 1.0, 0.8 (median 1.0).
    assert line.endswith("| 6 | 1.000 [0.900–1.100] | 0.995 [0.990–1.000], 0 of 2 |")


def test_no_step_by_step_control_column_with_one_pytorch_run_a_round():
    runs = [lockstep_run("torch", 0, [100.0, 100.0]), lockstep_run("ff-native", 0, [90.0, 110.0])]
    rows = rows_by_mode(runs, ["torch", "ff-native"])
    assert "step_ratio_controls" not in rows["ff-native"]
    assert "mean of PyTorch's steps" not in step_summary.table(list(rows.values()), 1)


def test_peak_reserved_spread_over_the_runs():
    runs = [dict(r) for r in RUNS]
    gib = 2**30
    for r, reserved in zip(runs, [12, 12, 7, 12, 12, 6]):
        r["peak_reserved"] = reserved * gib
        r["peak_allocated"] = 5 * gib
    rows = rows_by_mode(runs, MODES)
    native = rows["ff-native"]
    assert (native["peak_reserved_gib"], native["peak_reserved_gib_min"],
            native["peak_reserved_gib_mean"]) == (7.0, 6.0, 6.5)
    text = step_summary.table(list(rows.values()), 2)
    # One figure where every run peaked alike, else min–max (mean).
    assert "| 12.0 / 5.0 |" in text
    assert "| 6.0–7.0 (6.5) / 5.0 |" in text


def test_pool_keeps_each_calls_rounds_apart(tmp_path):
    # Two calls, each with rounds 0 and 1; the second call runs LD_PRELOAD, not native.
    second = [run("torch", 0, 50.0), run("torch#again", 0, 50.0), run("ff-preload", 0, 45.0),
              run("torch", 1, 60.0), run("torch#again", 1, 60.0), run("ff-preload", 1, 66.0)]
    paths = []
    for i, runs in enumerate((RUNS, second)):
        paths.append(str(tmp_path / f"call{i}.json"))
        with open(paths[-1], "w") as f:
            json.dump(dict(rounds=2, runs=runs), f)
    runs, workloads, modes, rounds = step_summary.pool(paths)
    assert (workloads, rounds) == ([WL], 4)
    assert modes == ["torch", "torch#again", "ff-native", "ff-preload"]
    assert sorted({r["round"] for r in runs if r["mode"] == "ff-preload"}) == [2, 3]
    rows = rows_by_mode(runs, modes)
    # Each run against PyTorch's run of its own round: 45/50 and 66/60, never 45/100.
    assert rows["ff-preload"]["ratio_range"] == [0.9, 1.1]
    assert rows["ff-native"]["ratio_range"] == [0.99, 1.1]
    assert rows["torch"]["runs"] == 4


def test_a_mode_not_run_on_a_workload_is_no_row_and_no_failure():
    other = [dict(r, workload="other") for r in RUNS if r["mode"] != "ff-native"]
    failed = [dict(workload=WL, mode="ff-preload", round=0, failed=True)]
    rows = step_summary.summarise(RUNS + other + failed, [WL, "other"],
                                  MODES + ["ff-preload"])
    assert [(r["workload"], r["mode"]) for r in rows if r["workload"] == "other"] == [
        ("other", "torch"), ("other", "torch#again")]
    preload = [r for r in rows if r["mode"] == "ff-preload"]
    assert [(r["workload"], r["runs"], r["failed"]) for r in preload] == [(WL, 0, 1)]
    assert "| other | ff-native |" not in step_summary.table(rows, 2)
    assert "| wl | ff-preload | FAILED (1) |" in step_summary.table(rows, 2)


def test_pool_writes_the_tables(tmp_path):
    path = tmp_path / "call.json"
    path.write_text(json.dumps(dict(rounds=2, runs=RUNS)))
    out = tmp_path / "pooled"
    subprocess.run([sys.executable, step_time.__file__, "--out", str(out), "--pool", str(path)],
                   check=True, capture_output=True)
    pooled = json.loads((out / "step_time.json").read_text())
    assert pooled["rounds"] == 2 and len(pooled["runs"]) == len(RUNS)
    assert "| wl | ff-native |" in (out / "step_time.md").read_text()


def test_sign_test_p():
    assert step_summary.sign_test_p(0, 0) == 1.0
    assert step_summary.sign_test_p(3, 3) == 1.0
    # 0 of 5: 2 / 32 either way; 9 of 10: 2 * 11 / 1024.
    assert step_summary.sign_test_p(0, 5) == 2 / 32
    assert step_summary.sign_test_p(5, 0) == 2 / 32
    assert abs(step_summary.sign_test_p(9, 1) - 22 / 1024) < 1e-12


def test_versus_the_aa_round_by_round():
    # Three rounds. torch's steps are 100 ms; the A/A lands at 1.00, 1.10, 0.90
    # of them and fragfree at 1.02, 1.12, 0.88: slower than the A/A in two
    # rounds by 0.02, faster in one by 0.02.
    runs = []
    for rnd, (aa, ff) in enumerate([(100.0, 102.0), (110.0, 112.0), (90.0, 88.0)]):
        runs += [lockstep_run("torch", rnd, [100.0] * 3), lockstep_run("torch#again", rnd, [aa] * 3),
                 lockstep_run("ff-native", rnd, [ff] * 3)]
    rows = rows_by_mode(runs, ["torch", "torch#again", "ff-native"])
    native = rows["ff-native"]
    assert (native["vs_controls_above"], native["vs_controls_rounds"]) == (2, 3)
    assert native["vs_controls"] == 0.02
    assert native["vs_controls_p"] == 1.0
    # The controls themselves are not compared with themselves.
    assert "vs_controls" not in rows["torch#again"] and "vs_controls" not in rows["torch"]
    text = step_summary.table(list(rows.values()), 3)
    assert "Against PyTorch's second process" in text
    assert "| wl | ff-native | +0.0200 [" in text and "| 2 of 3 | 1 |" in text


def test_no_aa_comparison_without_a_second_pytorch_run():
    runs = [lockstep_run("torch", r, [100.0] * 3) for r in range(3)]
    runs += [lockstep_run("ff-native", r, [101.0] * 3) for r in range(3)]
    rows = rows_by_mode(runs, ["torch", "ff-native"])
    assert "vs_controls" not in rows["ff-native"]
    assert "Against PyTorch's second process" not in step_summary.table(list(rows.values()), 3)


def test_a_modes_engine_options_reach_fragfree_conf():
    env = step_time.run_env("ff-native@time_calls:False+page_size_mb:8#big", "/lib.so", "cuda")
    assert env["FRAGFREE_CONF"].split(",")[-2:] == ["time_calls:False", "page_size_mb:8"]
    assert env["FRAGFREE_LIBRARY"] == "/lib.so"
    assert "LD_PRELOAD" not in env
    assert step_time.run_env("ff-preload@page_size_mb:20", "/lib.so", "cuda")["LD_PRELOAD"] == "/lib.so"
    assert "page_size_mb" not in step_time.run_env("torch", "/lib.so", "cuda").get("FRAGFREE_CONF", "")


def phased(mode, rnd, steps, syncs, phases):
    return dict(workload=WL, mode=mode, round=rnd, lockstep=True, step_ms=steps,
                sync_ms=syncs, phase_ms=phases, step_ms_median=steps[0])


def test_phase_deltas_pair_each_step_with_torchs_of_the_same_index_and_round():
    runs = [phased("torch", 0, [10.0, 20.0], [8.0, 17.0], dict(input=[1.0, 2.0], sync=[8.0, 17.0])),
            phased("ff", 0, [10.5, 20.5], [8.0, 17.0], dict(input=[1.5, 2.5], sync=[8.0, 17.0])),
            phased("torch", 1, [30.0], [25.0], dict(input=[3.0], sync=[25.0])),
            phased("ff", 1, [29.0], [26.0], dict(input=[2.0], sync=[26.0]))]
    d = step_summary.phase_deltas(runs, WL, "ff")
    # Pairs: round 0's two steps (+0.5 each) and round 1's (-1.0 step, -2.0 CPU part).
    assert d["step"] == (0.5, -1.0, 0.5, 3)
    assert d["cpu"] == (0.5, -2.0, 0.5, 3)
    assert d["input"] == (0.5, -1.0, 0.5, 3)
    assert d["sync"] == (0.0, 0.0, 1.0, 3)
    table = step_summary.phase_table(runs, [WL], ["torch", "ff"])
    assert "| wl | ff | 3 | +0.500 [-1.000, +0.500] |" in table


def test_no_phase_table_without_marked_phases():
    assert step_summary.phase_table(RUNS, [WL], MODES) == ""
