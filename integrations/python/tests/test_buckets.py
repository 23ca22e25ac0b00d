"""Host tests of the bucket advisor from Python (fragfree/_buckets.py):
bucket_advice() from the request sizes libfragfree sampled, its conf string
applied through FRAGFREE_CONF, the advice line of memory_summary(), the OOM
report's round_buckets string, sequence_buckets(), pad_to_bucket(),
BucketCollate, argument errors and the error of a library that predates the
advisor. No GPU, no torch."""

from __future__ import annotations

import json

import pytest

import fragfree
from conftest import run_python
from fragfree import _buckets
from fragfree._errors import FragfreeError, FragfreeValueError


def _run(code: str, conf: str, lib_path: str) -> str:
    r = run_python(code, env={"FRAGFREE_CONF": conf, "FRAGFREE_LIBRARY": lib_path})
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_advice_from_observed_requests_applies_through_fragfree_conf(lib_path):
    # docs/oom.md's example: 1000 x10, 1100 x10, 5000 x1, K = 2.
    out = _run(
        """
        import json, fragfree
        lib = fragfree.library()
        ptrs = [lib.malloc(n) for n in [1000] * 10 + [1100] * 10 + [5000]]
        print(json.dumps(fragfree.bucket_advice(2)))
        print(json.dumps(fragfree.memory_summary()))
        for p in ptrs:
            lib.free(p)
        """,
        "backend:host,host_capacity_mb:64,bucket_sample:1",
        lib_path,
    )
    advice_line, summary_line = out.strip().splitlines()
    advice = json.loads(advice_line)
    assert advice["buckets"] == [1536, 5120]
    assert advice["conf"] == "round_buckets:[1536,5K]"
    assert advice["config"] == {"round_buckets": [1536, 5120]}
    assert advice["padding_bytes"] == 9840
    assert advice["requests"] == 21 and advice["samples"] == 21
    assert advice["sample_every"] == 1
    assert advice["advised_distinct_sizes"] == 2 and advice["default_distinct_sizes"] == 3
    summary = json.loads(summary_line)
    assert "bucket advice: FRAGFREE_CONF=round_buckets:[" in summary

    # The conf string, and the enable() keywords, configure the next run.
    for conf in (advice["conf"], fragfree.format_conf(advice["config"])):
        out = _run(
            """
            import fragfree
            lib = fragfree.library()
            p, q = lib.malloc(1000), lib.malloc(2000)
            print(lib.stats(0)["allocated_bytes.all.current"])
            """,
            "backend:host,host_capacity_mb:64," + conf,
            lib_path,
        )
        assert int(out) == 1536 + 5120, conf


def test_oom_report_carries_the_round_buckets_string(lib_path):
    # Varied small sizes fill a 16 MiB device; freeing every other one strands
    # free memory in partially used pages, so 4 MiB finds no whole page.
    out = _run(
        """
        import fragfree
        from fragfree import FragfreeOutOfMemoryError
        lib = fragfree.library()
        sizes = [3000, 7000, 12000, 20000, 33000, 47000, 60000]
        held, total, i = [], 0, 0
        while total < (15 << 20) + (512 << 10):
            held.append(lib.malloc(sizes[i % 7]))
            total += sizes[i % 7]
            i += 1
        for p in held[::2]:
            lib.free(p)
        try:
            lib.malloc(4 << 20)
        except FragfreeOutOfMemoryError as e:
            print(str(e))
        """,
        "backend:host,host_capacity_mb:16,host_granularity_kb:64,bucket_sample:1",
        lib_path,
    )
    assert "Fragmentation" in out, out
    assert "FRAGFREE_CONF=round_buckets:[" in out, out


def test_bucket_advice_in_process(host_lib):
    ptrs = [host_lib.malloc(n, 0, None) for n in (3000, 3000, 70_000, 2 << 20)]
    try:
        advice = fragfree.bucket_advice(device=0)
        assert advice["device"] == 0 and advice["num_buckets"] == 4
        assert advice["samples"] >= 1  # the first request is always sampled
        assert advice["buckets"] == sorted(advice["buckets"])
        assert advice["conf"].startswith("round_buckets:[")
        assert all(b % 512 == 0 for b in advice["buckets"])
        for key in ("padding_bytes", "default_padding_bytes", "pow2_div4_padding_bytes",
                    "advised_distinct_sizes", "default_distinct_sizes", "precision_bits"):
            assert isinstance(advice[key], int), key
        # 0: the library's bucket_advice_k option (default 4).
        assert fragfree.bucket_advice(0)["num_buckets"] == 4
        assert "bucket advice: FRAGFREE_CONF=round_buckets:[" in fragfree.memory_summary(0)
    finally:
        for p in ptrs:
            host_lib.free(p)


@pytest.mark.parametrize("bad", [-1, 257, "4", 2.0, True])
def test_bucket_advice_rejects_bad_counts(host_lib, bad):
    with pytest.raises(ValueError, match="num_buckets"):
        fragfree.bucket_advice(bad)


