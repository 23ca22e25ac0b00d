"""Host tests of enable()'s configuration: keyword arguments -> FRAGFREE_CONF
(fragfree/_config.py) and the library's verdict on them (ff_init)."""

from __future__ import annotations

import pytest

from conftest import run_python
from fragfree._config import format_conf, format_value, merge_conf
from fragfree._errors import ConfigError


@pytest.mark.parametrize(
    "config, expected",
    [
        ({"reclaim_before_grow": False}, "reclaim_before_grow:False"),
        ({"stats_at_exit": True}, "stats_at_exit:True"),
        ({"memory_limit_mb": 4096}, "memory_limit_mb:4096"),
        ({"per_process_memory_fraction": 0.5}, "per_process_memory_fraction:0.5"),
        ({"backend": "host"}, "backend:host"),
        ({"round_buckets": ["512K", "1M", 4194304]}, "round_buckets:[512K,1M,4194304]"),
        ({"roundup_power2_divisions": {256: 1, 512: 2, ">": 8}},
         "roundup_power2_divisions:[256:1,512:2,>:8]"),
        ({"roundup_power2_divisions": 4}, "roundup_power2_divisions:4"),
        ({"snapshot_path": "/tmp/a:b/snap.pickle"}, "snapshot_path:/tmp/a:b/snap.pickle"),
        ({"backend": "host", "trace_entries": 1000, "va_factor": None},
         "backend:host,trace_entries:1000"),
        ({}, ""),
    ],
)
def test_format_conf(config, expected):
    assert format_conf(config) == expected


@pytest.mark.parametrize(
    "config, message",
    [
        ({"bad key": 1}, "not a valid key name"),
        ({"backend": "host,cuda"}, "separators"),
        ({"backend": "a:b"}, "separators"),
        ({"snapshot_path": "/tmp/a,b"}, "separators"),
        ({"round_buckets": [[1]]}, "nested"),
        ({"memory_limit_mb": object()}, "cannot express"),
        ({"per_process_memory_fraction": float("nan")}, "finite"),
        ({"backend": "  "}, "empty"),
    ],
)
def test_format_conf_rejects(config, message):
    with pytest.raises(ConfigError, match=message):
        format_conf(config)


def test_config_error_is_a_value_error():
    with pytest.raises(ValueError):
        format_value("x", object())


def test_merge_conf_keywords_after_environment():
    assert merge_conf(None, {}) is None
    assert merge_conf("", {"backend": "host"}) == "backend:host"
    assert merge_conf("trace_entries:10,", {}) == "trace_entries:10"
    assert merge_conf("backend:host", {"trace_entries": 5}) == "backend:host,trace_entries:5"


def test_unknown_key_is_a_value_error_naming_the_key():
    """ff_init rejects an unknown key; the Python error names it (fresh process:
    the library is configured once per process)."""
    r = run_python(
        """
        import fragfree
        lib = fragfree.library()
        try:
            lib.init(fragfree.format_conf({"backend": "host", "no_such_key": 1}))
        except ValueError as e:
            assert isinstance(e, fragfree.ConfigError), type(e)
            print("ERR", e)
        else:
            raise SystemExit("no error")
        lib.init("backend:host")  # a good configuration is still accepted afterwards
        print("OK")
        """
    )
    assert r.returncode == 0, r.stderr
    assert "no_such_key" in r.stdout and "OK" in r.stdout
    # ff_init's error went to the exception, not to stderr.
    assert "no_such_key" not in r.stderr


def test_bad_value_names_the_key():
    r = run_python(
        """
        import fragfree
        try:
            fragfree.library().init(fragfree.format_conf({"reclaim_before_grow": "maybe"}))
        except fragfree.ConfigError as e:
            print("ERR", e)
        """
    )
    assert r.returncode == 0, r.stderr
    assert "reclaim_before_grow" in r.stdout and "maybe" in r.stdout


def test_every_formatted_key_is_accepted_by_the_library():
    conf = format_conf({
        "backend": "host",
        "host_capacity_mb": 256,
        "host_granularity_kb": 2048,
        "reclaim_before_grow": False,
        "va_factor": 4,
        "roundup_power2_divisions": {256: 1, ">": 4},
        "round_buckets": ["512K", "1M"],
        "trace_entries": 100,
        "per_process_memory_fraction": 0.75,
        "memory_limit_mb": 128,
    })
    r = run_python(
        f"""
        import fragfree
        lib = fragfree.library()
        lib.init({conf!r})
        p = lib.malloc(1 << 20, 0, None)
        s = lib.stats(0)
        assert s["allocated_bytes.all.current"] >= 1 << 20, s
        print("OK")
        """
    )
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout
