"""Can every library a venv installs be loaded on this host? The dynamic loader's search, read from the ELF files.

Plain Python, standard library only (it runs on the host, next to plugins/modules/sglang_release_install.py,
and in the rehearsal on the controller). For every ELF shared object and executable under the
venv's site-packages it reads the dynamic section (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH) from
the program headers, as ld.so does, and follows the load of each object as Python's dlopen() of it
would go, breadth first through everything it pulls in. Each needed library is taken:

1. from what is loaded already: earlier in the same load (by file name or SONAME), or a library
   of the venv's shared directories (torch/lib, nvidia/*/lib) that itself loads - Python has
   loaded those when an extension needing them is imported (``import torch`` comes before
   torchvision's ``_C.so`` asks for ``libc10.so``). A library a package keeps for itself (e.g.
   torchvision.libs/libcudart.e8e8b82a.so.12, SONAME libcudart.so.12, reached by image.so's
   RUNPATH) counts only for the objects whose paths lead to it: torchvision's ``_C.so`` is loaded
   before image.so, and its libcudart.so.12 is not found;
2. else from the object's DT_RPATH and its loaders' (only for an object without DT_RUNPATH),
   ``$ORIGIN`` being each one's directory;
3. the host library directories given (the service's LD_LIBRARY_PATH: the CUDA toolkit's lib64);
4. the object's DT_RUNPATH;
5. the host's ld.so.cache (/etc/ld.so.cache, read here) and the default directories;
6. the libraries always present where the release runs (glibc; the NVIDIA driver's libcuda.so.1,
   which a build host may lack).

A candidate counts only when it is an ELF file of the same class and machine (ld.so skips the
others). Objects that another object of the venv loads are judged within that load (scipy.libs'
libgfortran finds libquadmath through _fitpack.so's RPATH); the others are the roots, and a root
fails when anything in its load cannot be had. Failures are reported per distribution (files
mapped to their distribution through the RECORD of each ``*.dist-info``), e.g. ``torchvision
0.24.1: torchvision/_C.so needs libcudart.so.12, which nothing on this host provides (searched:
...)``; a need that a file of the venv would satisfy but that lies on none of the object's paths
(torchaudio's ``_torchaudio.so`` needing ``libtorchaudio.so`` beside it, which torchaudio's Python
loads first) is said so. Packages or objects on the allowlist, each with its reason, are reported
and not failed. Not modelled: symbols and their versions, dlopen() calls made by code at run
time, libraries a package's Python preloads (ctypes, torch.ops.load_library).
"""

from __future__ import annotations

import fnmatch
import os
import re
import struct
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import ToolkitError

ELF_MAGIC = b"\x7fELF"
ET_EXEC, ET_DYN = 2, 3
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29
# ELF class (1: 32-bit, 2: 64-bit) -> the bytes of the header after e_ident, the struct formats of its fields
# e_type .. e_phnum (type, machine, version, entry, phoff, shoff, flags, ehsize, phentsize, phnum), of a
# program header and of a dynamic entry (tag, value)
ELF_LAYOUTS = {
    2: (48, "HHIQQQIHHH", "IIQQQQQQ", "qQ"),  # program header: type, flags, offset, vaddr, paddr, filesz, memsz, align
    1: (36, "HHIIIIIHHH", "IIIIIIII", "iI"),  # program header: type, offset, vaddr, paddr, filesz, memsz, flags, align
}

