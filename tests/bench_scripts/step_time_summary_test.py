"""bench/gpu/step_time.py's summary, on made-up runs (no GPU, no torch): the
ratio to PyTorch's run of the same round, and, when PyTorch's default runs
more than once a round (torch, torch#again), the ratio to the mean of those
runs."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
import step_time  # noqa: E402

WL = "wl"


def run(mode, rnd, ms):
    return dict(workload=WL, mode=mode, round=rnd, step_ms_median=ms)


RUNS = [run("torch", 0, 100.0), run("torch#again", 0, 120.0), run("ff-native", 0, 99.0),
        run("torch", 1, 80.0), run("torch#again", 1, 80.0), run("ff-native", 1, 88.0)]
MODES = ["torch", "ff-native", "torch#again"]


def rows_by_mode(runs, modes):
    return {r["mode"]: r for r in step_time.summarise(runs, [WL], modes)}


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
    text = step_time.table(list(rows.values()), 2)
    assert "÷ mean of PyTorch's runs" in text
    assert "| wl | ff-native | 1.045 [0.990–1.100] | 1.000 [0.900–1.100] |" in text


def test_no_control_table_with_one_pytorch_run_a_round():
    runs = [r for r in RUNS if r["mode"] != "torch#again"]
    rows = rows_by_mode(runs, ["torch", "ff-native"])
    assert "ratio_controls" not in rows["ff-native"]
    assert "mean of PyTorch's runs" not in step_time.table(list(rows.values()), 2)


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
    text = step_time.table(list(rows.values()), 2)
    assert "| wl | torch | 20.00 | 21.2% |" in text
    assert "| wl | ff-native | 0.10 | 0.1% |" in text


def test_no_wait_table_without_wait_records():
    assert "Whose pace" not in step_time.table(list(rows_by_mode(RUNS, MODES).values()), 2)
