"""``boundary.lock``: the committed revision of every case (docs/boundary.md §3).

The lock sits at the cases root: ``{"version": 1, "cases": {id: {"version": n,
"sha256": d}}}``, ``d`` the case directory's digest (``efold.boundary.case.case_digest``).

Rules:

* **Validation** (``lock_problems`` / ``check_lock``) refuses a case whose digest differs
  from its entry at the same version (``BOUNDARY_CASE_CHANGED``: editing an oracle, the
  session or the workspace without a new version would let a regression pass by
  editing the test); a version below the locked one, a locked case that is gone, a case
  or a version not locked yet (``BOUNDARY_LOCK_STALE``, the last two "run
  ``efold-controller boundary lock``"). A missing lock file is an empty lock; one that
  does not decode is ``BOUNDARY_LOCK_STALE``.
* **Locking** (``write_lock``) records every case as it is now. It never re-locks a
  changed case at its old version (``BOUNDARY_CASE_CHANGED``) nor a version below the
  locked one (``BOUNDARY_LOCK_STALE``); it drops the entries of cases that are gone.
  Every case is checked before anything is written; the file is replaced atomically
  (temp file in the same directory, fsync, rename, fsync the directory; an I/O failure
  is the registry's ``PUBLISH_FAILED`` / ``FSYNC_FAILED``), and not at all when nothing
  changed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final, Literal

import msgspec

from efold.boundary.case import Case
from efold.boundary.errors import BoundaryError
from efold.digests import canonical_json
from efold.errors import Code
from efold.input_files import LOCK_LIMIT, InputFileError, read_input
from efold.registry.errors import RegistryError
from efold.registry.files import fsync_fd, write_all

LOCK_NAME: Final = "boundary.lock"
LOCK_VERSION: Final = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")
_RUN_LOCK: Final = "run `efold-controller boundary lock`"


class LockEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: int  # >= 1
    sha256: str  # the case directory's digest at that version


class Lock(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: Literal[1]
    cases: dict[str, LockEntry]


class LockChange(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What ``write_lock`` did to one case's entry."""

    id: str
    action: Literal["added", "bumped", "unchanged", "dropped"]
    version: int
    sha256: str


def read_lock(root: Path) -> Lock:
    """The lock at ``root`` (an empty lock when there is no file)."""
    path = root / LOCK_NAME
    try:
        data = read_input(path, what="boundary lock", limit=LOCK_LIMIT)
    except InputFileError as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            return Lock(version=LOCK_VERSION, cases={})
        if exc.code is not Code.INPUT_FILE_UNREADABLE:
            raise  # a FIFO, a device, too large: its own code, nothing read
        raise BoundaryError(Code.BOUNDARY_LOCK_STALE, exc.detail) from exc
    try:
        lock = msgspec.json.decode(data, type=Lock)
    except msgspec.DecodeError as exc:
        raise BoundaryError(Code.BOUNDARY_LOCK_STALE, f"{path}: not a lock: {exc}") from exc
    for case_id, entry in lock.cases.items():
        if entry.version < 1 or not _SHA256.fullmatch(entry.sha256):
            raise BoundaryError(Code.BOUNDARY_LOCK_STALE,
                                f"{path}: entry {case_id!r} needs a version >= 1 and a sha256")
    return lock


def _problem(case: Case, entry: LockEntry | None) -> BoundaryError | None:
    if entry is None:
        return BoundaryError(Code.BOUNDARY_LOCK_STALE,
                             f"{case.id} v{case.version} is not locked yet; {_RUN_LOCK}")
    if case.version < entry.version:
        return BoundaryError(Code.BOUNDARY_LOCK_STALE,
                             f"{case.id} is at version {case.version}, below the locked "
                             f"version {entry.version}")
    if case.version == entry.version and case.sha256 != entry.sha256:
        return BoundaryError(Code.BOUNDARY_CASE_CHANGED,
                             f"{case.id} v{case.version} differs from its lock (sha256 "
                             f"{case.sha256[:12]}, locked {entry.sha256[:12]}); give it a "
                             "new version (then lock it) or a new id")
    if case.version > entry.version:
        return BoundaryError(Code.BOUNDARY_LOCK_STALE,
                             f"{case.id} v{case.version} is not locked yet (locked: "
                             f"v{entry.version}); {_RUN_LOCK}")
    return None


