"""Builds the fragfree Python package with its native parts inside it.

`pip install integrations/python` (or `pip wheel`) runs this through
setuptools (pyproject.toml). Besides the Python files, build_py puts into the
package:

* ``fragfree/libfragfree.so``, where fragfree._library finds it first. It is
  FRAGFREE_PREBUILT_LIBRARY when that is set (a built libfragfree.so: no
  compiling), else built here with CMake from the repository around this
  file: tests, benchmarks and the replay tool off, target ``fragfree`` only,
  in FRAGFREE_CMAKE_BUILD_DIR (default <repo>/build-python, kept, so a second
  install only relinks). Extra CMake arguments: FRAGFREE_CMAKE_ARGS. The
  packaged copy has its debug info stripped.
* ``fragfree/include/fragfree/fragfree.h`` and ``stat_fields.h``, the public
  C header the native adapter includes (one declaration of the C API,
  csrc/fragfree_api.h), for the adapter compiled on first use: from the
  repository around this file, else from the installed prefix of
  FRAGFREE_PREBUILT_LIBRARY (<prefix>/include/fragfree beside <prefix>/lib).
  Without either, the package is built without them, with a one-line note,
  and only the first-use compile of the adapter is unavailable.
* ``fragfree/_native_adapter.so`` and ``_native_adapter.json`` (the torch
  version, CUDA version, Python ABI and source digest it was built for), when
  torch is importable at install time: the C++ adapter of native mode, built
  by fragfree._native.compile_adapter with the interpreter being installed
  into (pip's isolated build environment hides that interpreter's
  site-packages, so the build runs in a child process that sees them). When
  torch is absent, or the adapter does not compile against it (a CPU-only
  torch lacks the CUDA headers), this step is skipped with a one-line reason
  and fragfree compiles the adapter on first use instead.
  FRAGFREE_BUILD_NATIVE_ADAPTER=0 skips it; =1 makes its failure an error.

A wheel with these files is specific to the platform (and, with the adapter,
to the Python ABI), so the distribution declares binary content.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def _say(message: str) -> None:
    print(f"fragfree setup: {message}", file=sys.stderr, flush=True)


def _cmake_library() -> Path:
    """libfragfree.so built with CMake from the repository (target only)."""
    if not (REPO / "CMakeLists.txt").is_file() or not (REPO / "shim").is_dir():
        raise SystemExit(
            "fragfree setup: the fragfree repository is not around "
            f"{HERE} (building from an sdist or a copy?): set "
            "FRAGFREE_PREBUILT_LIBRARY=/path/to/libfragfree.so"
        )
    cmake = shutil.which("cmake")
    if cmake is None:
        raise SystemExit(
            "fragfree setup: cmake was not found: install it (apt-get install cmake "
            "ninja-build) or set FRAGFREE_PREBUILT_LIBRARY=/path/to/libfragfree.so"
        )
    build_dir = Path(os.environ.get("FRAGFREE_CMAKE_BUILD_DIR") or REPO / "build-python")
    args = [
        cmake, "-S", str(REPO), "-B", str(build_dir),
        # RelWithDebInfo, as the developers' build/: ccache then reuses its objects
        # (the debug info is stripped from the packaged copy).
        "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        "-DFRAGFREE_BUILD_TESTS=OFF",
        "-DFRAGFREE_BUILD_BENCHMARKS=OFF",
        "-DFRAGFREE_BUILD_REPLAY=OFF",
    ]
    if not (build_dir / "CMakeCache.txt").is_file():
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include" / "cuda.h"
        args.append(f"-DFRAGFREE_WITH_CUDA={'ON' if cuda.is_file() else 'OFF'}")
        if shutil.which("ccache"):
            args += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
    args += shlex.split(os.environ.get("FRAGFREE_CMAKE_ARGS", ""))
    _say(f"building libfragfree.so with CMake in {build_dir}")
    try:
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        subprocess.run(
            [cmake, "--build", str(build_dir), "--target", "fragfree",
             "-j", str(os.cpu_count() or 2)],
            check=True,
        )
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"fragfree setup: building libfragfree.so failed ({e})") from e
    lib = build_dir / "lib" / "libfragfree.so"
    if not lib.exists():
        raise SystemExit(f"fragfree setup: the build did not produce {lib}")
    return lib.resolve()


def _library() -> Path:
    prebuilt = os.environ.get("FRAGFREE_PREBUILT_LIBRARY")
    if prebuilt:
        path = Path(prebuilt)
        if not path.is_file():
            raise SystemExit(
                f"fragfree setup: FRAGFREE_PREBUILT_LIBRARY={prebuilt} does not exist"
            )
        _say(f"using the prebuilt {path}")
        return path.resolve()
    return _cmake_library()


def _public_headers() -> dict[str, Path] | None:
    """fragfree.h and stat_fields.h (the installed header layout), or None."""
    candidates = [{
        "fragfree.h": REPO / "shim" / "include" / "fragfree" / "fragfree.h",
        "stat_fields.h": REPO / "allocator" / "obs" / "stat_fields.h",
    }]
    prebuilt = os.environ.get("FRAGFREE_PREBUILT_LIBRARY")
    if prebuilt:
        include = Path(prebuilt).resolve().parent.parent / "include" / "fragfree"
        candidates.append({name: include / name for name in ("fragfree.h", "stat_fields.h")})
    for headers in candidates:
        if all(path.is_file() for path in headers.values()):
            return headers
    return None


def _package_headers(package_dir: Path) -> None:
    headers = _public_headers()
    if headers is None:
        _say("public C header: not found (no repository around, and no installed "
             "prefix of FRAGFREE_PREBUILT_LIBRARY): the native adapter cannot be "
             "compiled on first use")
        return
    target = package_dir / "include" / "fragfree"
    target.mkdir(parents=True, exist_ok=True)
    for name, path in headers.items():
        shutil.copy2(path, target / name)
    _say(f"packaged the public C header from {headers['fragfree.h'].parent}")


# Run in a child process with the target interpreter: builds the adapter with
# fragfree._native.compile_adapter (this source tree's) and prints its path and
# metadata as one JSON line.
_ADAPTER_SCRIPT = r"""
import json, sys
from pathlib import Path
try:
    import torch
