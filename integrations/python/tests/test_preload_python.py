"""Host tests of LD_PRELOAD=libfragfree.so into Python programs (the bootstrap
of shim/preload_python.cc and fragfree/_preload.py; docs/preload.md, "Python
programs"). No GPU, no torch: a stand-in ``torch`` package written per test
triggers the import hook. Every run is a fresh interpreter with the library
preloaded and $XDG_CACHE_HOME in a temp folder (where the bootstrap is written).
"""

from __future__ import annotations

import ast
import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import PACKAGE_ROOT, REPO_ROOT
from fragfree import _library

NOTICE = "fragfree: LD_PRELOAD:"
NATIVE = "fragfree: LD_PRELOAD: PyTorch's allocator is fragfree (native adapter)"
INTERPOSING = "fragfree: LD_PRELOAD: interposing cudaMalloc/cudaMallocAsync ("

# Prints what a program can see of its start-up, as JSON.
PROBE = """
import json, os, sys
def probe():
    sc = sys.modules.get("sitecustomize")
    return {
        "path": sys.path[1:],
        "pythonpath": os.environ.get("PYTHONPATH"),
        "sitecustomize": getattr(sc, "__file__", None),
        "marker": os.environ.get("USER_SITECUSTOMIZE_RAN"),
        "modules": sorted(m for m in sys.modules if m != "sitecustomize"),
        "meta_path": [type(f).__name__ for f in sys.meta_path],
    }
"""


@pytest.fixture(scope="module")
def preload_lib(lib_path):
    lib = ctypes.CDLL(lib_path)
    if not hasattr(lib, "cudaMalloc"):
        pytest.skip("libfragfree.so was built without CUDA: it has no LD_PRELOAD layer")
    return lib_path


