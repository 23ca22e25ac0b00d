"""Host tests of enable()'s mode choice and the package's public namespace
(fragfree/__init__.py): "auto" takes the native adapter when it loads and
otherwise falls back to pluggable mode with exactly one warning naming what is
lost; the configuration is checked before PyTorch is looked for; dir(fragfree)
shows only the public API. Fresh interpreters (enable() is once per process)."""

from __future__ import annotations

import pytest

from conftest import FAKE_TORCH, HOST_CONF, run_python


def ok(r):
    if r.returncode != 0:
        pytest.fail(f"subprocess failed:\n{r.stdout}\n{r.stderr}")
    return r


def test_public_namespace_is_the_api(lib_path):
    r = ok(run_python(
        """
        import fragfree
        public = [n for n in dir(fragfree) if not n.startswith("_")]
        assert sorted(public) == sorted(fragfree.__all__), sorted(set(public) ^ set(fragfree.__all__))
        for name in ("Any", "LOCK", "STATE", "os", "annotations", "merge_conf",
                     "candidate_paths", "load_library", "device_index"):
            assert not hasattr(fragfree, name), name
        for name in fragfree.__all__:
            assert hasattr(fragfree, name), name
        print("OK")
        """
    ))
    assert "OK" in r.stdout


def test_unknown_key_reported_before_missing_torch(lib_path):
    r = ok(run_python(
        """
        import fragfree
        try:
            fragfree.enable(bogus_key=1)
        except fragfree.ConfigError as e:
            print("CONFIG", e)
        except fragfree.FragfreeError as e:
            print("OTHER", e)
        """,
        env={"FRAGFREE_CONF": HOST_CONF},
    ))
    assert r.stdout.startswith("CONFIG") and "bogus_key" in r.stdout, r.stdout


def test_auto_falls_back_to_pluggable_with_one_warning(lib_path):
    r = ok(run_python(
        """
        import warnings, fragfree
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fragfree.enable()
        assert fragfree.mode() == "pluggable", fragfree.mode()
        mine = [x for x in w if "native adapter could not be loaded" in str(x.message)]
        assert len(mine) == 1, [str(x.message) for x in w]
        text = str(mine[0].message)
        for lost in ("torch.cuda.OutOfMemoryError", "OOM observers", "reduce-overhead",
                     "cudnn.benchmark", "MemPool"):
            assert lost in text, lost
        fragfree.enable()  # same configuration: a no-op, also with mode "auto"
        fragfree.enable(mode="pluggable")
        try:
            fragfree.enable(mode="native")
        except fragfree.FragfreeError:
            print("OK")
        """,
        env={"FRAGFREE_CONF": HOST_CONF},
        extra_path=[FAKE_TORCH],
    ))
    assert "OK" in r.stdout


def test_auto_chooses_native_when_the_adapter_loads(lib_path):
    r = ok(run_python(
        """
        import warnings, fragfree
        from fragfree import _native
        _native.install_native = lambda path: (object(), {"installed": True, "library": path})
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fragfree.enable()
        assert fragfree.mode() == "native" and not w, [str(x.message) for x in w]
        print("OK")
        """,
        env={"FRAGFREE_CONF": HOST_CONF},
        extra_path=[FAKE_TORCH],
    ))
    assert "OK" in r.stdout


def test_explicit_native_raises_instead_of_falling_back(lib_path):
    r = ok(run_python(
        """
        import fragfree
        try:
            fragfree.enable(mode="native")
        except Exception as e:
            print("RAISED", type(e).__name__)
        assert fragfree.mode() is None
        """,
        env={"FRAGFREE_CONF": HOST_CONF},
        extra_path=[FAKE_TORCH],
    ))
    assert "RAISED" in r.stdout


def test_translate_oom_turns_fragfree_oom_into_torch_oom(lib_path, tmp_path):
    torch_dir = tmp_path / "t" / "torch"
    torch_dir.mkdir(parents=True)
    (torch_dir / "__init__.py").write_text(
        "class _cuda:\n    class OutOfMemoryError(RuntimeError):\n        pass\ncuda = _cuda\n")
    r = ok(run_python(
        """
        import torch, fragfree
        from fragfree._torch_patch import adopt_torch_oom
        try:
            with fragfree.translate_oom():
                raise RuntimeError("fragfree: out of memory on device 0: tried to allocate 1 GiB")
        except torch.cuda.OutOfMemoryError as e:
            assert isinstance(e.__cause__, RuntimeError)
        try:
            with fragfree.translate_oom():
                raise RuntimeError("something else")
        except torch.cuda.OutOfMemoryError:
            raise SystemExit("translated an unrelated error")
        except RuntimeError:
            pass
        adopt_torch_oom()
        assert issubclass(fragfree.FragfreeOutOfMemoryError, torch.cuda.OutOfMemoryError)
        assert issubclass(fragfree.FragfreeOutOfMemoryError, MemoryError)
        print("OK")
        """,
        extra_path=[tmp_path / "t"],
    ))
    assert "OK" in r.stdout