# glibc's libraries and the NVIDIA driver's: present wherever the release runs (the driver on the GPU
# host; a build or lab host without it still makes a release that loads there).
ALWAYS_PRESENT = (
    "ld-linux-x86-64.so.2",
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libutil.so.1",
    "libresolv.so.2",
    "libanl.so.1",
    "libcuda.so.1",
    "libnvidia-ml.so.1",
)
# ld.so's built-in directories on x86_64 (Debian/Ubuntu multiarch, then the RHEL family's lib64).
DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
LD_SO_CACHE = "/etc/ld.so.cache"
# Directories of the venv (globs relative to site-packages) whose libraries are loaded before the
# extensions needing them: torch's own, and NVIDIA's CUDA wheels that torch loads on import.
# Library directories of packages whose Python loads them before anything that needs them: torch's
# and NVIDIA's wheels (``import torch``), and apache-tvm-ffi's (``import tvm_ffi`` loads
# tvm_ffi/lib/libtvm_ffi.so; xgrammar and sgl-deep-gemm import it before their extensions, whose
# libtvm_ffi.so is on no path of theirs: seen importing on the real GPU machine,
# tests/data/real-server/0.5.13-h200-index-release).
VENV_LIBRARY_DIRS = ("torch/lib", "nvidia/*/lib", "nvidia/*/lib64", "tvm_ffi/lib")
# An object built once per CUDA major beside its siblings (torch_memory_saver: <stem>_cu12.abi3.so,
# <stem>_cu13.abi3.so and a plain <stem>.abi3.so), of which the package's Python loads the one whose
# libcudart loads (torch_memory_saver/utils.py picks ``<stem>_cu<major>``).
CUDA_VARIANT = re.compile(r"^(?P<stem>.+?)_cu(?P<major>\d+)(?P<rest>\..+)$")
ALLOWLIST_VARIABLE = "sglang_release_closure_allowlist"


class ClosureError(ToolkitError):
    """A library of the venv cannot be loaded on this host; the message names the package, the object and the library."""


@dataclass(frozen=True)
class ElfInfo:
    """What the loader reads from one ELF file."""

    elf_class: int  # 1: 32-bit, 2: 64-bit
    data: int  # 1: little-endian, 2: big-endian
    machine: int
    kind: int  # e_type
    needed: tuple[str, ...] = ()
    soname: Optional[str] = None
    rpath: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    dynamic: bool = False

    @property
    def abi(self) -> tuple[int, int, int]:
        return (self.elf_class, self.data, self.machine)


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == ELF_MAGIC
    except OSError:
        return False


def read_elf(path: Path) -> Optional[ElfInfo]:
    """The dynamic section of an ELF file read through its program headers (as ld.so reads it), or None if it is not ELF.

    Reads only the headers, the dynamic segment and the string table, not the whole file (libtorch_cuda.so is over 1 GB)."""
    with open(path, "rb") as handle:
        ident = handle.read(16)
        if len(ident) < 16 or ident[:4] != ELF_MAGIC or ident[4] not in (1, 2) or ident[5] not in (1, 2):
            return None
        elf_class, data = ident[4], ident[5]
        end = "<" if data == 1 else ">"
        size, header_format, phdr_format, dyn_format = ELF_LAYOUTS[elf_class]
        header = handle.read(size)
        if len(header) < size:
            return None
        ehdr = struct.Struct(end + header_format)
        kind, machine, _, _, phoff, _, _, _, phentsize, phnum = ehdr.unpack(header[: ehdr.size])
        phdr = struct.Struct(end + phdr_format)
        dyn = struct.Struct(end + dyn_format)
        base = ElfInfo(elf_class, data, machine, kind)
        if not phoff or not phnum or phentsize < phdr.size:
            return base
        handle.seek(phoff)
        table = handle.read(phentsize * phnum)
        loads: list[tuple[int, int, int]] = []  # vaddr, offset, filesz
        dynamic: Optional[tuple[int, int]] = None  # offset, filesz
        for i in range(phnum):
            if (i + 1) * phentsize > len(table):
                break
            fields = phdr.unpack_from(table, i * phentsize)
            if elf_class == 2:
                p_type, _, offset, vaddr, _, filesz, _, _ = fields
            else:
                p_type, offset, vaddr, _, filesz, _, _, _ = fields
            if p_type == PT_LOAD:
                loads.append((vaddr, offset, filesz))
            elif p_type == PT_DYNAMIC:
                dynamic = (offset, filesz)
        if dynamic is None:
            return base  # a static executable: it needs nothing
        handle.seek(dynamic[0])
        raw = handle.read(dynamic[1])
        entries: list[tuple[int, int]] = []
        for pos in range(0, len(raw) - dyn.size + 1, dyn.size):
            tag, value = dyn.unpack_from(raw, pos)
            if tag == DT_NULL:
                break
            entries.append((tag, value))
        strtab = next((v for t, v in entries if t == DT_STRTAB), None)
        strsz = next((v for t, v in entries if t == DT_STRSZ), 0)
        strings = b""
        if strtab is not None:
            # DT_STRTAB is an address: the PT_LOAD segment holding it gives its file offset
            for vaddr, offset, filesz in loads:
                if vaddr <= strtab < vaddr + filesz:
                    handle.seek(offset + strtab - vaddr)
                    strings = handle.read(strsz or filesz - (strtab - vaddr))
                    break

    def text(value: int) -> str:
        if value >= len(strings):
            return ""
        stop = strings.find(b"\0", value)
        return strings[value : stop if stop >= 0 else len(strings)].decode("utf-8", "replace")

    def path_list(tag: int) -> tuple[str, ...]:
        return tuple(d for t, v in entries if t == tag for d in text(v).split(":") if d)

    soname = next((text(v) for t, v in entries if t == DT_SONAME), None)
    return ElfInfo(
        elf_class,
        data,
        machine,
        kind,
        needed=tuple(text(v) for t, v in entries if t == DT_NEEDED),
        soname=soname or None,
        rpath=path_list(DT_RPATH),
        runpath=path_list(DT_RUNPATH),
        dynamic=True,
    )


