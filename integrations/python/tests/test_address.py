"""fragfree.address_range on the host backend: the whole block around any
interior pointer, and a clear error for a pointer fragfree does not own."""

import ctypes
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import ctypes, fragfree
from fragfree._library import load_library
lib = load_library()
lib.init("backend:host,host_capacity_mb:64,host_granularity_kb:64")
p = lib.malloc(300 * 1024)   # spans several 64 KiB pages
assert p
for off in (0, 1, 70 * 1024, 300 * 1024 - 1):
    base, size = fragfree.address_range(p + off, lib=lib)
    assert base == p, (off, hex(base), hex(p))
    assert size >= 300 * 1024, size
try:
    fragfree.address_range(ctypes.addressof(ctypes.c_int(0)), lib=lib)
except fragfree.FragfreeError as e:
    assert "address_range" in str(e), e
else:
    raise AssertionError("a foreign pointer had a range")
print("OK")
"""


def test_address_range_covers_the_whole_block():
    if not os.environ.get("FRAGFREE_LIBRARY"):
        pytest.skip("FRAGFREE_LIBRARY not set")
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=pkg)
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr
