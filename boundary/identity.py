"""Environment identity: what a boundary case ran against (docs/boundary.md §3).

Recorded per case and run, so that two results are compared only when they saw the same
environment. Rules:

* **The fixture** (``fixture_identity``, from the case alone): the case id, version and
  directory digest, the tree digest of ``workspace/`` (``efold.boundary.case.tree_digest``,
  the function of the case digest), and the sha256 of every file an oracle names, keyed
  by its case-relative path (``workspace/<path>``, ``workspace.expected/<expected>``):
  a file's bytes, a directory's tree digest (``forbidden-path-unchanged`` may name one),
  ``absent`` when nothing is there.
* **The run** (``environment_identity``): the fixture, the digest of the tool catalog
  offered (canonical JSON of the tool schemas, in the order offered), the sha256 of the
  system prompt (UTF-8), and the model route when given (provider, model, API, effort;
  temperature and seed when the route sets one). A real run also records the Python
  version, efold's version (``importlib.metadata``), efold's build digest
  (``efold.digests.build_digest``, the one a registration freezes) and, when the case
  directory is inside a git repository, the commit it has checked out (``vcs_commit``:
  the session fixture's revision, the protocol's "DSH commit").
"""

from __future__ import annotations

import os
import platform
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from efold.boundary.case import EXPECTED_DIR, WORKSPACE_DIR, Case, tree_digest
from efold.boundary.errors import BoundaryError
from efold.boundary.oracles import (
    ArtifactExists,
    FileChanged,
    FileEquals,
    FileUnchanged,
    ForbiddenPathUnchanged,
)
from efold.digests import build_digest, digest_of, file_sha256, sha256_hex
from efold.errors import Code

ABSENT: Final = "absent"


