"""bench/gpu/gpu_call.sh's parts that need no GPU: the summary of a step
suite's log, a step run skipped when too little time is left, the call's files
packed into one archive, and usage errors."""
import os
import subprocess
import tarfile

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu", "gpu_call.sh")

STEPS_LOG = """\
budget: 198 s spent, a round takes ~27 s: stopping after 8 round(s) of 14
| workload | mode | step ms (median of rounds' medians) [min–max] | ÷ torch [per-round min–max] | peak reserved / allocated GiB | more |
|---|---|---|---|---|---|
| fsdp | torch | 14.49 [14.3–14.7] | 1.000 [1.000–1.000] | 2.496 / 0.781 | x |
| fsdp | ff-native | 14.54 [14.4–14.7] | 1.004 [0.994–1.017] | 2.205 / 0.781 | x |

| workload | mode | median [95% CI] | 10th–90th percentile | steps | ÷ mean | per run: median [95% CI], above 1 in | CPU part |
|---|---|---|---|---|---|---|---|
| fsdp | ff-native | 1.003 [1.002–1.004] | 0.994–1.011 | 112 | 1.002 | 1.003 [1.002–1.004], 11 of 14 | 0.352 |

"""


def run(out, *args):
    env = dict(os.environ, OUT=str(out))
    return subprocess.run(["bash", SCRIPT, *args], env=env, capture_output=True, text=True)


def test_summary_prints_each_runs_tables_short(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "steps.log").write_text(STEPS_LOG + "fsdp-ff-native-r3 FAILED (rc 1)\n")
    r = run(tmp_path, "summary", "a", "absent")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0] == "=== steps a: 1 failed"
    assert lines[1].startswith("budget: 198 s spent")
    assert " fsdp | ff-native | 14.54 [14.4–14.7] | 1.004 [0.994–1.017] | 2.205 / 0.781 " in lines
    # The per-step table keeps the workload, the mode, the ratio to the mean of
    # PyTorch's runs and the per-run ratio.
    assert " fsdp | ff-native | 1.002 | 1.003 [1.002–1.004], 11 of 14 " in lines
    assert "absent" not in r.stdout


def test_steps_with_under_a_minute_left_runs_nothing(tmp_path):
    r = run(tmp_path, "steps", "lib.so", "late", "59", "fsdp", "torch")
    assert r.returncode == 0
    assert r.stdout.strip() == "steps late: skipped, 59 s left"
    assert not (tmp_path / "late").exists()


def test_budget_with_under_a_minute_left_runs_nothing(tmp_path):
    r = run(tmp_path, "budget", "lib.so", "late", "59", "gpt2", "torch")
    assert r.returncode == 0
    assert r.stdout.strip() == "budget late: skipped, 59 s left"
    assert not (tmp_path / "late").exists()


def test_usage_errors_exit_2(tmp_path):
    for args in (["steps", "lib.so", "x", "120"], ["budget", "lib.so", "x"], ["hotpath"], ["bogus"],
                 []):
        r = run(tmp_path, *args)
        assert r.returncode == 2, args
        assert "usage:" in r.stderr


PRELUDE = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu", "call_prelude.sh")


def test_call_prelude_sets_up_a_call(tmp_path):
    # Sourced from the repository root, as the call scripts do; BUDGET 300 s of
    # which next to none is spent: 275 s left after the 25 kept for the summary,
    # less the whole seconds bash's SECONDS has ticked since the call's start
    # (the machine description runs in between; a busy host makes it one or two).
    root = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
    script = f'. "{PRELUDE}"; echo "$OUT0|$B|$N|$P|$L|$(left)"; echo "$LD_LIBRARY_PATH"'
    env = dict(os.environ, OUT=str(tmp_path / "out"), BUDGET="300", LD_LIBRARY_PATH="/x")
    r = subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    first, libs = r.stdout.splitlines()[-2:]
    setup, _, left = first.rpartition("|")
    assert setup == (f"{tmp_path / 'out'}|.carry/gpu|ff-native@time_calls:False|"
                     "ff-pluggable@time_calls:False|ff-preload@time_calls:False")
    assert 270 <= int(left) <= 275
    assert libs == f"{root}/.carry/gpu/lib:{root}/.carry/gpu/deps:/x"
    # On exit the call's files are one archive, and nothing is left beside it.
    assert os.listdir(tmp_path / "out") == ["call.tgz"]
    with tarfile.open(tmp_path / "out" / "call.tgz") as tar:
        assert "./machine.txt" in tar.getnames()


def test_pack_archives_every_file_and_keeps_only_the_archive(tmp_path):
    out = tmp_path / "out"
    for i in range(10):
        (out / "d" / f"e{i}").mkdir(parents=True)
        (out / "d" / f"e{i}" / "log.txt").write_text(str(i))
    (out / "top.md").write_text("top")
    r = run(out, "pack")
    assert r.returncode == 0, r.stderr
    assert os.listdir(out) == ["call.tgz"]
    with tarfile.open(out / "call.tgz") as tar:
        names = set(tar.getnames())
        assert {"./top.md"} | {f"./d/e{i}/log.txt" for i in range(10)} <= names
        assert tar.extractfile("./d/e7/log.txt").read() == b"7"
    # A second pack keeps the first archive inside the new one.
    r = run(out, "pack")
    assert r.returncode == 0 and os.listdir(out) == ["call.tgz"]
    with tarfile.open(out / "call.tgz") as tar:
        assert "./call.tgz" in tar.getnames()


def test_pack_without_an_out_folder_does_nothing(tmp_path):
    r = run(tmp_path / "absent", "pack")
    assert r.returncode == 0 and not (tmp_path / "absent").exists()
