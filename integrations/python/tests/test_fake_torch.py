"""Host tests of pluggable-mode wiring against a stand-in torch
(tests/_fake_torch): enable() registers the hooks the library exports, switches
the allocator, and makes torch.cuda's memory functions (and their re-exports)
answer from libfragfree. Each test runs in a fresh interpreter: the library
and enable() are once-per-process. The real thing is tested by test_gpu.py."""

from __future__ import annotations

import pytest

from conftest import FAKE_TORCH, HOST_CONF, run_python


def run_with_fake_torch(code: str, conf: str = HOST_CONF):
    r = run_python(code, env={"FRAGFREE_CONF": conf}, extra_path=[FAKE_TORCH])
    if r.returncode != 0:
        pytest.fail(f"subprocess failed:\n{r.stdout}\n{r.stderr}")
    return r


def test_enable_registers_hooks_and_patches(lib_path):
    r = run_with_fake_torch(
        """
        import warnings
        import torch
        import fragfree
        from torch.cuda import memory as tcm
        original_stats = torch.cuda.memory_stats
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fragfree.enable()
        assert fragfree.is_enabled() and fragfree.mode() == "pluggable"
        lib = fragfree.library()
        # The allocator was made current, over fragfree_malloc / fragfree_free.
        (alloc,) = tcm.CURRENT
        assert alloc.alloc_fn == lib.address("fragfree_malloc")
        assert alloc.free_fn == lib.address("fragfree_free")
        # Every hook the library exports is registered with its address.
        assert tcm.REGISTERED["set_reset_fn"] == lib.address("fragfree_empty_cache")
        assert tcm.REGISTERED["set_memory_fraction_fn"] == lib.address("fragfree_set_memory_fraction")
        assert tcm.REGISTERED["set_record_stream_fn"] == lib.address("fragfree_record_stream")
        pool = lib.pool_hook_addresses()
        for key, setter in [("begin_allocate_to_pool", "set_begin_allocate_to_pool"),
                            ("end_allocate_to_pool", "set_end_allocate_to_pool_fn"),
                            ("release_pool", "set_release_pool")]:
            assert tcm.REGISTERED.get(setter) == pool.get(key), setter
        if not pool:
            assert any("graph-pool hooks" in str(x.message) for x in w)
        # Patched in torch.cuda.memory and in the torch.cuda re-export.
        assert torch.cuda.memory_stats is tcm.memory_stats
        assert torch.cuda.memory_stats is not original_stats
        assert getattr(torch.cuda.memory_allocated, "__fragfree__", False)
        # Before CUDA init torch answers {} / 0; so do we.
        assert torch.cuda.memory_stats() == {} and torch.cuda.memory_allocated() == 0
        torch.cuda.init()
        p = lib.malloc(3 << 20, 0, None)
        stats = torch.cuda.memory_stats()
        assert list(stats) == sorted(stats)
        assert stats["allocated_bytes.all.current"] == lib.stats(0)["allocated_bytes.all.current"]
        assert torch.cuda.memory_allocated() == stats["allocated_bytes.all.current"] >= 3 << 20
        assert torch.cuda.memory_allocated(0) == torch.cuda.memory_allocated("cuda:0")
        assert torch.cuda.memory_allocated(torch.device("cuda", 0)) > 0
        assert torch.cuda.max_memory_allocated() >= torch.cuda.memory_allocated()
        assert torch.cuda.memory_reserved() >= torch.cuda.memory_allocated()
        nested = torch.cuda.memory_stats_as_nested_dict()
        assert nested["allocated_bytes"]["all"]["current"] == stats["allocated_bytes.all.current"]
        # torch's memory_summary (here: the fake's, indexing the same keys) works.
        text = torch.cuda.memory_summary()
        assert "CUDA OOMs: 0" in text
        lib.free(p)
        torch.cuda.reset_peak_memory_stats()
        s = torch.cuda.memory_stats()
        assert s["allocated_bytes.all.peak"] == s["allocated_bytes.all.current"]
        torch.cuda.reset_accumulated_memory_stats()
        assert torch.cuda.memory_stats()["allocated_bytes.all.freed"] == 0
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            torch.cuda.reset_max_memory_allocated()
        assert any(issubclass(x.category, FutureWarning) for x in w)
        # Memory fraction: forwarded to torch (which calls the hook) and remembered.
        torch.cuda.set_per_process_memory_fraction(0.5)
        assert tcm.FRACTION_CALLS == [(0.5, None)]
        assert torch.cuda.get_per_process_memory_fraction() == 0.5
        print("OK")
        """
    )
    assert "OK" in r.stdout