def expand_origin(entry: str, origin: str) -> Optional[str]:
    """An rpath entry with $ORIGIN / ${ORIGIN} (and $LIB, $PLATFORM) expanded; None for a relative one (relative to the cwd)."""
    out = entry
    for token, value in (("ORIGIN", origin), ("LIB", "lib64"), ("PLATFORM", "x86_64")):
        out = out.replace("${" + token + "}", value).replace("$" + token, value)
    if not out.startswith("/"):
        return None
    return os.path.normpath(out)


def read_ld_cache(path: str = LD_SO_CACHE) -> dict[str, list[str]]:
    """Library name -> paths listed in glibc's ld.so.cache (the 'glibc-ld.so.cache1.1' table, after the old one if any).

    An unreadable or unknown cache gives {} (the default directories are searched anyway)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return {}
    old_magic, new_magic = b"ld.so-1.7.0", b"glibc-ld.so.cache1.1"
    start = 0
    if data.startswith(old_magic):
        (nlibs,) = struct.unpack_from("<I", data, 12)
        start = (16 + nlibs * 12 + 7) & ~7
    if data[start : start + len(new_magic)] != new_magic:
        return {}
    nlibs, _ = struct.unpack_from("<II", data, start + 20)
    out: dict[str, list[str]] = {}

    def text(offset: int) -> str:
        pos = start + offset
        stop = data.find(b"\0", pos)
        return data[pos:stop].decode("utf-8", "replace") if 0 <= pos < len(data) and stop >= 0 else ""

    for i in range(nlibs):
        entry = start + 48 + i * 24
        if entry + 24 > len(data):
            break
        _, key, value = struct.unpack_from("<iII", data, entry)
        name, where = text(key), text(value)
        if name and where:
            out.setdefault(name, []).append(where)
    return out


@dataclass
class Distribution:
    name: str
    version: str

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"


NO_DIST = Distribution("(no distribution)", "(file in no RECORD)")


def dist_metadata(dist_info: Path) -> tuple[str, str]:
    """Name and Version from a *.dist-info's METADATA headers ("" for each one absent, or no file)."""
    name = version = ""
    metadata = dist_info / "METADATA"
    if not metadata.is_file():
        return name, version
    for line in metadata.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            break
        if line.startswith("Name:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:"):
            version = line.split(":", 1)[1].strip()
    return name, version


def record_owners(site: Path) -> dict[str, Distribution]:
    """Path relative to `site` (normalised) -> the distribution whose RECORD lists it."""
    owners: dict[str, Distribution] = {}
    for dist_info in sorted(site.glob("*.dist-info")):
        dir_name, _, dir_version = dist_info.name[: -len(".dist-info")].partition("-")
        name, version = dist_metadata(dist_info)
        name, version = name or dir_name, version or dir_version
        record = dist_info / "RECORD"
        if not record.is_file():
            continue
        dist = Distribution(name, version)
        for line in record.read_text(encoding="utf-8", errors="replace").splitlines():
            rel = line.rsplit(",", 2)[0].strip('"') if line.strip() else ""
            if rel:
                owners[os.path.normpath(rel)] = dist
    return owners


