"""fragfree's Python package against a real torch, on the CPU (no GPU).

Run by torch_cpu_test.sh with the cached torch venv's interpreter
(scripts/deps.sh, ff_torch_venv) and FRAGFREE_LIBRARY set; the fake torch of
integrations/python/tests is not involved. Checks what a torch upgrade could
break without a GPU:
* the patch registry: every torch function pluggable mode replaces exists in
  this torch, patch_torch() wraps them and unpatch_torch() restores them;
* configuration: the pluggable-allocator API enable() uses exists, and
  FRAGFREE_CONF formatting round-trips through the library;
* statistics formatting: torch's own memory_summary() renders fragfree's
  statistics (patched memory_stats) without a missing key;
* snapshots: torch.cuda._memory_viz's segment_plot and trace_plot turn a
  fragfree snapshot (dict, and the pickle _dump_snapshot writes) into HTML;
* the native adapter's prebuilt-or-compile choice (fragfree._native): a
  prebuilt adapter recorded for another torch is refused naming both versions,
  one that does not load falls back;
* the native adapter's C++ against this torch's headers and the library's
  public C header (<fragfree/fragfree.h>, which declares every function it
  calls): a syntax-only compile, as _native.compile_adapter includes them
  (building and running it: tests/packaging/gpu_python_package.sh on the GPU
  machine).
The library runs on its host backend (FRAGFREE_CONF=backend:host).
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "integrations" / "python"))

torch = pytest.importorskip("torch")

import fragfree  # noqa: E402
from fragfree import _config, _snapshot, _torch_patch  # noqa: E402
from fragfree._state import STATE  # noqa: E402


@pytest.fixture(scope="module")
def lib():
    """The library, on the host backend, with history recording, holding a
    few live and freed blocks; STATE.lib set as enable() would."""
    lib = fragfree.library()
    lib.init("backend:host,host_capacity_mb:256,trace_entries:1000")
    lib.record_history(True, 1000, 0)
    live = [lib.malloc(size, 0) for size in (1 << 20, 3 << 20, 512, 70000)]
    lib.free(live.pop(1), 0)
    old = STATE.lib
    STATE.lib = lib
    yield lib
    STATE.lib = old
    for p in live:
        lib.free(p, 0)


@pytest.fixture
def cuda_initialized(monkeypatch):
    # pluggable mode answers only once CUDA is initialised; on the CPU it never is.
    monkeypatch.setattr(_torch_patch, "_cuda_initialized", lambda: True)


def test_torch_is_real():
    assert not hasattr(torch, "__fragfree_fake__")
    assert hasattr(torch, "_C"), torch.__file__
    print("torch", torch.__version__, "cuda", torch.version.cuda, file=sys.stderr)


def test_patch_registry_names_exist_in_torch():
    tcm = torch.cuda.memory
    missing = [name for name in _torch_patch.PATCHED if not hasattr(tcm, name)]
    assert not missing, f"torch {torch.__version__} lacks torch.cuda.memory.{missing}"
    acc = torch.accelerator
    for name in _torch_patch._ACCELERATOR_PATCHED:
        home = getattr(acc, "memory", acc)
        assert hasattr(home, name) or hasattr(acc, name), f"torch.accelerator.{name}"


def test_patch_and_unpatch_real_torch(lib, cuda_initialized):
    before = {name: getattr(torch.cuda.memory, name) for name in _torch_patch.PATCHED}
    reexported = torch.cuda.memory_allocated
    _torch_patch.patch_torch()
    try:
        for name in _torch_patch.PATCHED:
            assert getattr(getattr(torch.cuda.memory, name), "__fragfree__", False), name
        assert torch.cuda.memory_allocated is not reexported  # torch.cuda's re-export too
        allocated = torch.cuda.memory_allocated(0)
        assert allocated == lib.stats(0)["allocated_bytes.all.current"] > 0
        assert torch.cuda.max_memory_reserved(0) >= allocated
    finally:
        _torch_patch.unpatch_torch()
    for name, fn in before.items():
        assert getattr(torch.cuda.memory, name) is fn, name
    assert torch.cuda.memory_allocated is reexported


def test_pluggable_allocator_api_exists():
    assert callable(torch.cuda.memory.CUDAPluggableAllocator)
    assert callable(torch.cuda.memory.change_current_allocator)


def test_conf_round_trip(lib):
    conf = _config.format_conf({"backend": "host", "trace_entries": 1000})
    assert "backend:host" in conf
    merged = _config.merge_conf("backend:host", {"trace_entries": 10})
    assert merged.startswith("backend:host")


def test_torch_memory_summary_renders_fragfree_stats(lib, cuda_initialized):
    _torch_patch.patch_torch()
    try:
        stats = torch.cuda.memory_stats(0)
        assert stats["allocated_bytes.all.current"] > 0
        text = torch.cuda.memory_summary(0)
    finally:
        _torch_patch.unpatch_torch()
    assert "PyTorch CUDA memory summary" in text
    assert "Allocated memory" in text
    # fragfree's own summary of the same numbers
    assert "U_alloc" in fragfree.memory_summary(0)


def _snapshot_dict(lib):
    snap = _snapshot.build_snapshot(lib, [0], 1, include_traces=True)
    assert snap["segments"], "the host backend holds segments"
    assert snap["device_traces"][0], "history recording gives trace entries"
    return snap


def test_memory_viz_plots_a_fragfree_snapshot(lib):
    from torch.cuda import _memory_viz

    snap = _snapshot_dict(lib)
    for plot in (_memory_viz.segment_plot, _memory_viz.trace_plot):
        html = plot(snap)
        assert isinstance(html, str) and "<html" in html.lower(), plot.__name__
        assert len(html) > 1000


def test_memory_viz_reads_the_dumped_pickle(lib, tmp_path, cuda_initialized):
    from torch.cuda import _memory_viz

    path = tmp_path / "snap.pickle"
    _snapshot.write_snapshot(_snapshot_dict(lib), path)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert "<html" in _memory_viz.segment_plot(snap).lower()
    assert "<html" in _memory_viz.trace_plot(snap).lower()
    # torch's own text views of a snapshot
    assert _memory_viz.segsum(snap)


def _package_copy(tmp_path, name, adapter_meta, adapter_bytes=b"not an ELF file"):
    """A copy of the fragfree package with a prebuilt adapter (file and
    metadata) in it, imported as ``name`` so that the real package is
    untouched."""
    import importlib
    import json
    import shutil

    from fragfree import _native

    root = tmp_path / "pkgcopy"
    shutil.copytree(REPO / "integrations" / "python" / "fragfree", root / name)
    # The public C header, where an installed package has it (setup.py).
    (root / name / "include" / "fragfree").mkdir(parents=True)
    for header, path in _native.public_headers().items():
        shutil.copy(path, root / name / "include" / "fragfree" / header)
    (root / name / "_native_adapter.so").write_bytes(adapter_bytes)
    (root / name / "_native_adapter.json").write_text(json.dumps(adapter_meta))
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(f"{name}._native")
    finally:
        sys.path.remove(str(root))


def test_prebuilt_adapter_for_another_torch_is_refused(tmp_path, capsys):
    from fragfree import _native

    meta = dict(_native.adapter_metadata(torch), torch="2.10.0+cu128", cuda="12.8")
    native = _package_copy(tmp_path, "fragfree_other_torch", meta)
    assert native.load_prebuilt_adapter(torch) is None
    err = capsys.readouterr().err
    assert "built for torch 2.10.0+cu128 (CUDA 12.8)" in err, err
    assert f"this is torch {torch.__version__} (CUDA {torch.version.cuda})" in err, err


def test_prebuilt_adapter_that_does_not_load_falls_back(tmp_path, capsys):
    from fragfree import _native

    native = _package_copy(tmp_path, "fragfree_bad_adapter", _native.adapter_metadata(torch))
    assert native.load_prebuilt_adapter(torch) is None
    assert "does not load" in capsys.readouterr().err


def test_no_prebuilt_adapter_is_quiet(capsys):
    from fragfree import _native

    if _native._prebuilt_path() is None:
        assert _native.load_prebuilt_adapter(torch) is None
        assert capsys.readouterr().err == ""


def test_native_adapter_compiles_against_this_torch(tmp_path):
    """g++ -fsyntax-only over csrc/native_allocator.cpp with the include paths
    compile_adapter uses: a C API signature changed in fragfree.h and not in
    the adapter, or a torch header the adapter no longer matches, fails here."""
    import shutil
    import subprocess
    import sysconfig

    from torch.utils import cpp_extension

    from fragfree import _native

    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    cuda_home = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    if not (cuda_home / "include" / "cuda_runtime_api.h").is_file():
        pytest.skip(f"no CUDA toolkit headers in {cuda_home}")
    include = _native._stage_public_headers(tmp_path)
    args = [cxx, "-fsyntax-only", "-std=c++20", "-DTORCH_EXTENSION_NAME=fragfree_check",
            "-DTORCH_API_INCLUDE_EXTENSION_H", f"-I{include}",
            f"-isystem{cuda_home / 'include'}",
            f"-isystem{sysconfig.get_paths()['include']}"]
    args += [f"-isystem{p}" for p in cpp_extension.include_paths()]
    r = subprocess.run(args + [str(_native.SOURCE)], capture_output=True, text=True,
                       timeout=540)
    assert r.returncode == 0, r.stderr[-4000:]
