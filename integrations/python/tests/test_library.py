"""Host tests of library discovery, the ctypes binding and symbol lookup
(fragfree/_library.py, fragfree/_elf.py). No GPU, no torch."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PACKAGE_ROOT, run_python
from fragfree import _elf, _library
from fragfree._errors import FragfreeValueError, LibraryNotFoundError


def test_env_variable_wins(lib_path, monkeypatch):
    monkeypatch.setenv("FRAGFREE_LIBRARY", lib_path)
    assert _library.find_library() == os.path.abspath(lib_path)


def test_env_variable_pointing_nowhere_is_an_error(monkeypatch, tmp_path):
    missing = tmp_path / "nope" / "libfragfree.so"
    monkeypatch.setenv("FRAGFREE_LIBRARY", str(missing))
    with pytest.raises(LibraryNotFoundError, match="FRAGFREE_LIBRARY") as e:
        _library.find_library()
    assert str(missing) in str(e.value)


def test_not_found_names_every_place(monkeypatch, tmp_path):
    monkeypatch.delenv("FRAGFREE_LIBRARY", raising=False)
    fake = [("next to the package", tmp_path / "a" / "libfragfree.so"),
            ("repository build tree", tmp_path / "build" / "lib" / "libfragfree.so")]
    monkeypatch.setattr(_library, "candidate_paths", lambda: fake)
    monkeypatch.setattr(_library.ctypes.util, "find_library", lambda name: None)
    with pytest.raises(LibraryNotFoundError) as e:
        _library.find_library()
    text = str(e.value)
    for _, p in fake:
        assert str(p) in text
    assert "FRAGFREE_LIBRARY" in text and "find_library" in text


def _copy_package(dest: Path) -> Path:
    pkg = dest / "fragfree"
    shutil.copytree(PACKAGE_ROOT / "fragfree", pkg,
                    ignore=shutil.ignore_patterns("__pycache__", "libfragfree.so*", "lib"))
    return pkg


def test_found_next_to_the_package(lib_path, tmp_path):
    pkg = _copy_package(tmp_path / "site")
    shutil.copy(lib_path, pkg / "libfragfree.so")
    r = run_python(
        "import fragfree._library as L; print(L.find_library())",
        env={"FRAGFREE_LIBRARY": None, "PYTHONPATH": None},
        extra_path=[tmp_path / "site"],
    )
    # extra_path comes first, so the copy (not the repo's package) is imported.
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(pkg / "libfragfree.so")


def test_found_in_a_repository_build_tree(lib_path, tmp_path):
    repo = tmp_path / "repo"
    _copy_package(repo / "integrations" / "python")
    (repo / "build-test" / "lib").mkdir(parents=True)
    shutil.copy(lib_path, repo / "build-test" / "lib" / "libfragfree.so")
    r = run_python(
        "import fragfree._library as L; print(L.find_library())",
        env={"FRAGFREE_LIBRARY": None, "PYTHONPATH": None},
        extra_path=[repo / "integrations" / "python"],
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(repo / "build-test" / "lib" / "libfragfree.so")


def test_not_a_fragfree_library(tmp_path):
    libc = ctypes.util.find_library("m") or "libm.so.6"
    with pytest.raises(LibraryNotFoundError, match="missing ff_init"):
        _library.Library(libc)


def test_unloadable_file(tmp_path):
    junk = tmp_path / "libfragfree.so"
    junk.write_bytes(b"not an ELF file")
    with pytest.raises(LibraryNotFoundError, match="could not load"):
        _library.Library(str(junk))


def test_load_library_is_cached(lib_path):
    assert _library.load_library(lib_path) is _library.load_library(lib_path)


def test_pytorch_entry_points_exported(host_lib):
    for name in _library.PLUGGABLE_C_SYMBOLS.values():
        assert host_lib.address(name), name
    assert host_lib.address("no_such_symbol") is None


def test_dynamic_symbols_lists_the_c_api(host_lib):
    symbols = host_lib.dynamic_symbols()
    for name in ("ff_malloc", "ff_free", "ff_stats_json", "fragfree_malloc"):
        assert name in symbols
    # Undefined (imported) symbols are not listed.
    assert "malloc" not in symbols and "dlsym" not in symbols


def test_elf_reader_rejects_non_elf(tmp_path):
    p = tmp_path / "x"
    p.write_bytes(b"hello")
    assert _elf.defined_dynamic_symbols(str(p)) == []
    assert _elf.defined_dynamic_symbols(str(tmp_path / "missing")) == []


def test_find_symbol_plain_and_mangled():
    syms = ["ff_malloc", "_Z29fragfree_end_allocate_to_pooliSt4pairIyyE",
            "_ZN1v21fragfree_release_poolEv"]
    assert _elf.find_symbol(syms, "ff_malloc") == "ff_malloc"
    assert _elf.find_symbol(syms, "fragfree_end_allocate_to_pool") == syms[1]
    # Only free functions at global scope match, not a namespaced one.
    assert _elf.find_symbol(syms, "fragfree_release_pool") is None


POOL_HOOKS_CPP = r"""
#include <functional>
#include <utility>
struct CUstream_st;
typedef CUstream_st* cudaStream_t;
using Pool = std::pair<unsigned long long, unsigned long long>;
static int calls = 0;
void fragfree_begin_allocate_to_pool(int, Pool, std::function<bool(cudaStream_t)>) { ++calls; }
void fragfree_end_allocate_to_pool(int, Pool) { ++calls; }
void fragfree_release_pool(int, Pool) { ++calls; }
extern "C" int hook_calls() { return calls; }
"""


def test_mangled_pool_hooks_are_found(tmp_path):
    """The pool hooks have C++ linkage; the lookup must find their mangled names
    in a real shared object."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    src = tmp_path / "hooks.cc"
    src.write_text(POOL_HOOKS_CPP)
    so = tmp_path / "libhooks.so"
    subprocess.run([cxx, "-std=c++17", "-shared", "-fPIC", str(src), "-o", str(so)], check=True)
    syms = _elf.defined_dynamic_symbols(str(so))
    lib = ctypes.CDLL(str(so))
    for ident in _library.POOL_HOOK_IDENTIFIERS.values():
        name = _elf.find_symbol(syms, ident)
        assert name is not None and name.startswith("_Z"), (ident, syms)
        assert ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


def test_malloc_free_roundtrip(host_lib):
    p = host_lib.malloc(4096, 0, None)
    assert p and host_lib.allocation_size(p, 0) == 4096
    host_lib.free(p, 0)
    assert host_lib.allocation_size(p, 0) == 0
    assert host_lib.malloc(0, 0, None) == 0


def test_double_free_raises_value_error(host_lib):
    p = host_lib.malloc(512, 0, None)
    host_lib.free(p)
    with pytest.raises(FragfreeValueError, match="not a live fragfree allocation"):
        host_lib.free(p)
    with pytest.raises(ValueError):  # FragfreeValueError is a ValueError
        host_lib.free(p)


def test_invariants_and_version(host_lib):
    host_lib.check_invariants(0)
    assert host_lib.version()
    assert host_lib.device_count() == 1  # the host backend emulates one device


def test_library_errors_after_first_allocation_are_state_errors(host_lib):
    from fragfree._errors import ConfigError, FragfreeError

    host_lib.malloc(512, 0, None)  # ensure the device exists
    with pytest.raises(FragfreeError) as e:
        host_lib.init("backend:host")
    assert not isinstance(e.value, ConfigError)
    assert e.value.status == "FF_ERR_STATE"