def test_sequence_buckets(host_lib):
    lengths = [20 + i % 10 for i in range(100)] + [500 + 10 * i for i in range(10)]
    advice = fragfree.sequence_buckets(lengths, num_buckets=2, multiple_of=8)
    assert advice["buckets"] == [32, 592] == advice["lengths"]
    assert advice["sequences_per_bucket"] == [100, 10]
    assert advice["sequences"] == 110 and advice["tokens"] == sum(lengths)
    assert advice["padding_tokens"] < advice["pad_to_max_padding_tokens"]
    assert advice["padding_tokens"] == sum(
        fragfree.pad_to_bucket(n, advice) - n for n in lengths)
    # More buckets never pad more; one bucket pads to the longest (rounded).
    four = fragfree.sequence_buckets(lengths, 4, 8)
    assert four["padding_tokens"] <= advice["padding_tokens"]
    assert fragfree.sequence_buckets(lengths, 1, 1)["buckets"] == [590]
    assert fragfree.sequence_buckets([], 4)["buckets"] == []


def test_sequence_buckets_takes_arrays(host_lib):
    np = pytest.importorskip("numpy")
    lengths = np.array([5, 9, 17, 17, 120], dtype=np.int32)
    advice = fragfree.sequence_buckets(lengths, 2, 8)
    assert advice["buckets"] == [24, 120]


@pytest.mark.parametrize(
    "lengths,kwargs,match",
    [
        ([1, -2], {}, "negative"),
        ([1, "x"], {}, r"lengths\[1\]"),
        ([1, 2.5], {}, r"lengths\[1\]"),
        ([1], {"num_buckets": 0}, "num_buckets"),
        ([1], {"num_buckets": 300}, "num_buckets"),
        ([1], {"multiple_of": 0}, "multiple_of"),
    ],
)
def test_sequence_buckets_argument_errors(host_lib, lengths, kwargs, match):
    with pytest.raises(ValueError, match=match):
        fragfree.sequence_buckets(lengths, **kwargs)


def test_pad_to_bucket():
    assert fragfree.pad_to_bucket(1, [64, 16, 32]) == 16
    assert fragfree.pad_to_bucket(16, [64, 16, 32]) == 16
    assert fragfree.pad_to_bucket(17, (16, 32, 64)) == 32
    assert fragfree.pad_to_bucket(0, [8]) == 8
    assert fragfree.pad_to_bucket(40, {"buckets": [32, 64]}) == 64
    with pytest.raises(ValueError, match="longer than the largest bucket"):
        fragfree.pad_to_bucket(65, [16, 64])
    with pytest.raises(ValueError, match="empty"):
        fragfree.pad_to_bucket(3, [])
    with pytest.raises(ValueError, match="length"):
        fragfree.pad_to_bucket(-1, [8])


def test_bucket_collate_lists():
    collate = fragfree.BucketCollate([8, 16, 32], pad_value=-1)
    batch = [[1, 2, 3], list(range(10)), [7]]
    out = collate(batch)
    assert [len(row) for row in out] == [16, 16, 16]
    assert out[0][:4] == [1, 2, 3, -1] and out[1][:10] == list(range(10))
    assert out[2] == [7] + [-1] * 15
    padded, lengths = fragfree.BucketCollate([8, 16], return_lengths=True)([[1] * 8])
    assert padded == [[1] * 8] and lengths == [8]
    with pytest.raises(ValueError, match="truncate=True"):
        collate([list(range(40))])
    cut = fragfree.BucketCollate([8, 16], truncate=True, return_lengths=True)
    padded, lengths = cut([list(range(40)), [1, 2]])
    assert padded[0] == list(range(16)) and padded[1] == [1, 2] + [0] * 14
    assert lengths == [16, 2]
    with pytest.raises(ValueError, match="empty"):
        collate([])
    assert "buckets=[8, 16, 32]" in repr(collate)


def test_bucket_collate_numpy():
    np = pytest.importorskip("numpy")
    collate = fragfree.BucketCollate({"buckets": [4, 8]}, pad_value=0, return_lengths=True)
    batch = [np.array([1, 2, 3], dtype=np.int64), np.array([4, 5, 6, 7, 8], dtype=np.int64)]
    out, lengths = collate(batch)
    assert out.shape == (2, 8) and out.dtype == np.int64
    assert out[0].tolist() == [1, 2, 3, 0, 0, 0, 0, 0]
    assert out[1].tolist() == [4, 5, 6, 7, 8, 0, 0, 0]
    assert lengths.tolist() == [3, 5]
    with pytest.raises(ValueError, match="1-D"):
        collate([np.zeros((2, 2))])


def test_library_without_the_advisor_is_a_clear_error(host_lib, monkeypatch):
    stripped = dict(host_lib._optional)
    stripped.pop("ff_bucket_advice_json")
    stripped.pop("ff_advise_sequence_buckets_json")
    monkeypatch.setattr(host_lib, "_optional", stripped)
    with pytest.raises(FragfreeError, match="ff_bucket_advice_json.*Rebuild libfragfree"):
        fragfree.bucket_advice()
    with pytest.raises(FragfreeError, match="ff_advise_sequence_buckets_json"):
        fragfree.sequence_buckets([1, 2, 3])
    assert _buckets.summary_line(host_lib, 0) == ""
    assert "bucket advice" not in fragfree.memory_summary(0)
    # The pure helpers need no library.
    assert fragfree.pad_to_bucket(3, [4]) == 4


def test_errors_are_value_errors_of_fragfree():
    with pytest.raises(FragfreeValueError):
        fragfree.pad_to_bucket(9, [8])