def test_snapshot_functions(lib_path, tmp_path):
    out = tmp_path / "snap.pickle"
    r = run_with_fake_torch(
        f"""
        import pickle, warnings
        import torch, fragfree
        from fragfree._snapshot import check_pickle_opcodes
        warnings.simplefilter("ignore")
        fragfree.enable()
        torch.cuda.init()
        lib = fragfree.library()
        p = lib.malloc(1 << 20, 0, None)
        torch.cuda.memory._record_memory_history(max_entries=1000)
        snap = torch.cuda.memory._snapshot()
        assert set(snap) >= {{"segments", "device_traces"}}
        assert len(snap["device_traces"]) == 1
        assert isinstance(torch.cuda.memory_snapshot(), list)
        torch.cuda.memory._dump_snapshot({str(out)!r})
        data = open({str(out)!r}, "rb").read()
        check_pickle_opcodes(data)
        assert pickle.loads(data)["segments"] == snap["segments"]
        torch.cuda.memory._record_memory_history(enabled=None)
        assert torch.cuda.memory._snapshot()["device_traces"] == [[]]
        torch.cuda.memory._record_memory_history(True, trace_alloc_max_entries=10)  # legacy form
        lib.free(p)
        print("OK")
        """,
        conf=HOST_CONF + ",trace_entries:1000",
    )
    assert "OK" in r.stdout


def test_enable_twice_and_after_cuda_init(lib_path):
    r = run_with_fake_torch(
        """
        import warnings
        import torch, fragfree
        warnings.simplefilter("ignore")
        fragfree.enable()
        fragfree.enable()  # same mode and configuration: a no-op
        try:
            fragfree.enable(reclaim_before_grow=False)
        except RuntimeError as e:
            assert "already called" in str(e), e
        else:
            raise SystemExit("enable() with another configuration did not raise")
        try:
            fragfree.enable(mode="native")
        except RuntimeError as e:
            assert "mode='native'" in str(e), e
        else:
            raise SystemExit("enable(mode='native') after pluggable did not raise")
        print("OK")
        """
    )
    assert "OK" in r.stdout


def test_enable_after_cuda_init_raises(lib_path):
    r = run_with_fake_torch(
        """
        import torch, fragfree
        torch.cuda.init()
        try:
            fragfree.enable()
        except RuntimeError as e:
            assert "before CUDA is initialised" in str(e), e
            assert isinstance(e, fragfree.FragfreeError)
        else:
            raise SystemExit("no error")
        assert not fragfree.is_enabled()
        print("OK")
        """
    )
    assert "OK" in r.stdout


def test_enable_with_unknown_key(lib_path):
    r = run_with_fake_torch(
        """
        import torch, fragfree
        try:
            fragfree.enable(no_such_option=3)
        except ValueError as e:
            assert "no_such_option" in str(e), e
        else:
            raise SystemExit("no error")
        assert not fragfree.is_enabled()
        from torch.cuda import memory as tcm
        assert tcm.CURRENT == []  # the allocator was not switched
        print("OK")
        """
    )
    assert "OK" in r.stdout


def test_enable_bad_mode():
    import fragfree

    with pytest.raises(ValueError, match="mode"):
        fragfree.enable(mode="turbo")
