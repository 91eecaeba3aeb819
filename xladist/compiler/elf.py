"""The undefined symbols of an ELF64 object file, and which functions reference them.

llvmlite's ObjectFileRef lists sections but not symbols, and we must know every symbol a
compiled kernel calls before MCJIT links it (a symbol nobody resolved becomes a jump to
address 0). This reads the two tables that say so: .symtab (st_shndx == SHN_UNDEF marks
an undefined symbol) and the .rela sections (which code offset refers to which symbol),
mapped back to the defined function containing that offset. Little-endian ELF64 only:
what LLVM emits for x86-64 and aarch64 Linux.
"""

from __future__ import annotations

import struct

_SHT_SYMTAB = 2
_SHT_RELA = 4
_STT_FUNC = 2


class ElfError(ValueError):
    """The bytes are not a little-endian ELF64 object this reader understands."""


def _sections(data: bytes) -> list[tuple]:
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ElfError("not a little-endian ELF64 object")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shentsize != 64 or shoff + shnum * 64 > len(data):
        raise ElfError("section header table out of range")
    out = []
    for i in range(shnum):
        # name, type, flags, addr, offset, size, link, info, addralign, entsize
        sh = struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * 64)
        if sh[1] != 8 and sh[4] + sh[5] > len(data):  # 8 = SHT_NOBITS has no bytes
            raise ElfError(f"section {i} out of range")
        out.append(sh)
    return out


def _symbols(data: bytes, sections) -> list[tuple[str, int, int, int, int]]:
    """(name, type, section index, value, size) of every .symtab entry."""
    for sh in sections:
        if sh[1] == _SHT_SYMTAB:
            strtab = sections[sh[6]]
            strings = data[strtab[4]:strtab[4] + strtab[5]]
            syms = []
            for off in range(sh[4], sh[4] + sh[5], 24):
                name_off, info, _other, shndx, value, size = struct.unpack_from(
                    "<IBBHQQ", data, off)
                end = strings.find(b"\0", name_off)
                name = strings[name_off:end].decode("utf-8", "replace")
                syms.append((name, info & 0xF, shndx, value, size))
            return syms
    return []


def undefined_symbols(data: bytes) -> dict[str, list[str]]:
    """Every undefined symbol -> the defined functions whose code refers to it."""
    sections = _sections(data)
    syms = _symbols(data, sections)
    undefined = {s[0]: set() for s in syms if s[2] == 0 and s[0]}
    funcs = [s for s in syms if s[1] == _STT_FUNC and s[2] != 0]
    for sh in sections:
        if sh[1] != _SHT_RELA:
            continue
        target = sh[7]
        for off in range(sh[4], sh[4] + sh[5], 24):
            r_offset, r_info, _addend = struct.unpack_from("<QQq", data, off)
            idx = r_info >> 32
            if idx >= len(syms) or syms[idx][0] not in undefined:
                continue
            for name, _t, shndx, value, size in funcs:
                if shndx == target and value <= r_offset < value + max(size, 1):
                    undefined[syms[idx][0]].add(name)
    return {k: sorted(v) for k, v in sorted(undefined.items())}


def function_bytes(data: bytes) -> dict[str, bytes]:
    """The machine code of every function the object defines, as the object holds it: a
    field a relocation fills (a call, a constant's address) is zero here, since ELF64's
    RELA relocations carry their addends themselves."""
    sections = _sections(data)
    out = {}
    for name, kind, shndx, value, size in _symbols(data, sections):
        if kind == _STT_FUNC and 0 < shndx < len(sections):
            start = sections[shndx][4] + value
            out[name] = data[start:start + size]
    return out