@dataclass
class Unmet:
    """One object of the venv that cannot load, and why."""

    distribution: str
    version: str
    object: str  # relative to site-packages
    needed: str
    reason: str
    allowed: Optional[str] = None  # the allowlist's reason
    allowed_by: Optional[str] = None  # the allowlist's key

    def message(self) -> str:
        return f"{self.distribution} {self.version}: {self.object} needs {self.needed}, {self.reason}"


@dataclass
class Closure:
    """What the scan found: the objects read, those that cannot load (failing or allowlisted), and what was searched."""

    sites: list[str]
    objects: int
    unmet: list[Unmet] = field(default_factory=list)
    allowed: list[Unmet] = field(default_factory=list)
    other_abi: list[str] = field(default_factory=list)  # ELF files ld.so would never load here (GPU cubins, other machines)
    allowlist_unused: list[str] = field(default_factory=list)
    host_dirs: list[str] = field(default_factory=list)
    ld_cache_entries: int = 0

    def summary(self) -> dict[str, object]:
        return {
            "site_packages": self.sites,
            "objects_checked": self.objects,
            "host_dirs": self.host_dirs,
            "ld_cache_entries": self.ld_cache_entries,
            "unmet": [u.message() for u in self.unmet],
            "allowed": [f"{u.message()} (allowed: {u.allowed})" for u in self.allowed],
            "allowlist_unused": self.allowlist_unused,
            "other_abi_files": len(self.other_abi),
        }

    def failure(self) -> Optional[str]:
        """None when everything loads (or is allowlisted), else one message naming each package, object and library."""
        if not self.unmet:
            return None
        return (
            f"{len({u.distribution for u in self.unmet})} package(s) of the venv ({', '.join(self.sites)}) install libraries "
            f"that cannot load on this host: {describe(self.unmet)}. Expected every needed library to be found; build the "
            f"package against the release's CUDA or leave it out, or, where SGLang does not need it, put it with the reason "
            f"in {ALLOWLIST_VARIABLE}"
        )


def describe(unmet: Sequence[Unmet], objects_per_package: int = 3) -> str:
    """'torchvision 0.24.1: torchvision/_C.so needs libcudart.so.12, which nothing on this host provides (searched: ...) | ...',
    the needs of one object that fail for the same reason said once."""
    by_dist: dict[str, dict[str, dict[str, list[str]]]] = {}
    for u in unmet:
        reasons = by_dist.setdefault(f"{u.distribution} {u.version}", {}).setdefault(u.object, {})
        reasons.setdefault(u.reason, []).append(u.needed)
    parts = []
    for label, objects in by_dist.items():
        said = []
        for obj, reasons in list(objects.items())[:objects_per_package]:
            said.append("; ".join(f"{obj} needs {', '.join(needs)}, {reason}" for reason, needs in reasons.items()))
        more = f" (and {len(objects) - objects_per_package} more of its objects)" if len(objects) > objects_per_package else ""
        parts.append(f"{label}: " + "; ".join(said) + more)
    return " | ".join(parts)


def _default_machine() -> Optional[tuple[int, int, int]]:
    """The ABI (class, byte order, machine) of the Python running this, which is the host's."""
    for candidate in ("/proc/self/exe", os.path.realpath(sys.executable)):
        try:
            info = read_elf(Path(candidate))
        except OSError:
            continue
        if info is not None:
            return info.abi
    return None