def lock_problems(root: Path, cases: list[Case], *,
                  complete: bool = True) -> list[tuple[str, BoundaryError]]:
    """(case id, refusal) for every case that disagrees with the lock, in case order,
    then every locked case that is gone. ``complete=False``: ``cases`` is not every case
    of ``root`` (some did not load), so a locked id missing from it is not reported."""
    lock = read_lock(root)
    found: list[tuple[str, BoundaryError]] = []
    for case in cases:
        problem = _problem(case, lock.cases.get(case.id))
        if problem is not None:
            found.append((case.id, problem))
    if complete:
        present = {case.id for case in cases}
        for case_id in sorted(set(lock.cases) - present):
            found.append((case_id, BoundaryError(
                Code.BOUNDARY_LOCK_STALE,
                f"{case_id} v{lock.cases[case_id].version} is locked but its case is gone; "
                f"{_RUN_LOCK} to drop it")))
    return found


def check_lock(root: Path, cases: list[Case]) -> None:
    """Refuse the first disagreement between ``cases`` (every case of ``root``) and the lock."""
    problems = lock_problems(root, cases)
    if problems:
        raise problems[0][1]


def encode_lock(lock: Lock) -> bytes:
    """The lock file's bytes: sorted keys, two-space indent, a final newline."""
    return msgspec.json.format(canonical_json(lock), indent=2) + b"\n"


def write_lock(root: Path, cases: list[Case]) -> list[LockChange]:
    """Lock ``cases`` (every case of ``root``) as they are now (rules in the module
    docstring); returns one change per case and dropped entry, sorted by id."""
    path = root / LOCK_NAME
    old = read_lock(root)
    entries: dict[str, LockEntry] = {}
    changes: list[LockChange] = []
    for case in cases:
        entry = old.cases.get(case.id)
        problem = _problem(case, entry)
        if problem is not None and (problem.code is Code.BOUNDARY_CASE_CHANGED
                                    or (entry is not None and case.version < entry.version)):
            raise problem
        action: Literal["added", "bumped", "unchanged"] = (
            "added" if entry is None else "unchanged" if case.version == entry.version
            else "bumped")
        entries[case.id] = LockEntry(version=case.version, sha256=case.sha256)
        changes.append(LockChange(id=case.id, action=action, version=case.version,
                                  sha256=case.sha256))
    for case_id, entry in old.cases.items():
        if case_id not in entries:
            changes.append(LockChange(id=case_id, action="dropped", version=entry.version,
                                      sha256=entry.sha256))
    data = encode_lock(Lock(version=LOCK_VERSION, cases=dict(sorted(entries.items()))))
    try:
        unchanged = path.read_bytes() == data
    except OSError:
        unchanged = False
    if not unchanged:
        _replace(root, LOCK_NAME, data)
    return sorted(changes, key=lambda c: c.id)


def _replace(directory: Path, name: str, data: bytes) -> None:
    """Replace ``directory/name`` with ``data`` atomically and durably."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise RegistryError(Code.PUBLISH_FAILED,
                            f"{directory}: cannot open: {exc.strerror}") from exc
    temp = f".{name}.tmp-{os.getpid()}-{os.urandom(8).hex()}"
    try:
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644, dir_fd=dir_fd)
        except OSError as exc:
            raise RegistryError(Code.PUBLISH_FAILED,
                                f"{directory / name}: cannot write: {exc.strerror}") from exc
        try:
            try:
                write_all(fd, data)
            except OSError as exc:
                raise RegistryError(Code.PUBLISH_FAILED,
                                    f"{directory / name}: cannot write: {exc.strerror}") from exc
            fsync_fd(fd)
        finally:
            os.close(fd)
        try:
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError as exc:
            raise RegistryError(Code.PUBLISH_FAILED,
                                f"{directory / name}: cannot replace: {exc.strerror}") from exc
        fsync_fd(dir_fd)
    finally:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        os.close(dir_fd)
