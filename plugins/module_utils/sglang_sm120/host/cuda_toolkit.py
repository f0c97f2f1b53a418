"""Facts about a CUDA toolkit: what nvcc says, which release a tree is, what a repository offers.

Plain Python, no Ansible imports. Used by ``plugins/modules/cuda_toolkit_*.py`` and by the build
pipeline (``elf_needed``, ``cudart_major``). GPU code inside compiled objects is read by
``build_pipeline.gpu_code`` (suffix-exact: sm_120a is not sm_120).

* ``parse_nvcc_version`` reads ``nvcc --version``.
* ``elf_needed`` lists a shared object's DT_NEEDED libraries (which CUDA runtime it links),
  without ldd or readelf.
* ``installed_version`` reads a tree's ``version.json`` -- which NVIDIA's apt packages do NOT
  ship; ``identify_toolkit`` says which release a tree is from what it holds: its packages'
  versions (dpkg), the CUDA runtime's own version (``libcudart.so.13.0.NN``, or the
  ``nvidia_cuda_runtime-13.0.NN.dist-info`` of a wheels tree) and version.json when present.
* ``component_pins`` maps a release's components (NVIDIA's ``cuda-toolkit==X.Y.Z`` meta wheel
  pins them) to NVIDIA's Debian package names and versions; ``repository_problems`` says why
  a repository's package index cannot give exactly that release.
* ``openpgp_fingerprints`` reads the primary key fingerprints of an OpenPGP key (armored or
  binary), so a repository key is checked against the fingerprint recorded for it;
  ``check_repository`` checks a repository's key and index before anything changes.
* ``probe_key`` / ``read_probe`` / ``write_probe``: a probe kernel compiled for an SM is recorded
  with the key of what decides it (nvcc's version text, the compiler binaries' size, mtime and
  inode, the target, the probe source), so a converge that changed nothing does not compile again.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import unquote, urlparse

from ..errors import ToolkitError

_NVCC = re.compile(r"release (\d+\.\d+), (V[\d.]+)")


class CudaToolkitError(ToolkitError):
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


# ----------------------------------------------------------------- which release a tree is

_CUDART_FILE = re.compile(r"libcudart\.so\.(\d+\.\d+\.\d+)$")
_RUNTIME_DIST = re.compile(r"nvidia_cuda_runtime-(\d+\.\d+\.\d+)(?:\.\d+)*\.dist-info$")
RUNTIME_COMPONENT = "nvidia-cuda-runtime"


def runtime_from_name(name: str) -> str | None:
    """'libcudart.so.13.0.88' or 'nvidia_cuda_runtime-13.0.88.dist-info' -> '13.0.88'."""
    base = os.path.basename(name.rstrip("/"))
    match = _CUDART_FILE.search(base) or _RUNTIME_DIST.fullmatch(base)
    return match.group(1) if match else None


def runtime_version(root: str) -> tuple[str | None, str]:
    """The CUDA runtime version of the tree at ``root`` and where it was read.

    NVIDIA's packages install ``lib64/libcudart.so.13 -> libcudart.so.13.0.88`` (through
    targets/<arch>/lib); a wheels tree has ``lib/libcudart.so.13`` only, its version is in the
    ``nvidia_cuda_runtime-*.dist-info`` beside the tree's site directory."""
    real = os.path.realpath(root)
    for lib in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
        directory = os.path.join(real, lib)
        if not os.path.isdir(directory):
            continue
        for name in sorted(os.listdir(directory)):
            if not re.fullmatch(r"libcudart\.so\.\d+", name):
                continue
            path = os.path.join(directory, name)
            found = runtime_from_name(os.path.realpath(path))
            if found:
                return found, f"{path} -> {os.path.basename(os.path.realpath(path))}"
        for name in sorted(os.listdir(directory)):
            found = runtime_from_name(name)
            if found:
                return found, os.path.join(directory, name)
    for site in (os.path.join(os.path.dirname(real), "site"), os.path.join(real, "site")):
        if os.path.isdir(site):
            for name in sorted(os.listdir(site)):
                found = runtime_from_name(name)
                if found:
                    return found, os.path.join(site, name)
    return None, "no libcudart.so.X.Y.Z and no nvidia_cuda_runtime dist-info"


def dpkg_installed(run: Callable[..., Any], dpkg_query: Optional[str], names: Sequence[str]) -> dict[str, str]:
    """name -> version of the given packages dpkg has installed ({} without dpkg or names). ``run``: a
    command runner returning (rc, stdout, stderr), e.g. an Ansible module's run_command."""
    if not dpkg_query or not names:
        return {}
    _, out, _ = run([dpkg_query, "-W", "-f", "${Package} ${db:Status-Status} ${Version}\n", *names])
    return parse_dpkg_query(out)


