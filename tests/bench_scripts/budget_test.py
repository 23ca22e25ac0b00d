"""bench/gpu/budget.py's pure parts (no GPU, no torch): the binary search for
the smallest budget, and the table of budgets with their ratios to expandable
segments' and PyTorch default's."""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
import budget  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu", "budget.py")


def fits_from(threshold, tried):
    def trial(gib):
        tried.append(gib)
        return gib >= threshold
    return trial


def test_search_brackets_the_threshold_within_the_tolerance():
    tried = []
    best, fails = budget.search(fits_from(12.3, tried), 0.5, 40.0, 0.125)
    assert fails < 12.3 <= best
    assert best - fails <= 0.125
    assert tried[0] == 40.0  # the top is tried first
    assert len(tried) == 1 + 9  # log2(39.5 / 0.125) rounded up


def test_search_raises_when_even_the_top_fails():
    with pytest.raises(RuntimeError, match="does not fit even in 4"):
        budget.search(fits_from(5.0, []), 0.5, 4.0, 0.125)


def test_search_reports_lo_when_everything_tried_passes():
    best, fails = budget.search(fits_from(0.0, []), 0.5, 1.0, 0.125)
    assert fails == 0.5 and best <= 0.625


def result(wl, mode, gib):
    return dict(workload=wl, mode=mode, min_budget_gib=gib, fails_at_gib=gib - 0.1,
                reserved_at_start_max=0, trials=10, secs=30.0)


def test_table_gives_each_budget_its_ratios():
    rows = budget.table([result("gpt2", "torch", 14.0), result("gpt2", "expandable", 12.0),
                         result("gpt2", "ff-native", 10.2)]).splitlines()
    ff = next(r for r in rows if "| ff-native |" in r)
    assert "| 10.200 (10.100) | 0.850 | 0.729 |" in ff
    exp = next(r for r in rows if "| expandable |" in r)
    assert "| 1.000 | 0.857 |" in exp


def test_table_leaves_a_ratio_blank_without_its_reference():
    rows = budget.table([result("fsdp", "ff-native", 2.5)]).splitlines()
    assert rows[-1].startswith("| fsdp | ff-native | 2.500 (2.400) |  |  |")


def test_table_of_a_jsonl_file(tmp_path):
    path = tmp_path / "budget.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in
                            [result("moe", "expandable", 18.0), result("moe", "ff-native", 16.5)]))
    out = subprocess.run([sys.executable, SCRIPT, "--table", str(path)], capture_output=True,
                         text=True, check=True).stdout
    assert "| moe | ff-native | 16.500 (16.400) | 0.917 |" in out