class _Loader:
    """ld.so's search, simulated for one object loaded by Python (dlopen with its path) and everything it pulls in."""

    def __init__(
        self,
        venv_objects: Mapping[str, ElfInfo],
        shared: Sequence[str],
        shared_label: str,
        host_dirs: Sequence[str],
        ld_cache: Mapping[str, Sequence[str]],
        default_dirs: Sequence[str],
        always_present: Iterable[str],
    ) -> None:
        self.venv = venv_objects
        self.host_dirs = list(host_dirs)
        self.ld_cache = ld_cache
        self.default_dirs = list(default_dirs)
        self.always = set(always_present)
        self.shared_label = shared_label
        self.shared: dict[str, list[str]] = {}  # name or SONAME -> library of the venv's shared dirs
        for path in shared:
            for name in {os.path.basename(path), venv_objects[path].soname}:
                if name:
                    self.shared.setdefault(name, []).append(path)
        self.shared_count = len(shared)
        self.anywhere: dict[str, list[str]] = {}  # file name -> ELF files of the venv so named (for the message only)
        for path in venv_objects:
            self.anywhere.setdefault(os.path.basename(path), []).append(path)
        self.host_info: dict[str, Optional[ElfInfo]] = {}
        self.results: dict[str, list[tuple[str, str, str]]] = {}
        self.reached: set[str] = set()  # venv objects some other venv object loads as a dependency

    def info(self, path: str) -> Optional[ElfInfo]:
        if path in self.venv:
            return self.venv[path]
        if path not in self.host_info:
            try:
                self.host_info[path] = read_elf(Path(path)) if os.path.isfile(path) else None
            except OSError:
                self.host_info[path] = None
        return self.host_info[path]

    def _preloaded(self, needed: str) -> bool:
        """A library of the venv's shared dirs with this name that itself loads (Python has it loaded already)."""
        return any(not self.load(path) for path in self.shared.get(needed, []))

    def load(self, root: str) -> list[tuple[str, str, str]]:
        """(object, needed, why) for each library that cannot be had while loading `root`; [] when it loads."""
        if root in self.results:
            return self.results[root]
        self.results[root] = []  # in progress (libraries that need each other): taken as loading
        loaded: dict[str, str] = {}  # name or SONAME -> path, as ld.so matches already loaded objects
        parent: dict[str, Optional[str]] = {root: None}
        queue = [root]
        failed: list[tuple[str, str, str]] = []
        while queue:
            obj = queue.pop(0)
            info = self.info(obj)
            if info is None:
                continue
            for name in {os.path.basename(obj), info.soname}:
                if name:
                    loaded.setdefault(name, obj)
            for needed in info.needed:
                if needed in self.always or needed in loaded or self._preloaded(needed):
                    continue
                found, why = self.search(obj, info, needed, parent)
                if found is None:
                    failed.append((obj, needed, why))
                    continue
                loaded[needed] = found
                if found not in parent:
                    parent[found] = obj
                    queue.append(found)
                    if found in self.venv and found != root:
                        self.reached.add(found)
        self.results[root] = failed
        return failed

    def _rpath_chain(self, obj: str, info: ElfInfo, parent: Mapping[str, Optional[str]]) -> list[Optional[str]]:
        """DT_RPATH of the object, then of the objects that loaded it, up to the root (ld.so ignores it all for an object with
        DT_RUNPATH; a loader with DT_RUNPATH adds nothing)."""
        if info.runpath:
            return []
        dirs: list[Optional[str]] = []
        current: Optional[str] = obj
        while current is not None:
            current_info = self.info(current)
            if current_info is not None and not current_info.runpath:
                dirs += [expand_origin(d, os.path.dirname(current)) for d in current_info.rpath]
            current = parent.get(current)
        return dirs

    def search(self, obj: str, info: ElfInfo, needed: str, parent: Mapping[str, Optional[str]]) -> tuple[Optional[str], str]:
        """(the file ld.so would load for `needed` of `obj`, '') or (None, why not, with what was searched)."""
        abi = info.abi
        if "/" in needed:
            path = needed if needed.startswith("/") else os.path.join(os.getcwd(), needed)
            candidate = self.info(path)
            if candidate is not None and candidate.abi == abi:
                return path, ""
            return None, f"which does not exist as an ELF file of this machine at {path}"
        searched: list[str] = []

        def in_dirs(label: str, dirs: Sequence[Optional[str]]) -> Optional[str]:
            real = list(dict.fromkeys(d for d in dirs if d))
            if not real:
                return None
            searched.append(f"{label} {':'.join(real)}")
            for directory in real:
                candidate = self.info(os.path.join(directory, needed))
                if candidate is not None and candidate.abi == abi:
                    return os.path.join(directory, needed)
            return None

        runpath = [expand_origin(d, os.path.dirname(obj)) for d in info.runpath]
        found = (
            in_dirs("its RPATH (and its loaders')", self._rpath_chain(obj, info, parent))
            or in_dirs("the host's library dirs", self.host_dirs)
            or in_dirs("its RUNPATH", runpath)
        )
        if found:
            return found, ""
        searched.append(f"the venv's {self.shared_label} ({self.shared_count} libraries, by name and SONAME)")
        for candidate in self.ld_cache.get(needed, []):
            candidate_info = self.info(candidate)
            if candidate_info is not None and candidate_info.abi == abi:
                return candidate, ""
        searched.append(f"the ld.so.cache ({len(self.ld_cache)} names)")
        found = in_dirs("the default dirs", self.default_dirs)
        if found:
            return found, ""
        always = "glibc, the NVIDIA driver's libraries"
        elsewhere = [p for p in self.anywhere.get(needed, []) if p != obj]
        if elsewhere:
            return None, (
                f"which the venv has ({elsewhere[0]}) but nowhere ld.so searches for this object (it loads only if Python has "
                f"loaded that file first; searched: {'; '.join(searched)})"
            )
        return None, f"which nothing on this host provides (searched: {'; '.join(searched)}; always present: {always})"


