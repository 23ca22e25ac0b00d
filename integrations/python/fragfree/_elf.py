"""A minimal reader of an ELF shared library's dynamic symbol table.

It exists for one job: finding libfragfree's C++-ABI graph-pool hooks
(``fragfree_begin_allocate_to_pool`` and friends), which are exported under a
mangled name that depends on how ``cudaStream_t`` was spelled when the library
was built. ctypes can only look up exact names, so we list the defined dynamic
symbols and match the identifier inside the mangled name. Read-only; 64-bit
little-endian ELF (x86-64, aarch64) only; anything else returns no symbols.
"""

from __future__ import annotations

import struct

__all__ = ["defined_dynamic_symbols", "find_symbol"]

_SHT_DYNSYM = 11
_SHN_UNDEF = 0


def defined_dynamic_symbols(path: str) -> list[str]:
    """Names of the symbols ``path`` defines in its dynamic symbol table
    ([] if the file is not a 64-bit little-endian ELF or cannot be read)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return []
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    (e_shoff,) = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum = struct.unpack_from("<HH", data, 0x3A)
    if e_shoff == 0 or e_shentsize < 64:
        return []
    sections = []
    for i in range(e_shnum):
        off = e_shoff + i * e_shentsize
        if off + 64 > len(data):
            return []
        # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link,
        # sh_info, sh_addralign, sh_entsize
        sections.append(struct.unpack_from("<IIQQQQIIQQ", data, off))
    names: list[str] = []
    for sec in sections:
        if sec[1] != _SHT_DYNSYM:
            continue
        sym_off, sym_size, link, entsize = sec[4], sec[5], sec[6], sec[9] or 24
        if link >= len(sections):
            continue
        str_off, str_size = sections[link][4], sections[link][5]
        for k in range(sym_off, sym_off + sym_size - entsize + 1, entsize):
            st_name, _info, _other, st_shndx = struct.unpack_from("<IBBH", data, k)
            if st_name == 0 or st_shndx == _SHN_UNDEF or st_name >= str_size:
                continue
            start = str_off + st_name
            end = data.find(b"\0", start, str_off + str_size)
            if end > start:
                names.append(data[start:end].decode("ascii", "replace"))
    return names


def find_symbol(symbols: list[str], identifier: str) -> str | None:
    """The exported name for the function ``identifier``: the plain name
    (extern "C") if exported, else an Itanium-mangled free function of that
    name at global scope (``_Z<len><identifier>...``)."""
    if identifier in symbols:
        return identifier
    mangled_prefix = f"_Z{len(identifier)}{identifier}"
    for name in symbols:
        if name.startswith(mangled_prefix):
            return name
    return None
