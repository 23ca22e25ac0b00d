"""Shared fixtures of fragfree's Python tests.

Owns: making the package importable from the repository (no install needed),
locating libfragfree.so for the tests (``lib_path``; skips when it is not built),
a session-wide Library configured with the host backend (``host_lib``), and
``run_python``, which runs a snippet in a fresh interpreter -- needed because
libfragfree can be configured only once per process and fragfree.enable() only
once per process.

Host tests run anywhere (no GPU, no torch): `/usr/bin/python3 -m pytest
integrations/python/tests`. GPU tests (test_gpu.py) need torch with CUDA and
skip otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
PACKAGE_ROOT = TESTS_DIR.parent  # integrations/python
REPO_ROOT = PACKAGE_ROOT.parent.parent
FAKE_TORCH = TESTS_DIR / "_fake_torch"

if str(PACKAGE_ROOT) not in sys.path:
    sys.path.insert(0, str(PACKAGE_ROOT))

# The host backend's configuration used by in-process tests.
HOST_CONF = "backend:host,host_capacity_mb:512,host_granularity_kb:2048"


def _find_lib() -> str | None:
    from fragfree._library import find_library
    from fragfree._errors import LibraryNotFoundError

    try:
        return find_library()
    except LibraryNotFoundError:
        return None


@pytest.fixture(scope="session")
def lib_path() -> str:
    path = _find_lib()
    if path is None:
        pytest.skip("libfragfree.so is not built (set FRAGFREE_LIBRARY or build <repo>/build)")
    return os.path.realpath(path)


@pytest.fixture(scope="session")
def host_lib(lib_path):
    """The process's Library, configured with the host backend (once)."""
    from fragfree._library import load_library

    lib = load_library(lib_path)
    lib.init(HOST_CONF)
    return lib


def run_python(code: str, env: dict[str, str] | None = None, extra_path: list[str] | None = None,
               timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter with the package importable.
    ``env`` entries are added to (or, with value None, removed from) the
    environment."""
    full_env = dict(os.environ)
    for k, v in (env or {}).items():
        if v is None:
            full_env.pop(k, None)
        else:
            full_env[k] = v
    path = [str(p) for p in (extra_path or [])] + [str(PACKAGE_ROOT)]
    if full_env.get("PYTHONPATH"):
        path.append(full_env["PYTHONPATH"])
    full_env["PYTHONPATH"] = os.pathsep.join(path)
    # A neutral working directory: `python -c` puts the cwd first on sys.path,
    # which must not shadow the package copy a test put on extra_path.
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
