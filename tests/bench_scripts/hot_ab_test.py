"""bench/micro/hot_ab.py's pure parts, on made-up inputs (no benchmark run):
reading the benchmark's lines, the rounds' rotation, the per-round ratios to
the first binary, and per-pair figures from a callgrind output file with
compressed names."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "micro"))
import hot_ab  # noqa: E402

BENCH = """\
BM_SteadyPairs/100   148 ns  148 ns  470062 live_GiB=0.42 maps_timed=0 p50_net_ns=119.8 p50_ns=130.04 p99_ns=200.376 tare_ns=10.2
BM_SteadyPairs/1000 ERROR OCCURRED: 'pages were mapped (44) or unmapped (0) during timing'
BM_SteadyPairs/10000 14681 ns 14679 ns 28513 live_GiB=35.7 p50_net_ns=13.8494k p50_ns=13.8596k p99_ns=1.2M tare_ns=10.2
"""


def test_reads_p50_and_p99_with_their_suffixes_and_skips_errors():
    assert hot_ab.parse_bench_output(BENCH) == {100: (130.04, 200.376),
                                                10000: (13859.6, 1.2e6)}


def test_each_entry_reads_only_its_own_benchmark():
    both = BENCH + "BM_SteadyPairsAdapter/100 140 ns 140 ns 9 p50_ns=150.5 p99_ns=300\n"
    assert hot_ab.parse_bench_output(both) == {100: (130.04, 200.376),
                                               10000: (13859.6, 1.2e6)}
    adapter = hot_ab.BENCHMARKS["adapter"]
    assert hot_ab.parse_bench_output(both, adapter) == {100: (150.5, 300.0)}
    assert hot_ab._filter([100, 1000], adapter) == (
        "--benchmark_filter=SteadyPairsAdapter/(100|1000)$")


def test_order_rotates_by_one_each_round():
    names = ["a", "b", "c"]
    assert [hot_ab.round_order(names, r) for r in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


def test_ratios_are_per_round_against_the_first_binary():
    rounds = [{"a": {10: (100.0, 300.0)}, "b": {10: (90.0, 280.0)}},
              {"a": {10: (200.0, 400.0)}, "b": {10: (220.0, 500.0)}},
              {"a": {10: (100.0, 300.0)}, "b": {10: (95.0, 290.0)}}]
    rows = {r["name"]: r for r in hot_ab.summarise_wall(rounds, ["a", "b"], [10])}
    b = rows["b"]
    assert b["p50"] == [90.0, 220.0, 95.0]
    assert b["p50_median"] == 95.0
    # The ratio is taken within each round (0.9, 1.1, 0.95), not of the
    # medians (95 / 100).
    assert b["ratio"] == pytest.approx(0.95)
    assert b["ratio_range"] == pytest.approx([0.9, 1.1])
    assert (b["slower"], b["rounds"]) == (1, 3)
    assert (b["p99_median"], b["p99_max"]) == (290.0, 500.0)
    assert rows["a"]["ratio"] == 1.0
    table = hot_ab.format_wall(hot_ab.summarise_wall(rounds, ["a", "b"], [10]), "a")
    assert "| 10 | b | 90 220 95 | 95 | 0.950 [0.900–1.100] | 1 of 3 | 290 (500) |" in table


def test_a_round_without_a_figure_is_left_out_of_that_binary_only():
    rounds = [{"a": {10: (100.0, 300.0)}, "b": {}},
              {"a": {10: (100.0, 300.0)}, "b": {10: (120.0, 300.0)}}]
    rows = {r["name"]: r for r in hot_ab.summarise_wall(rounds, ["a", "b"], [10])}
    assert rows["a"]["p50"] == [100.0, 100.0]
    assert rows["b"]["p50"] == [120.0]
    assert rows["b"]["rounds"] == 1


CALLGRIND = """\
version: 1
creator: callgrind-3.19.0
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim
fn=(1) main
cfn=(2) /src/shim/pluggable.cc:fragfree_malloc
calls=3 0x10
10 3000 0 0 0 30 0 0 3 0 0 15 0 0
cfn=(3) fragfree_free
calls=3 0x20
11 1500
fn=(4) helper
cfn=(2)
calls=1 0x10
12 1000
summary: 8000 0 0 0 40 0 0 6 2 0 20 0 0
"""


def test_callgrind_totals_and_pairs_follow_compressed_names():
    totals, pairs = hot_ab.parse_callgrind(CALLGRIND)
    assert pairs == 4  # three calls from main, one from helper through "(2)"
    assert totals["Ir"] == 8000 and totals["Bcm"] == 20
    per = hot_ab.per_pair(totals, pairs)
    assert per == {"Ir": 2000, "D1mr": 10, "DLmr": 1.5, "DLmw": 0.5, "Bcm": 5}


def test_callgrind_without_totals_or_pairs_is_an_error():
    with pytest.raises(ValueError, match="not a callgrind output"):
        hot_ab.parse_callgrind("events: Ir\n")
    with pytest.raises(ValueError, match="no pairs counted"):
        hot_ab.per_pair({"Ir": 10}, 0)


def _fake_bench(tmp_path):
    """An executable that prints one benchmark line whose p50 is the lowest CPU
    it may run on."""
    script = tmp_path / "bench"
    script.write_text("#!%s\nimport os\nprint('BM_SteadyPairs/100 1 ns 1 ns 1 p50_ns=%%d p99_ns=1'"
                      " %% min(os.sched_getaffinity(0)))\n" % sys.executable)
    script.chmod(0o755)
    return str(script)


def test_cpu_pins_every_run_to_that_cpu(tmp_path, capsys):
    cpu = max(os.sched_getaffinity(0))
    hot_ab.main(["--rounds", "2", "--live", "100", "--cpu", str(cpu),
                 "a=" + _fake_bench(tmp_path), "b=" + _fake_bench(tmp_path)])
    out = capsys.readouterr().out
    # The fake reports its lowest allowed CPU as its p50: pinned, that is `cpu`.
    assert "| 100 | a | %d %d |" % (cpu, cpu) in out
    assert "| 100 | b | %d %d |" % (cpu, cpu) in out


def test_cpu_outside_the_process_set_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        hot_ab.main(["--cpu", str(max(os.sched_getaffinity(0)) + 4096),
                     "a=" + _fake_bench(tmp_path)])


def test_backends_run_each_binary_once_per_backend(tmp_path, capsys):
    script = tmp_path / "bench"
    # Prints its backend as the p50: cuda 1, host 2.
    script.write_text("#!%s\nimport os\nb = {'cuda': 1, 'host': 2}[os.environ['FRAGFREE_BENCH_BACKEND']]\n"
                      "print('BM_SteadyPairs/100 1 ns 1 ns 1 p50_ns=%%d p99_ns=1' %% b)\n" % sys.executable)
    script.chmod(0o755)
    hot_ab.main(["--rounds", "2", "--live", "100", "--backends", "cuda,host", "x=" + str(script)])
    out = capsys.readouterr().out
    assert "| 100 | cuda | 1 1 |" in out
    assert "| 100 | host | 2 2 |" in out
    assert hot_ab.with_backends({"a": "A", "b": "B"}, ["cuda", "host"]) == {
        "a/cuda": ("A", "cuda"), "a/host": ("A", "host"),
        "b/cuda": ("B", "cuda"), "b/host": ("B", "host")}
    assert hot_ab.with_backends({"a": "A"}, []) == {"a": ("A", None)}
