"""Facts about a CUDA toolkit tree and the GPU code inside compiled objects.

Plain Python, no Ansible imports. Used by ``library/cuda_toolkit_verify.py``, by the
build pipeline's SM120 verification and by ``bin/cuda-arch``.

* ``parse_nvcc_version`` reads ``nvcc --version``.
* ``gpu_targets`` reads which GPU architectures a file carries code for, without
  cuobjdump: a cubin is an ELF file for machine EM_CUDA whose flags hold the SM
  number; a host object or shared library embeds fat binaries (magic 0xBA55ED50)
  whose entries each name their kind (ELF or PTX) and architecture.
* ``elf_needed`` lists a shared object's DT_NEEDED libraries (which CUDA runtime it links),
  without ldd or readelf.
* ``installed_version`` reads the ``version.json`` every CUDA toolkit tree has.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import struct
from dataclasses import dataclass

EM_CUDA = 190
FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)
_FATBIN_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, payload size
_ENTRY_HEADER = struct.Struct("<HHIQIIHHI")  # kind, ?, header size, size, csize, ?, minor, major, arch
ENTRY_KINDS = {1: "compute", 2: "sm"}

_NVCC = re.compile(r"release (\d+\.\d+), (V[\d.]+)")


class CudaToolkitError(Exception):
    """A toolkit tree or a compiled object is not what it must be; the text says how."""


@dataclass(frozen=True)
class NvccVersion:
    release: str
    build: str


def parse_nvcc_version(text: str) -> NvccVersion:
    """'Cuda compilation tools, release 13.0, V13.0.88' -> NvccVersion('13.0', 'V13.0.88')."""
    match = _NVCC.search(text)
    if not match:
        first = text.strip().splitlines()[-1] if text.strip() else "nothing"
        raise CudaToolkitError(f"nvcc --version should print 'release X.Y, VX.Y.Z', printed: {first!r}")
    return NvccVersion(match.group(1), match.group(2))


def _cubin_target(data: bytes | mmap.mmap) -> str | None:
    """The 'sm_NNN' of an ELF cubin, or None when ``data`` is not one."""
    if len(data) < 52 or data[:4] != b"\x7fELF":
        return None
    machine = struct.unpack_from("<H", data, 18)[0]
    if machine != EM_CUDA:
        return None
    abi_version = data[8]
    flags = struct.unpack_from("<I", data, 48)[0]
    # ABI 8 (CUDA 12.9 and newer) keeps the SM number in bits 8-15, older ABIs in bits 0-7.
    sm = (flags >> 8) & 0xFF if abi_version >= 8 else flags & 0xFF
    return f"sm_{sm}"


def _fatbin_targets(data: bytes | mmap.mmap) -> list[str]:
    targets: list[str] = []
    start = data.find(FATBIN_MAGIC)
    while start != -1:
        if start + _FATBIN_HEADER.size <= len(data):
            _, _, header_size, payload = _FATBIN_HEADER.unpack_from(data, start)
            entry = start + header_size
            end = min(entry + payload, len(data))
            while entry + _ENTRY_HEADER.size <= end:
                kind, _, entry_header, size, _, _, _, _, arch = _ENTRY_HEADER.unpack_from(data, entry)
                if kind not in ENTRY_KINDS or entry_header < _ENTRY_HEADER.size:
                    break
                targets.append(f"{ENTRY_KINDS[kind]}_{arch}")
                entry += entry_header + size
        start = data.find(FATBIN_MAGIC, start + 4)
    return targets


def gpu_targets(path: str) -> list[str]:
    """Sorted, unique GPU targets in a cubin, object or shared library ('sm_120', 'compute_120')."""
    if os.path.getsize(path) == 0:
        return []
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        direct = _cubin_target(data)
        found = [direct] if direct else _fatbin_targets(data)
    return sorted(set(found))


def require_target(path: str, arch: str) -> list[str]:
    """Raise unless ``path`` carries machine code for ``arch`` ('120' or '12.0')."""
    wanted = "sm_" + arch.replace(".", "")
    targets = gpu_targets(path)
    if wanted not in targets:
        found = ", ".join(targets) or "no GPU code"
        raise CudaToolkitError(f"{path}: expected {wanted} machine code, found {found}")
    return targets


_SECTION = struct.Struct("<IIQQQQIIQQ")  # ELF64 section header
SHT_DYNAMIC = 6
DT_NEEDED = 1


def elf_needed(path: str) -> list[str] | None:
    """DT_NEEDED entries of a 64-bit little-endian ELF file, or None when it is not one."""
    with open(path, "rb") as handle:
        data = handle.read()
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [_SECTION.unpack_from(data, shoff + i * shentsize) for i in range(shnum) if shoff + (i + 1) * shentsize <= len(data)]
    needed: list[str] = []
    for _, kind, _, _, offset, size, link, _, _, _ in sections:
        if kind != SHT_DYNAMIC or link >= len(sections):
            continue
        strtab = sections[link][4]
        for pos in range(offset, offset + size - 15, 16):
            tag, value = struct.unpack_from("<qQ", data, pos)
            if tag == 0:
                break
            if tag == DT_NEEDED:
                end = data.index(b"\0", strtab + value)
                needed.append(data[strtab + value : end].decode("utf-8", "replace"))
    return needed


def cudart_major(needed: list[str]) -> list[str]:
    """The CUDA runtime majors a DT_NEEDED list links: ['libcudart.so.13'] -> ['13']."""
    return sorted({m.group(1) for name in needed if (m := re.fullmatch(r"libcudart\.so\.(\d+)(?:\..*)?", name))})


def installed_version(root: str) -> str | None:
    """The toolkit version that ``root/version.json`` records, or None when there is none."""
    path = os.path.join(root, "version.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
        return str(record["cuda"]["version"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CudaToolkitError(f"{path}: cannot read cuda.version ({exc})") from exc


def version_series(version: str) -> str:
    """'13.0.1' -> '13.0' (the directory suffix NVIDIA installs under)."""
    parts = version.split(".")
    if len(parts) < 2 or not all(part.isdigit() for part in parts):
        raise CudaToolkitError(f"CUDA version should look like '13.0.1', found {version!r}")
    return ".".join(parts[:2])