def parse_dpkg_query(text: str) -> dict[str, str]:
    """Installed packages from ``dpkg-query -W -f '${Package} ${db:Status-Status} ${Version}\\n'``."""
    installed = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "installed":
            installed[parts[0]] = parts[2]
    return installed


def upstream(version: str) -> str:
    """Debian version -> upstream version: '13.0.88-1' -> '13.0.88', '1:2.3-4' -> '2.3'."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


@dataclass(frozen=True)
class Identity:
    """Which release a toolkit tree is, and on what evidence; ``release`` is None when unknown."""

    release: str | None
    runtime: str | None
    evidence: list[str]
    problems: list[str]

    def describe(self) -> str:
        what = f"CUDA {self.release}" if self.release else "a CUDA toolkit of unknown release"
        return f"{what} ({'; '.join(self.evidence + self.problems) or 'no evidence'})"


def identify_toolkit(
    root: str,
    runtime_releases: dict[str, str],
    installed: dict[str, str] | None = None,
    meta_package: str = "",
    runtime_packages: tuple[str, ...] = (),
) -> Identity | None:
    """What the tree at ``root`` is, or None when nothing is there.

    ``runtime_releases`` maps a runtime version to its release ({'13.0.88': '13.0.1',
    '13.0.96': '13.0.2'}, NVIDIA's meta wheels). Every source that says something must agree:
    version.json (when present), the runtime's version (file name or dist-info), the runtime
    package's and the meta package's dpkg versions (when installed). A disagreement or a runtime
    no table knows leaves the release unknown."""
    installed = installed or {}
    if not os.path.lexists(root):
        return None
    evidence: list[str] = []
    problems: list[str] = []
    claims: set[str] = set()
    recorded = installed_version(root) if os.path.exists(root) else None
    if recorded:
        evidence.append(f"version.json says {recorded}")
        claims.add(recorded)
    runtime, where = runtime_version(root) if os.path.exists(root) else (None, "dangling link")
    for name in runtime_packages:
        if name in installed:
            evidence.append(f"{name} {installed[name]} installed")
            if runtime is None:
                runtime, where = upstream(installed[name]), f"the version of {name}"
            elif runtime != upstream(installed[name]):
                problems.append(f"but {where} says runtime {runtime}")
    if runtime:
        release = runtime_releases.get(runtime)
        evidence.append(f"runtime {runtime} ({where})" + (f", which is {release}'s" if release else ""))
        if release:
            claims.add(release)
        elif runtime_releases:
            known = ", ".join(f"{rel}: {run}" for run, rel in sorted(runtime_releases.items()))
            problems.append(f"runtime {runtime} is no release this toolkit knows ({known})")
    elif runtime_releases or not claims:
        problems.append(f"runtime version unknown: {where}")
    if meta_package and meta_package in installed:
        meta = upstream(installed[meta_package])
        evidence.append(f"{meta_package} {installed[meta_package]} installed")
        claims.add(meta)
    if len(claims) > 1:
        problems.append(f"the sources disagree ({', '.join(sorted(claims))})")
    release = claims.pop() if len(claims) == 1 and not problems else None
    return Identity(release, runtime, evidence, problems)


# ------------------------------------------------------------- pins and the repository


def parse_requires_dist(metadata: str, extra: str = "all") -> dict[str, str]:
    """Component pins of NVIDIA's ``cuda-toolkit`` meta wheel METADATA for one extra:
    'Requires-Dist: nvidia-cuda-runtime==13.0.88.*; ... extra == 'all'' -> {'nvidia-cuda-runtime': '13.0.88'}."""
    pins = {}
    for line in metadata.splitlines():
        match = re.match(r"Requires-Dist:\s*([A-Za-z0-9_.-]+)\s*==\s*([0-9][0-9.]*?)(?:\.\*)?\s*;(.*)$", line)
        if match and re.search(rf"extra\s*==\s*['\"]{re.escape(extra)}['\"]", match.group(3)):
            pins[match.group(1).lower()] = match.group(2)
    return pins


def debian_series(version: str) -> str:
    """'13.0.1' -> '13-0' (the suffix of NVIDIA's versioned package names)."""
    return version_series(version).replace(".", "-")


def component_pins(
    version: str,
    components: dict[str, str],
    packages: dict[str, list[str]],
    meta_packages: list[str],
    revision: str = "1",
) -> dict[str, str]:
    """Debian package -> exact version for release ``version``.

    ``components`` are the meta wheel's pins (wheel name -> version), ``packages`` NVIDIA's
    Debian names for each wheel ('{series}' is '13-0'), ``meta_packages`` the packages that
    carry the release itself (cuda-toolkit-{series} 13.0.1-1)."""
    series = debian_series(version)
    unknown = sorted(set(components) - set(packages))
    if unknown:
        raise CudaToolkitError(f"no Debian package names recorded for the components {', '.join(unknown)}")
    pins = {meta.format(series=series): f"{version}-{revision}" for meta in meta_packages}
    for wheel, component_version in sorted(components.items()):
        if not re.fullmatch(r"\d+(\.\d+)+", str(component_version)):
            raise CudaToolkitError(f"component {wheel}: expected a version like 13.0.88, found {component_version!r}")
        for name in packages[wheel]:
            pins[name.format(series=series)] = f"{component_version}-{revision}"
    return dict(sorted(pins.items()))


def parse_packages_index(text: str) -> dict[str, list[str]]:
    """A Debian ``Packages`` index -> package name -> versions offered (index order)."""
    offered: dict[str, list[str]] = {}
    for stanza in re.split(r"\n\s*\n", text):
        fields = dict(re.findall(r"^(Package|Version):\s*(\S+)", stanza, re.MULTILINE))
        if "Package" in fields and "Version" in fields:
            offered.setdefault(fields["Package"], []).append(fields["Version"])
    return offered


def read_packages_index(data: bytes) -> dict[str, list[str]]:
    """``Packages`` or ``Packages.gz`` bytes -> parse_packages_index."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return parse_packages_index(data.decode("utf-8", "replace"))


def _version_key(version: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", version)]


def repository_problems(url: str, version: str, pins: dict[str, str], offered: dict[str, list[str]], required: list[str]) -> str | None:
    """Why ``url`` cannot give exactly CUDA ``version``, or None when it can.

    Every package in ``required`` must be offered at its pinned version; every other pinned
    package the repository carries must be offered at its pinned version too (one it does not
    carry at all is not needed by this repository's meta packages)."""
    missing = []
    for name, wanted in pins.items():
        have = offered.get(name)
        if have is None and name not in required:
            continue
        if not have or wanted not in have:
            has = ", ".join(sorted(set(have or []), key=_version_key)) or "none"
            missing.append(f"{name} {wanted} (it has {has})")
    if not missing:
        return None
    return (
        f"the repository {url} does not offer CUDA {version} as NVIDIA released it: missing "
        + "; ".join(missing)
        + ". Nothing was changed. Use a repository that carries it (another distribution's, or"
        " NVIDIA's local installer with cuda_toolkit_install_method: local_repo) or the wheels method."
    )


# ------------------------------------------------------------------- repository keys


def _unarmor(data: bytes) -> bytes:
    text = data.decode("ascii", "replace")
    if "-----BEGIN PGP" not in text:
        return data
    body = text.split("-----BEGIN PGP", 1)[1].split("\n", 1)[1]
    body = body.split("-----END PGP", 1)[0]
    # headers end at the first blank line; the checksum line starts with '='
    if re.search(r"^\s*$", body, re.MULTILINE) and re.match(r"^[A-Za-z-]+: ", body):
        body = re.split(r"\n\s*\n", body, maxsplit=1)[1]
    lines = [line.strip() for line in body.splitlines() if line.strip() and not line.strip().startswith("=")]
    return base64.b64decode("".join(lines))


def openpgp_fingerprints(data: bytes) -> list[str]:
    """Fingerprints (upper-case hex) of the primary keys in an OpenPGP public key, armored or binary.

    v4 keys: SHA-1 over 0x99, the 2-byte body length and the public-key packet body (RFC 4880
    12.2); v6 keys: SHA-256 over 0x9B, a 4-byte length and the body (RFC 9580)."""
    raw, pos, found = _unarmor(data), 0, []
    while pos < len(raw):
        head = raw[pos]
        if not head & 0x80:
            raise CudaToolkitError(f"not an OpenPGP key: bad packet header at byte {pos}")
        if head & 0x40:  # new format
            tag, pos = head & 0x3F, pos + 1
            first = raw[pos]
            if first < 192:
                length, pos = first, pos + 1
            elif first < 224:
                length, pos = ((first - 192) << 8) + raw[pos + 1] + 192, pos + 2
            elif first == 255:
                length, pos = struct.unpack_from(">I", raw, pos + 1)[0], pos + 5
            else:
                raise CudaToolkitError("partial-length packets are not keys")
        else:  # old format
            tag, kind, pos = (head >> 2) & 0x0F, head & 0x03, pos + 1
            size = {0: 1, 1: 2, 2: 4}.get(kind)
            if size is None:
                raise CudaToolkitError("indeterminate-length packets are not keys")
            length = int.from_bytes(raw[pos : pos + size], "big")
            pos += size
        body = raw[pos : pos + length]
        pos += length
        if tag == 6 and body:
            if body[0] == 4:
                found.append(hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper())
            elif body[0] == 6:
                found.append(hashlib.sha256(b"\x9b" + len(body).to_bytes(4, "big") + body).hexdigest().upper())
    if not found:
        raise CudaToolkitError("no OpenPGP public key found")
    return found


def check_repository(
    fetch: Callable[[str], Optional[bytes]],
    url: str,
    version: str,
    pins: Mapping[str, Any],
    required: Sequence[str],
    key: Optional[str] = None,
    fingerprints: Sequence[str] = (),
) -> dict[str, Any]:
    """Check the flat apt repository at ``url`` before anything is changed: with ``key`` (URL, host
    path or armored text) and ``fingerprints``, that one of the key's primary keys has one of them;
    then that its package index offers CUDA ``version`` exactly (``repository_problems``).
    ``fetch(url)``: the bytes at an http(s) URL, None when nothing is there (file: URLs and host
    paths are read here).

    Returns ``offered`` (pinned package -> versions offered) and, when the key was checked,
    ``key_fingerprints``. Raises CudaToolkitError saying nothing was changed; the refusal of the
    index returns those fields (and ``changed=False``) too."""
    url = url if url.endswith("/") else url + "/"
    result: dict[str, Any] = {}

    def fetched(location: str) -> Optional[bytes]:
        parsed = urlparse(location)
        if parsed.scheme not in ("", "file"):
            return fetch(location)
        try:
            with open(unquote(parsed.path), "rb") as handle:
                return handle.read()
        except OSError:
            return None

    if key and fingerprints:
        data = key.encode() if "BEGIN PGP" in key else fetched(key if "://" in key or key.startswith("file:") else "file://" + key)
        if data is None:
            raise CudaToolkitError(f"cannot read the repository key {key}; nothing was changed")
        try:
            found = openpgp_fingerprints(data)
        except CudaToolkitError as exc:
            raise CudaToolkitError(f"the repository key {key}: {exc}; nothing was changed") from exc
        allowed = {f.replace(" ", "").upper() for f in fingerprints}
        if not allowed & set(found):
            raise CudaToolkitError(
                f"the repository key {key} has fingerprint {', '.join(found)}, expected {', '.join(sorted(allowed))} "
                "(cuda_toolkit_apt_key_fingerprints); nothing was changed"
            )
        result["key_fingerprints"] = found
    data = fetched(url + "Packages.gz") or fetched(url + "Packages")
    if data is None:
        raise CudaToolkitError(f"the repository {url} has no Packages.gz or Packages index (is the URL right?); nothing was changed")
    try:
        offered = read_packages_index(data)
    except (OSError, EOFError, ValueError) as exc:
        raise CudaToolkitError(f"the repository {url}: cannot read its package index ({exc}); nothing was changed") from exc
    wanted = {str(k): str(v) for k, v in pins.items()}
    problem = repository_problems(url, version, wanted, offered, list(required))
    result["offered"] = {name: offered[name] for name in wanted if name in offered}
    if problem:
        raise CudaToolkitError(problem, changed=False, **result)
    return result


# What nvcc runs to turn a .cu into an object with machine code: a change of any of them changes the outcome.
COMPILER_PARTS = ("bin/nvcc", "bin/ptxas", "bin/fatbinary", "bin/nvlink", "nvvm/bin/cicc", "bin/cudafe++")


def probe_key(cuda_home: str, code: str, nvcc_version: str, probe_source: str) -> str:
    """Key of a probe compile: the target, the probe, what nvcc says it is, and each compiler part's stat."""
    parts = []
    for rel in COMPILER_PARTS:
        try:
            st = os.stat(os.path.join(cuda_home, rel))
            parts.append([rel, st.st_size, st.st_mtime_ns, st.st_ino])
        except OSError:
            parts.append([rel, None])
    blob = json.dumps({"home": os.path.realpath(cuda_home), "code": code, "nvcc": nvcc_version, "probe": probe_source, "parts": parts})
    return hashlib.sha256(blob.encode()).hexdigest()


def read_probe(stamp: str, key: str) -> list[str] | None:
    """The GPU targets recorded for ``key`` by an earlier successful probe, or None."""
    try:
        with open(stamp, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("targets"), list):
        return None
    return [str(t) for t in data["targets"]]


def write_probe(stamp: str, key: str, targets: list[str]) -> None:
    """Record a successful probe atomically; a failure to write only costs the next compile."""
    try:
        os.makedirs(os.path.dirname(stamp) or ".", mode=0o755, exist_ok=True)
        tmp = f"{stamp}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump({"key": key, "targets": targets}, handle)
        os.replace(tmp, stamp)
    except OSError:
        pass
