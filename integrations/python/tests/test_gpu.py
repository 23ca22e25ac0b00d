"""GPU tests: every check of gpu_smoke.py, each in a fresh interpreter (enable()
is once per process). Skipped without torch or without a CUDA device; run on the
H200 machine with PyTorch 2.11:

    python3 -m pytest integrations/python/tests/test_gpu.py -v
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import PACKAGE_ROOT, TESTS_DIR

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # does not initialise CUDA in this process
    pytest.skip("no CUDA device", allow_module_level=True)

sys.path.insert(0, str(TESTS_DIR))
import gpu_smoke  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", list(gpu_smoke.CHECKS))
def test_gpu_check(name):
    r = subprocess.run(
        [sys.executable, str(TESTS_DIR / "gpu_smoke.py"), "--check", name],
        capture_output=True, text=True, timeout=600,
        env={**os.environ,
             "PYTHONPATH": os.pathsep.join(
                 p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")) if p)},
    )
    lines = [l for l in r.stdout.splitlines() if l.startswith(("PASS", "FAIL"))]
    assert r.returncode == 0 and lines and lines[-1].startswith("PASS"), (
        (lines[-1] if lines else f"exit status {r.returncode}") + "\n" + r.stderr[-4000:]
    )
