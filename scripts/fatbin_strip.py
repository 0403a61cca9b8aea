"""Zero the CUDA fat-binary entries one GPU architecture never loads (in place).

A CUDA shared library keeps its device code in the ELF section `.nv_fatbin`: a row of
containers, each one translation unit's code for several GPU generations. Every container
is a 16-byte header (u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of the
entries that follow) and then entries; each entry has its own header (u16 kind 1=PTX
2=ELF/SASS, u16 version, u32 header size, u64 payload size, ..., u32 sm arch at byte 28)
followed by its payload. The driver picks, per container, the SASS of the GPU's arch or
else JIT-compiles the best PTX; entries it would never pick can be zeroed without moving a
byte, so the library still loads and xz squeezes the zero runs away.

Kept per container: every SASS entry of `keep_sm` (90 covers sm_90 and sm_90a); where a
container has none, the highest PTX with arch <= keep_sm. Everything else is zeroed
(payload only; headers, sizes and layout untouched).

Usage: python3 scripts/fatbin_strip.py [--sm 90] [--dry-run] LIB.so [LIB.so ...]
"""

from __future__ import annotations

import argparse
import mmap
import struct
import sys
from dataclasses import dataclass

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX = 1
KIND_SASS = 2


@dataclass(frozen=True)
class Entry:
    kind: int
    arch: int
    payload_off: int
    payload_bytes: int


@dataclass(frozen=True)
class StripReport:
    containers: int
    entries: int
    kept_bytes: int
    zeroed_bytes: int
    kept_archs: tuple[str, ...]


def section_range(buf: bytes | mmap.mmap, name: bytes = b".nv_fatbin") -> tuple[int, int] | None:
    """(file offset, size) of an ELF64 little-endian section, or None where it is absent."""
    if buf[:4] != b"\x7fELF" or buf[4] != 2 or buf[5] != 1:
        raise ValueError("not an ELF64 little-endian file")
    e_shoff = struct.unpack_from("<Q", buf, 0x28)[0]
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", buf, 0x3A)

    def sh(i: int) -> tuple[int, int, int]:
        base = e_shoff + i * e_shentsize
        sh_name = struct.unpack_from("<I", buf, base)[0]
        sh_offset, sh_size = struct.unpack_from("<QQ", buf, base + 0x18)
        return sh_name, sh_offset, sh_size

    _, str_off, _ = sh(e_shstrndx)
    for i in range(e_shnum):
        sh_name, off, size = sh(i)
        end = buf.find(b"\x00", str_off + sh_name)
        if bytes(buf[str_off + sh_name : end]) == name:
            return off, size
    return None


def walk_containers(buf: bytes | mmap.mmap, start: int, size: int) -> list[list[Entry]]:
    """The containers of a fatbin section, each a list of its entries."""
    out: list[list[Entry]] = []
    pos, end = start, start + size
    while pos + 16 <= end:
        magic, _ver, hsize, fat_size = struct.unpack_from("<IHHQ", buf, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned; skip padding
            continue
        entries: list[Entry] = []
        epos, eend = pos + hsize, pos + hsize + fat_size
        if eend > end:
            raise ValueError(f"fatbin container at {pos:#x} runs past its section")
        while epos + 32 <= eend:
            kind, _ev, ehsize, psize = struct.unpack_from("<HHIQ", buf, epos)
            arch = struct.unpack_from("<I", buf, epos + 28)[0]
            if kind not in (KIND_PTX, KIND_SASS) or ehsize < 32:
                raise ValueError(f"bad fatbin entry at {epos:#x}: kind {kind}, header {ehsize}")
            entries.append(Entry(kind, arch, epos + ehsize, psize))
            epos += ehsize + psize
        out.append(entries)
        pos = eend
    return out


def entries_to_keep(entries: list[Entry], keep_sm: int) -> set[int]:
    """Indices of the entries a GPU of arch `keep_sm` may load."""
    sass = {i for i, e in enumerate(entries) if e.kind == KIND_SASS and e.arch == keep_sm}
    if sass:
        return sass
    ptx = [(e.arch, i) for i, e in enumerate(entries) if e.kind == KIND_PTX and e.arch <= keep_sm]
    return {max(ptx)[1]} if ptx else set()


def strip_file(path: str, keep_sm: int = 90, dry_run: bool = False) -> StripReport:
    """Zero, in place, the payloads of every entry a `keep_sm` GPU never loads."""
    with open(path, "r+b" if not dry_run else "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ if dry_run else mmap.ACCESS_WRITE)
        try:
            rng = section_range(mm)
            if rng is None:
                return StripReport(0, 0, 0, 0, ())
            containers = walk_containers(mm, *rng)
            kept = zeroed = n = 0
            archs: set[str] = set()
            for entries in containers:
                keep = entries_to_keep(entries, keep_sm)
                for i, e in enumerate(entries):
                    n += 1
                    if i in keep:
                        kept += e.payload_bytes
                        archs.add(("sass" if e.kind == KIND_SASS else "ptx") + f"_{e.arch}")
                        continue
                    zeroed += e.payload_bytes
                    if not dry_run:
                        mm[e.payload_off : e.payload_off + e.payload_bytes] = bytes(e.payload_bytes)
            if not dry_run:
                mm.flush()
            return StripReport(len(containers), n, kept, zeroed, tuple(sorted(archs)))
        finally:
            mm.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sm", type=int, default=90)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("libs", nargs="+")
    a = ap.parse_args(argv)
    for lib in a.libs:
        r = strip_file(lib, a.sm, a.dry_run)
        print(
            f"{lib}: {r.containers} containers, {r.entries} entries, "
            f"kept {r.kept_bytes / 1e6:.1f} MB "
            f"({', '.join(r.kept_archs)}), zeroed {r.zeroed_bytes / 1e6:.1f} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