class RouteIdentity(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The model route of a run: the fields that change what the agent does."""

    provider: str
    model: str
    api: str
    effort: str | None = None
    temperature: float | None = None  # only when the route sets one
    seed: int | None = None  # only when the route sets one


class FixtureIdentity(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the case itself fixes (the first rule of the module docstring)."""

    case_id: str
    case_version: int
    case_sha256: str
    workspace_sha256: str
    oracle_files: dict[str, str]  # case-relative path -> sha256, tree digest or "absent"


class EnvironmentIdentity(msgspec.Struct, frozen=True, forbid_unknown_fields=True,
                          omit_defaults=True):
    """What one run of a case ran against (the rules of the module docstring)."""

    fixture: FixtureIdentity
    tool_catalog_sha256: str
    system_prompt_sha256: str
    route: RouteIdentity | None = None
    python: str | None = None  # real runs only
    efold_version: str | None = None  # real runs only
    build_sha256: str | None = None  # real runs only
    case_commit: str | None = None  # real runs only, when the case is in a git repository


def _oracle_paths(case: Case) -> list[str]:
    """The case-relative paths every oracle names, sorted, each once."""
    paths: set[str] = set()
    for oracle in case.sidecar.oracle.success:
        if isinstance(oracle, (FileEquals, FileUnchanged, FileChanged, ForbiddenPathUnchanged,
                               ArtifactExists)):
            paths.add(f"{WORKSPACE_DIR}/{oracle.path}")
        if isinstance(oracle, FileEquals):
            paths.add(f"{EXPECTED_DIR}/{oracle.expected}")
    return sorted(paths)


def _path_digest(path: Path) -> str:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return ABSENT
    except OSError as exc:
        raise BoundaryError(Code.BOUNDARY_CASE_INVALID, f"{path}: {exc.strerror}") from exc
    if stat.S_ISDIR(mode):
        return tree_digest(path)
    if not stat.S_ISREG(mode):
        raise BoundaryError(Code.BOUNDARY_CASE_INVALID,
                            f"{path}: not a regular file or directory")
    try:
        return file_sha256(path)
    except OSError as exc:
        raise BoundaryError(Code.BOUNDARY_CASE_INVALID,
                            f"{path}: cannot read: {exc.strerror}") from exc


def fixture_identity(case: Case) -> FixtureIdentity:
    """The case's part of its environment identity."""
    return FixtureIdentity(
        case_id=case.id, case_version=case.version, case_sha256=case.sha256,
        workspace_sha256=tree_digest(case.workspace),
        oracle_files={rel: _path_digest(case.path / rel) for rel in _oracle_paths(case)})


def efold_version() -> str:
    # Imported here: importlib.metadata (and the email package under it) is ~25 ms of
    # every process's start that imports this module, the fork-server template's among
    # them, and only a real boundary slot's identity reads it.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("efold")
    except PackageNotFoundError:  # pragma: no cover - an uninstalled tree
        return "0.0.0"


def environment_identity(case: Case, *, tool_catalog: Sequence[Mapping[str, Any]],
                         system_prompt: str, route: RouteIdentity | None = None,
                         real: bool = False) -> EnvironmentIdentity:
    """The environment identity of one run of ``case`` (module docstring)."""
    return EnvironmentIdentity(
        fixture=fixture_identity(case),
        tool_catalog_sha256=digest_of(list(tool_catalog)),
        system_prompt_sha256=sha256_hex(system_prompt.encode("utf-8")),
        route=route,
        python=platform.python_version() if real else None,
        efold_version=efold_version() if real else None,
        build_sha256=build_digest() if real else None,
        case_commit=vcs_commit(case.path) if real else None,
    )


_COMMIT: Final = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")  # SHA-1 or SHA-256 object names


_PACKED_REFS_LIMIT: Final = 16 * 1024 * 1024  # HEAD, a ref or a pointer is one line


def _read(path: Path, limit: int = 4096) -> str | None:
    """A small regular file's text, or None: absent, not a regular file (a FIFO, a
    device, a link to one), larger than ``limit``, unreadable or not UTF-8. Read without
    blocking and bounded: a repository's files are the user's, not efold's."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        return os.read(fd, limit + 1)[:limit].decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def _kind(path: Path) -> int | None:
    """``path``'s file type (following links), or None when it cannot be seen."""
    try:
        return stat.S_IFMT(os.stat(path).st_mode)
    except OSError:
        return None


def vcs_commit(path: Path) -> str | None:
    """The commit the git repository holding ``path`` has checked out, read from the
    repository's own files (no ``git`` is run): its ``HEAD``, a branch ref, or the
    packed refs; a linked worktree's ``.git`` file is followed. None when ``path`` is in
    no repository, or its ``HEAD`` names nothing readable (an unborn branch, a file
    that is not a small regular one, a loop of links)."""
    try:
        return _checked_out(path.resolve())  # "a/../b" is b's repository, not a's
    except (OSError, RuntimeError):
        return None


def _checked_out(path: Path) -> str | None:
    for directory in (path, *path.parents):
        dot = directory / ".git"
        kind = _kind(dot)
        if kind == stat.S_IFDIR:
            gitdir = dot
        elif kind == stat.S_IFREG:
            pointer = _read(dot) or ""
            if not pointer.startswith("gitdir: "):
                return None
            gitdir = (directory / pointer.removeprefix("gitdir: ")).resolve()
        else:
            continue
        head = _read(gitdir / "HEAD") or ""
        if _COMMIT.fullmatch(head):
            return head  # a detached HEAD
        if not head.startswith("ref: "):
            return None
        ref = head.removeprefix("ref: ")
        common = gitdir
        if (shared := _read(gitdir / "commondir")) is not None:
            common = (gitdir / shared).resolve()
        for base in (gitdir, common):
            value = _read(base / ref)
            if value is not None and _COMMIT.fullmatch(value):
                return value
        for line in (_read(common / "packed-refs", _PACKED_REFS_LIMIT) or "").splitlines():
            sha, _, name = line.partition(" ")
            if name == ref and _COMMIT.fullmatch(sha):
                return sha
        return None
    return None


def identity_digest(identity: EnvironmentIdentity) -> str:
    """sha256 of the identity's canonical JSON: equal digests, same environment."""
    return digest_of(identity)