def scan_venv(
    sites: Sequence[Path],
    host_dirs: Sequence[str] = (),
    allowlist: Optional[Mapping[str, str]] = None,
    always_present: Iterable[str] = ALWAYS_PRESENT,
    default_dirs: Sequence[str] = DEFAULT_DIRS,
    ld_cache: Optional[Mapping[str, Sequence[str]]] = None,
    abi: Optional[tuple[int, int, int]] = None,
    venv_library_dirs: Sequence[str] = VENV_LIBRARY_DIRS,
    provider_sites: Sequence[Path] = (),
) -> Closure:
    """Read every ELF file under `sites` and resolve what each needs; see the module's docstring.

    `ld_cache` None reads /etc/ld.so.cache; `abi` None takes the running Python's (the host's).
    `provider_sites`: import directories the venv adds through its .pth files (pth_dirs), e.g. a
    shared runtime with torch: the libraries of their `venv_library_dirs` count as loaded, as the
    venv's own do; nothing else of them is checked (they are not the release's)."""
    allowlist = dict(allowlist or {})
    bad = [name for name, reason in allowlist.items() if not isinstance(reason, str) or not reason.strip()]
    if bad:
        raise ClosureError(
            f"{ALLOWLIST_VARIABLE}: expected a reason (a non-empty string) for each package, found none for {', '.join(sorted(bad))}"
        )
    cache = read_ld_cache() if ld_cache is None else ld_cache
    abi = abi or _default_machine()
    objects: dict[str, ElfInfo] = {}
    other_abi: list[str] = []
    owners: dict[str, tuple[str, Distribution]] = {}  # absolute path -> (relative path, distribution)
    site_list = [Path(s) for s in dict.fromkeys(os.path.abspath(s) for s in sites)]  # $ORIGIN is absolute
    for site in site_list:
        records = record_owners(site)
        for root, dirs, files in os.walk(site):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                if os.path.islink(path) or not is_elf(Path(path)):
                    continue
                info = read_elf(Path(path))
                rel = os.path.relpath(path, site)
                if info is None or info.kind not in (ET_EXEC, ET_DYN):
                    continue
                if abi is not None and info.abi != abi:
                    other_abi.append(rel)
                    continue
                objects[path] = info
                owners[path] = (rel, records.get(os.path.normpath(rel), NO_DIST))
    providers: set[str] = set()
    for site in [Path(os.path.abspath(s)) for s in provider_sites]:
        for root, dirs, files in os.walk(site):
            dirs.sort()
            rel_root = os.path.relpath(root, site)
            if not any(fnmatch.fnmatchcase(rel_root, g) for g in venv_library_dirs):
                continue
            for name in sorted(files):
                path = os.path.join(root, name)
                info = None if os.path.islink(path) or not is_elf(Path(path)) else read_elf(Path(path))
                if info is None or info.kind != ET_DYN or (abi is not None and info.abi != abi) or path in objects:
                    continue
                objects[path] = info
                owners[path] = (os.path.relpath(path, site), NO_DIST)
                providers.add(path)
    shared = [p for p, (rel, _) in owners.items() if any(fnmatch.fnmatchcase(os.path.dirname(rel), g) for g in venv_library_dirs)]
    loader = _Loader(objects, shared, ", ".join(venv_library_dirs), host_dirs, cache, default_dirs, always_present)
    for path in objects:
        loader.load(path)
    closure = Closure(
        sites=[str(s) for s in site_list],
        objects=len(objects),
        other_abi=other_abi,
        host_dirs=list(host_dirs),
        ld_cache_entries=len(cache),
    )
    for path in objects:
        if path in loader.reached or path in providers:
            continue  # checked as the dependency it is, in the load of the object that needs it (or not the release's)
        rel, dist = owners[path]
        for obj, needed, why in loader.load(path):
            if obj != path:
                needed = f"{needed} (for {_display(obj, owners)}, which it loads)"
            unmet = Unmet(dist.name, dist.version, rel, needed, why)
            unmet.allowed_by = allowed_by(allowlist, dist.name, rel)
            if unmet.allowed_by is None:
                closure.unmet.append(unmet)
            else:
                unmet.allowed = allowlist[unmet.allowed_by]
                closure.allowed.append(unmet)
    _variants_that_load(closure, owners)
    used = {u.allowed_by for u in closure.allowed}
    closure.allowlist_unused = sorted(key for key in allowlist if key not in used)
    return closure


