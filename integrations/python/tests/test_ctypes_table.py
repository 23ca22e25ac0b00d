"""The ctypes table of fragfree/_library.py (``_REQUIRED``, ``_OPTIONAL``)
against the one declaration of the C API, shim/include/fragfree/fragfree.h:
every function the table binds is declared there with the same return and
parameter types, so a signature changed in the header and not in the table
(or the reverse) fails here. The header is read as text (its ``FF_API``
prototypes); no compiler, library, GPU or torch is needed.

Owns: the C-type -> ctypes mapping the table follows. Thread-safety: none
needed (test code).
"""

from __future__ import annotations

import ctypes
import re

import pytest

from fragfree import _library, _native

# How the table spells each C type of fragfree.h (``None``: void). Opaque
# handles (streams, the error handler) pass as void*; statuses as int.
_C_TYPES = {
    "void": None,
    "int": ctypes.c_int,
    "unsigned": ctypes.c_uint,
    "uint32_t": ctypes.c_uint32,
    "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_size_t,
    "double": ctypes.c_double,
    "ff_status_t": ctypes.c_int,
    "ff_stream_t": ctypes.c_void_p,
    "ff_error_handler_t": ctypes.c_void_p,
    "char*": ctypes.c_char_p,
    "void*": ctypes.c_void_p,
    "char**": ctypes.POINTER(ctypes.c_char_p),
    "void**": ctypes.POINTER(ctypes.c_void_p),
    "size_t*": ctypes.POINTER(ctypes.c_size_t),
    "int64_t*": ctypes.POINTER(ctypes.c_int64),
}

_PROTOTYPE = re.compile(r"FF_API\s+([^;()]*?)\s*\b(\w+)\s*\(([^()]*)\)\s*;", re.S)


def _ctype(decl: str, with_name: bool) -> object:
    """The ctypes type of one C declaration ("const char* conf", "size_t",
    "const char* const* tags"); ``with_name``: the declaration ends with a
    parameter name to drop."""
    text = re.sub(r"\bconst\b", " ", decl)
    text = re.sub(r"\s*\*\s*", "* ", text).split()
    if with_name and len(text) > 1 and not text[-1].endswith("*"):
        text = text[:-1]
    key = "".join(text)
    key = key.replace("unsignedint", "unsigned")
    # A type the table has no rule for (a struct pointer: ff_stats_t*, ...)
    # stays a string, which matches no ctypes type below.
    return _C_TYPES.get(key, f"<C type {decl.strip()!r}>")


def _header_prototypes() -> dict[str, tuple[object, list[object]]]:
    text = _native.public_headers()["fragfree.h"].read_text()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    out = {}
    for ret, name, params in _PROTOTYPE.findall(text):
        params = params.strip()
        args = [] if params in ("", "void") else [
            _ctype(p, with_name=True) for p in params.split(",")]
        out[name] = (_ctype(ret, with_name=False), args)
    return out


PROTOTYPES = _header_prototypes()
TABLE = {**_library._REQUIRED, **_library._OPTIONAL}


def test_the_header_parses():
    # A handful that must be there, so that a broken pattern cannot pass
    # the comparison below by finding nothing.
    for name in ("ff_malloc", "ff_free", "ff_get_stats", "ff_pause", "ff_ipc_open"):
        assert name in PROTOTYPES, name
    assert len(PROTOTYPES) >= 40


@pytest.mark.parametrize("name", sorted(TABLE))
def test_table_entry_matches_the_header(name):
    assert name in PROTOTYPES, f"{name} is in _library's table but not declared in fragfree.h"
    restype, argtypes = TABLE[name]
    want_restype, want_argtypes = PROTOTYPES[name]
    assert restype is want_restype, (name, restype, want_restype)
    assert list(argtypes) == want_argtypes, (name, argtypes, want_argtypes)


def test_no_name_in_both_tables():
    assert not set(_library._REQUIRED) & set(_library._OPTIONAL)