except Exception as e:
    print(json.dumps({"skip": f"torch is not importable ({type(e).__name__}: {e})"}))
    raise SystemExit(0)
from fragfree import _native
meta = _native.adapter_metadata(torch)
try:
    module = _native.compile_adapter(_native.PREBUILT_NAME, Path(sys.argv[1]))
except Exception as e:
    text = str(e).strip().splitlines()
    print(json.dumps({"fail": f"{type(e).__name__}: {text[-1] if text else ''}", **meta}))
    raise SystemExit(0)
print(json.dumps({"path": module.__file__, **meta}))
"""


def _target_python_env() -> dict[str, str]:
    """This interpreter's environment without pip's build isolation (which
    hides site-packages through PYTHONPATH and PYTHONNOUSERSITE), with this
    source tree's fragfree importable."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    env["PYTHONPATH"] = str(HERE)
    # cpp_extension asks the GPU for its architecture even for .cpp sources
    # (which do not use it) and fails on a machine without one.
    env.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    return env


def _build_adapter(package_dir: Path) -> None:
    want = os.environ.get("FRAGFREE_BUILD_NATIVE_ADAPTER", "auto")
    if want == "0":
        _say("native adapter: skipped (FRAGFREE_BUILD_NATIVE_ADAPTER=0)")
        return
    with tempfile.TemporaryDirectory(prefix="fragfree-adapter-") as tmp:
        _say("native adapter: building it against the installed torch, if any")
        proc = subprocess.run(
            [sys.executable, "-c", _ADAPTER_SCRIPT, tmp],
            env=_target_python_env(), cwd=tmp, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
        result = json.loads(lines[-1]) if lines else {
            "fail": f"the build process exited {proc.returncode}: "
                    f"{(proc.stderr.strip().splitlines() or [''])[-1]}"}
        reason = result.get("skip") or result.get("fail")
        if reason:
            message = (f"native adapter: not built at install time: {reason}; fragfree "
                       "compiles it on first use of enable(mode='native') instead")
            if want == "1":
                raise SystemExit(f"fragfree setup: {message} (FRAGFREE_BUILD_NATIVE_ADAPTER=1)")
            _say(message)
            return
        built = Path(result.pop("path"))
        target = package_dir / "_native_adapter.so"
        shutil.copy2(built, target)
        (package_dir / "_native_adapter.json").write_text(json.dumps(result, indent=1) + "\n")
        _say(f"native adapter: built for torch {result['torch']} (CUDA {result['cuda']})")


class BuildPyWithNative(build_py):
    """build_py, then libfragfree.so (and the adapter) into the package."""

    def run(self) -> None:
        super().run()
        package_dir = Path(self.build_lib) / "fragfree"
        package_dir.mkdir(parents=True, exist_ok=True)
        lib = _library()
        target = package_dir / "libfragfree.so"
        shutil.copy2(lib, target)
        strip = shutil.which("strip")
        if strip:  # the debug info only: symbols and exports stay
            subprocess.run([strip, "--strip-debug", str(target)], check=False)
        _say(f"packaged {lib} as fragfree/libfragfree.so")
        _package_headers(package_dir)
        _build_adapter(package_dir)


class BinaryDistribution(Distribution):
    """The package carries shared objects: a platform wheel, not py3-none-any."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildPyWithNative}, distclass=BinaryDistribution)