def _variants_that_load(closure: Closure, owners: Mapping[str, tuple[str, Distribution]]) -> None:
    """Move to ``allowed`` the failures of objects that are other CUDA variants of one that loads:
    in a directory holding ``<stem>_cu<N><rest>`` objects (and perhaps ``<stem><rest>``), the
    package loads the variant of the host's CUDA; only when none of them loads is that a failure."""
    families: dict[tuple[str, str, str], list[str]] = {}
    for rel, _ in owners.values():
        match = CUDA_VARIANT.match(os.path.basename(rel))
        if match:
            families.setdefault((os.path.dirname(rel), match.group("stem"), match.group("rest")), []).append(rel)
    if not families:
        return
    for (folder, stem, rest), members in list(families.items()):
        plain = os.path.join(folder, stem + rest)
        if any(rel == plain for rel, _ in owners.values()):
            members.append(plain)
    failing = {u.object for u in closure.unmet}
    keep: list[Unmet] = []
    for unmet in closure.unmet:
        family = next((m for m in families.values() if unmet.object in m), None)
        loading = sorted(m for m in family or [] if m not in failing)
        if not loading:
            keep.append(unmet)
            continue
        unmet.allowed_by = "(CUDA variant)"
        unmet.allowed = f"another CUDA build of an object the package picks at import; {loading[0]} loads on this host"
        closure.allowed.append(unmet)
    closure.unmet = keep


def pth_dirs(sites: Sequence[Path]) -> list[Path]:
    """The directories the sites' .pth files add to sys.path, as Python's site module reads them: each
    line an existing directory (relative lines from the site), "import" lines and comments skipped."""
    found: list[Path] = []
    for site in sites:
        for pth in sorted(Path(site).glob("*.pth")):
            try:
                lines = pth.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue
            for line in lines:
                text = line.strip()
                if not text or text.startswith("#") or text.startswith(("import ", "import\t")):
                    continue
                path = Path(site) / text if not os.path.isabs(text) else Path(text)
                if path.is_dir() and path not in found and path not in [Path(x) for x in sites]:
                    found.append(path)
    return found


def check_venv(sites: Sequence[Path], **kwargs: object) -> Closure:
    """scan_venv, raising ClosureError naming each package, object and library when something cannot load."""
    closure = scan_venv(sites, **kwargs)  # type: ignore[arg-type]
    message = closure.failure()
    if message:
        raise ClosureError(message)
    return closure


def allowed_by(allowlist: Mapping[str, str], distribution: str, rel: str) -> Optional[str]:
    """The allowlist key that covers `rel` of `distribution`: the distribution's name ('torchvision'),
    or its name and a glob of paths relative to site-packages ('nvidia-nvshmem-cu13:nvidia/nvshmem/lib/nvshmem_transport_*')."""
    for key in allowlist:
        name, _, pattern = key.partition(":")
        if _normalize(name) == _normalize(distribution) and (not pattern or fnmatch.fnmatchcase(rel, pattern)):
            return key
    return None


def _display(path: str, owners: Mapping[str, tuple[str, Distribution]]) -> str:
    return owners[path][0] if path in owners else path


def _normalize(name: str) -> str:
    return "-".join(part for part in name.lower().replace("_", "-").replace(".", "-").split("-") if part)