@pytest.fixture
def env(preload_lib, tmp_path):
    """The environment of a preloaded run (no PyTorch allocator variables)."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("PYTORCH_", "FRAGFREE_")) and k not in ("LD_PRELOAD", "PYTHONPATH")}
    e["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    e["LD_PRELOAD"] = preload_lib
    return e


def fake_torch(root: Path, cuda: str | None = None, body: str = "") -> Path:
    """A stand-in torch package under ``root``: torch.version.cuda = ``cuda``."""
    pkg = root / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(f"""
        class version:
            cuda = {cuda!r}
        class cuda:
            @staticmethod
            def is_initialized():
                return False
        {body}
    """))
    return root


def user_sitecustomize(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "sitecustomize.py").write_text(
        "import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = '1'\n")
    return root


def run(env: dict, code: str, pythonpath: list[Path] | None = None, cwd: Path | None = None,
        preload: bool = True) -> subprocess.CompletedProcess:
    e = dict(env)
    if not preload:
        e.pop("LD_PRELOAD")
    if pythonpath:
        e["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          cwd=str(cwd or Path(e["XDG_CACHE_HOME"]).parent),
                          capture_output=True, text=True, timeout=120)


def notices(r: subprocess.CompletedProcess) -> list[str]:
    return [line for line in r.stderr.splitlines() if line.startswith(NOTICE)]


def test_program_sees_no_change_and_its_sitecustomize_runs(env, tmp_path):
    user = user_sitecustomize(tmp_path / "user")
    code = PROBE + "print(json.dumps(probe()))"
    plain = run(env, code, [user], preload=False)
    pre = run(env, code, [user])
    assert plain.returncode == 0 and pre.returncode == 0, pre.stderr
    assert pre.stderr == ""
    a, b = json.loads(plain.stdout), json.loads(pre.stdout)
    assert b["marker"] == "1" and b["sitecustomize"] == str(user / "sitecustomize.py")
    assert b["pythonpath"] == str(user)
    for key in ("path", "pythonpath", "sitecustomize", "modules"):
        assert a[key] == b[key], key
    # The hook waits for torch: one finder more, nothing else.
    assert b["meta_path"][1:] == a["meta_path"] and b["meta_path"][0] == "Finder"
    # The bootstrap was written under $XDG_CACHE_HOME/fragfree, privately.
    (folder,) = (Path(env["XDG_CACHE_HOME"]) / "fragfree").glob("python-bootstrap-*")
    assert (folder / "sitecustomize.py").is_file()
    assert folder.stat().st_mode & 0o022 == 0


def test_without_a_user_sitecustomize_none_appears(env):
    code = PROBE + "print(json.dumps(probe()))"
    plain, pre = run(env, code, preload=False), run(env, code)
    assert pre.returncode == 0 and pre.stderr == "", pre.stderr
    a, b = json.loads(plain.stdout), json.loads(pre.stdout)
    assert a["sitecustomize"] == b["sitecustomize"]  # the system's one, or None
    assert a["pythonpath"] is None and b["pythonpath"] is None
    assert a["path"] == b["path"]


def test_torch_import_triggers_one_notice_and_leaves_no_trace(env, tmp_path):
    torch_dir = fake_torch(tmp_path / "t")
    code = PROBE + textwrap.dedent("""
        before = probe()
        import torch
        import torch
        after = probe()
        print(json.dumps({
            "loader": type(torch.__loader__).__name__,
            "spec_loader": type(torch.__spec__.loader).__name__,
            "meta_path": after["meta_path"],
        }))
    """)
    plain = run(env, code, [PACKAGE_ROOT, torch_dir], preload=False)
    pre = run(env, code, [PACKAGE_ROOT, torch_dir])
    assert pre.returncode == 0, pre.stderr
    assert notices(pre) == [INTERPOSING + "this PyTorch has no CUDA support)"], pre.stderr
    a, b = json.loads(plain.stdout), json.loads(pre.stdout)
    assert b == a  # torch's own loader; the finder is gone


def test_torch_imported_by_the_user_sitecustomize(env, tmp_path):
    torch_dir = fake_torch(tmp_path / "t")
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import torch\n")
    r = run(env, "import torch; print('ok')", [user, PACKAGE_ROOT, torch_dir])
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    assert notices(r) == [INTERPOSING + "this PyTorch has no CUDA support)"]


def test_subprocess_and_spawn_children_each_get_it_once(env, tmp_path):
    torch_dir = fake_torch(tmp_path / "t")
    script = tmp_path / "main.py"
    script.write_text(textwrap.dedent("""
        import json, multiprocessing as mp, os, subprocess, sys
        import torch

        def child(q):
            import torch  # already imported by the re-run of this module
            q.put(os.environ.get("PYTHONPATH"))

        if __name__ == "__main__":
            subprocess.run([sys.executable, "-c", "import torch"], check=True)
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            p = ctx.Process(target=child, args=(q,))
            p.start()
            seen = q.get(timeout=60)
            p.join(60)
            print(json.dumps({"parent": os.environ.get("PYTHONPATH"), "child": seen,
                              "exitcode": p.exitcode}))
    """))
    e = dict(env, PYTHONPATH=os.pathsep.join([str(PACKAGE_ROOT), str(torch_dir)]))
    r = subprocess.run([sys.executable, str(script)], env=e, capture_output=True, text=True,
                       timeout=180, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["exitcode"] == 0
    assert out["parent"] == out["child"] == e["PYTHONPATH"]  # the folder never shows
    # The parent, the subprocess and the spawn child: one line each.
    assert notices(r) == [INTERPOSING + "this PyTorch has no CUDA support)"] * 3, r.stderr


def test_native_adapter_is_installed_over_the_preloaded_library(env, tmp_path, preload_lib):
    """With a CUDA torch, the bootstrap installs the native adapter
    (install_native stubbed: it needs the real torch) over the preloaded copy."""
    torch_dir = fake_torch(tmp_path / "t", cuda="13.0")
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text(textwrap.dedent("""
        import fragfree._native as native
        def install_native(lib_path):
            native.GIVEN = lib_path
            return object(), {"installed": True}
        native.install_native = install_native
    """))
    r = run(env, """
        import json, torch, fragfree
        from fragfree import _native
        maps = {l.split(None, 5)[5].strip() for l in open("/proc/self/maps")
                if "libfragfree" in l and len(l.split(None, 5)) == 6}
        print(json.dumps({"mode": fragfree.mode(), "given": _native.GIVEN,
                          "library": fragfree.library().path, "copies": sorted(maps)}))
        fragfree.enable()  # the program's own call: already enabled, same conf
    """, [user, PACKAGE_ROOT, torch_dir])
    assert r.returncode == 0, r.stderr
    assert notices(r) == [NATIVE], r.stderr
    out = json.loads(r.stdout)
    real = os.path.realpath(preload_lib)
    assert out["mode"] == "native"
    assert out["given"] == out["library"] == real
    assert out["copies"] == [real]  # one engine: no second copy was loaded


def test_adapter_failure_keeps_interposition(env, tmp_path):
    torch_dir = fake_torch(tmp_path / "t", cuda="13.0")  # no torch.utils.cpp_extension
    r = run(env, "import torch, os, fragfree; print(fragfree.mode(), "
                 "os.environ.get('PYTORCH_CUDA_ALLOC_CONF'))", [PACKAGE_ROOT, torch_dir])
    assert r.returncode == 0, r.stderr
    (line,) = notices(r)
    assert line.startswith(INTERPOSING + "the native adapter could not be loaded: "), line
    # PyTorch's backend was set by the constructor before torch could read it.
    assert r.stdout.split() == ["None", "backend:cudaMallocAsync"]


def test_user_torch_allocator_setting_is_respected(env, tmp_path):
    torch_dir = fake_torch(tmp_path / "t", cuda="13.0")
    e = dict(env, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    r = run(e, "import torch", [PACKAGE_ROOT, torch_dir])
    assert r.returncode == 0, r.stderr
    assert notices(r) == [INTERPOSING + "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is "
                          "set, so PyTorch's allocator runs as configured; unset it for "
                          "fragfree's native adapter)"]


def test_package_found_next_to_the_library(env, tmp_path, preload_lib):
    """No PYTHONPATH: the bootstrap finds integrations/python from build/lib."""
    repo = PACKAGE_ROOT.parent.parent
    if not Path(preload_lib).resolve().is_relative_to(repo.resolve()):
        pytest.skip("the library is not in this source tree's build folder")
    torch_dir = fake_torch(tmp_path / "t")
    code = PROBE + textwrap.dedent("""
        before = probe()["path"]
        import torch, fragfree
        print(json.dumps({"file": fragfree.__file__, "same_path": probe()["path"] == before}))
    """)
    e = dict(env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                       capture_output=True, text=True, timeout=120, cwd=str(torch_dir))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert Path(out["file"]).parent == PACKAGE_ROOT / "fragfree" and out["same_path"]
    assert notices(r) == [INTERPOSING + "this PyTorch has no CUDA support)"]


def test_library_copied_alone_still_bootstraps(env, tmp_path, preload_lib):
    alone = tmp_path / "elsewhere" / "libfragfree.so"
    alone.parent.mkdir()
    shutil.copy(preload_lib, alone)
    torch_dir = fake_torch(tmp_path / "t")
    e = dict(env, LD_PRELOAD=str(alone))
    r = subprocess.run([sys.executable, "-c", "import torch"], env=e, capture_output=True,
                       text=True, timeout=120, cwd=str(torch_dir))
    assert r.returncode == 0, r.stderr
    assert notices(r) == [INTERPOSING + "the fragfree Python package was not found: install "
                          "it, or keep libfragfree.so inside it or in build/lib of its source "
                          "tree)"]


def test_non_python_programs_and_opt_out_get_no_bootstrap(env, tmp_path):
    r = subprocess.run(["/bin/sh", "-c", 'echo "[$PYTHONPATH]"'], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "[]\n" and r.stderr == ""
    assert not (Path(env["XDG_CACHE_HOME"]) / "fragfree").exists()
    torch_dir = fake_torch(tmp_path / "t")
    e = dict(env, FRAGFREE_PRELOAD_NATIVE="0", PYTHONPATH=str(torch_dir))
    r = subprocess.run([sys.executable, "-c", "import os, torch; print(os.environ['PYTHONPATH'])"],
                       env=e, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == f"{torch_dir}\n" and r.stderr == ""


def test_one_folder_entry_even_when_inherited(env, tmp_path):
    """A child started with the folder still on PYTHONPATH (its parent ran
    with -E, so its bootstrap never undid it) gets it once."""
    code = "import os, sys; print(os.environ.get('PYTHONPATH'))"
    # What the library writes, seen by python -E (which ignores PYTHONPATH).
    e = dict(env)
    r = subprocess.run([sys.executable, "-E", "-c",
                        "import os; print(os.environ['PYTHONPATH'])"],
                       env=e, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    folder = r.stdout.strip()
    assert folder.startswith(str(Path(env["XDG_CACHE_HOME"]) / "fragfree"))
    e["PYTHONPATH"] = folder + os.pathsep + str(tmp_path)
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == str(tmp_path), r.stderr


def _bootstrap_function(name: str):
    """The function ``name`` nested in the embedded bootstrap
    (shim/preload_python.cc), compiled on its own (it may use only ``os``)."""
    source = (REPO_ROOT / "shim" / "preload_python.cc").read_text()
    text = source.split('R"py(', 1)[1].split(')py"', 1)[0]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            module = ast.Module(body=[ast.Import(names=[ast.alias(name="os")]), node],
                                type_ignores=[])
            namespace: dict = {}
            exec(compile(ast.fix_missing_locations(module), "<bootstrap>", "exec"), namespace)
            return namespace[name]
    raise AssertionError(f"the bootstrap has no function {name}")


def test_bootstrap_finds_the_package_from_every_place_the_package_looks():
    """The bootstrap's package_roots (library -> package, needed before the
    package can be imported) inverts _library.candidate_paths (package ->
    library): from each place the package looks for its library, the
    bootstrap's first guess is that package."""
    package_roots = _bootstrap_function("package_roots")
    candidates = [path for _, path in _library.candidate_paths() if "*" not in str(path)]
    assert len(candidates) >= 3
    for lib in candidates:
        roots = [Path(r).resolve() for r in package_roots(str(lib))]
        assert roots and roots[0] == PACKAGE_ROOT.resolve(), (lib, roots)
