"""bench/gpu/api_calls_table.py on made-up profile lines (no GPU, no torch):
the runs side by side, a mode seen twice kept apart, the costliest call first
and a total row."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
import api_calls_table  # noqa: E402


def line(mode, calls):
    return "API " + json.dumps(dict(mode=mode, workload="fsdp", steps=3, calls=calls)) + "\n"


LINES = ["KERNELS {}\n",
         line("torch", {"cudaLaunchKernel": [150, 300.0], "cudaMemcpyAsync": [25, 60.0]}),
         line("ff-native", {"cudaLaunchKernel": [150, 301.0], "cudaMemcpyAsync": [25, 190.0],
                            "cudaEventQuery": [4, 2.0]}),
         line("torch", {"cudaLaunchKernel": [150, 298.0], "cudaMemcpyAsync": [25, 61.0]})]


def test_runs_side_by_side_costliest_first():
    runs = api_calls_table.read_runs(LINES)
    assert [label for label, _ in runs] == ["torch", "ff-native", "torch-2"]
    rows = api_calls_table.table(runs, top=15).splitlines()
    assert rows[0] == ("| call | torch calls | torch µs | ff-native calls | ff-native µs | "
                       "torch-2 calls | torch-2 µs |")
    assert rows[2] == "| cudaLaunchKernel | 150 | 300.0 | 150 | 301.0 | 150 | 298.0 |"
    assert rows[3] == "| cudaMemcpyAsync | 25 | 60.0 | 25 | 190.0 | 25 | 61.0 |"
    # A call one run never made reads 0 there.
    assert rows[4] == "| cudaEventQuery | 0 | 0.0 | 4 | 2.0 | 0 | 0.0 |"
    assert rows[-1] == "| all | 175 | 360.0 | 179 | 493.0 | 175 | 359.0 |"


def test_top_limits_the_rows_not_the_total():
    rows = api_calls_table.table(api_calls_table.read_runs(LINES), top=1).splitlines()
    assert len(rows) == 4 and rows[-1].startswith("| all | 175 | 360.0")


def test_logs_without_api_lines_say_so(tmp_path):
    log = tmp_path / "torch.log"
    log.write_text("PROFILED torch fsdp: 10 steps\n")
    out = subprocess.run([sys.executable, api_calls_table.__file__, str(log)],
                         capture_output=True, text=True, check=True).stdout
    assert "no API lines" in out
