"""Canonical digests: the same content always hashes the same, in any process."""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
from pathlib import Path
from typing import Any, Final

import msgspec

# What a build is: the package's source and data, never caches, tests or environments.
_BUILD_SUFFIXES = (".py", ".toml", ".json", ".jsonl", ".typed", ".md", ".sh", ".yml", ".ini",
                   ".lock")
# What Python imports besides a source file, and in its place: an extension module
# (``x.cpython-311-x86_64-linux-gnu.so`` is imported before ``x.py``: a leftover mypyc or
# Cython build, or a planted one, would otherwise run under the source's digest) or a
# bytecode file outside ``__pycache__`` (imported where no source is). Part of the build
# wherever it lies, the package's top level included.
_IMPORTABLE_SUFFIXES = (*importlib.machinery.EXTENSION_SUFFIXES,
                        *importlib.machinery.BYTECODE_SUFFIXES)
_BUILD_PACKAGES = (
    "controller", "worker", "protocol", "ipc", "guard", "registry", "corpus", "folds", "report",
    "boundary", "certify",
)


def canonical_json(value: Any) -> bytes:
    """Sorted-key compact JSON: the bytes that every digest of structured data covers."""
    return msgspec.json.encode(value, order="sorted")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# Not ``hashlib.file_digest``: its 256 KiB buffer is a fresh mapping at every call, and
# zeroing it costs 64 page faults, in a worker that hashes two files before it speaks
# (``worker.verify``) about 8% of all it faults. A chunk this size comes from the heap.
_FILE_CHUNK: Final = 64 * 1024


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes, read in chunks. OSError propagates to the caller."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(_FILE_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def digest_of(value: Any) -> str:
    return sha256_hex(canonical_json(value))


RUNTIME_DISTRIBUTIONS = (
    "anyio", "trio", "psutil", "msgspec", "cryptography", "click", "httpx", "rich",
)


def runtime_digest() -> str:
    """What the code runs on: interpreter, platform and the runtime dependencies'
    versions. An authorization binds it next to the source (``build_digest``)."""
    import platform
    import sys
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return digest_of({
        "python": sys.version, "implementation": sys.implementation.name,
        "machine": platform.machine(), "system": platform.system(),
        "distributions": {name: installed(name) for name in RUNTIME_DISTRIBUTIONS},
    })


def package_root() -> Path:
    import efold

    return Path(efold.__file__).resolve().parent


# Invariant: set at most once per process, by a fork-server template right after it has
# imported the code its workers run (``pin_running_build``); None everywhere else.
_pinned_build: str | None = None


def pin_running_build() -> str:
    """Pin the build digest of the code this process has loaded: a fork-server template
    calls it after its imports, so each worker it forks checks the code it actually
    runs (loaded then), without hashing every file again (~50 ms a worker)."""
    global _pinned_build
    if _pinned_build is None:
        _pinned_build = build_digest()
    return _pinned_build


def running_build_digest() -> str:
    """The build digest of the code this process runs: pinned by a template that forked
    it, else computed now from the installed files (a spawned child, which has just
    loaded them)."""
    return _pinned_build if _pinned_build is not None else build_digest()


def _suffix(name: str) -> str:
    """``PurePath(name).suffix``: from the last dot, unless the name starts or ends there
    (``..py`` has one, ``.py`` has none)."""
    i = name.rfind(".")
    return name[i:] if 0 < i < len(name) - 1 else ""


def build_digest(root: Path | None = None) -> str:
    """sha256 over (relative path, sha256 of bytes) of every shipped source/data file.

    Binds a registration to the exact code that runs it: an edited module is a new build.
    """
    base = str(root or package_root())
    # Plain strings, not ``Path``: the tree has hundreds of files, and a controller and a
    # template each hash it before their first launch.
    found: list[tuple[str, str]] = []  # (relative path, path)
    with os.scandir(base) as top:
        found += [(e.name, e.path) for e in top if e.is_file() and (
            _suffix(e.name) in (".py", ".typed") or e.name.endswith(_IMPORTABLE_SUFFIXES))]
    for pkg in _BUILD_PACKAGES:
        pkg_dir = os.path.join(base, pkg)
        if os.path.isdir(pkg_dir):
            for dirpath, dirnames, filenames in os.walk(pkg_dir):
                dirnames[:] = [d for d in dirnames if d != "__pycache__"]
                rel_dir = dirpath[len(base) + 1:]  # os.walk joins onto base
                found += [(f"{rel_dir}/{f}", os.path.join(dirpath, f)) for f in filenames
                          if _suffix(f) in _BUILD_SUFFIXES or f == "py.typed"
                          or f.endswith(_IMPORTABLE_SUFFIXES)]
    entries: list[tuple[str, str]] = []
    for rel, path in found:
        with open(path, "rb") as f:
            entries.append((rel, sha256_hex(f.read())))
    entries.sort()
    return digest_of(entries)
