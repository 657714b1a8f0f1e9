"""Run directories: always new, never reused (no resume), never inside the folders
whose files make up the build digest (``run_root_in_source``), and never reached
through a planted link: the run and every directory in it are created through an
``O_NOFOLLOW`` descriptor of their parent, below ancestors nobody else can swap.

Layout of a run::

    <run>/.efold-lease           the writer lease (flock)
    <run>/journal.sqlite         the journal
    <run>/registration.json      the registration the run executes (copied, hashed)
    <run>/plan.json              the plan (content-free)
    <run>/authorization-consumed.json
    <run>/traces/<id>.jsonl      reader-safe traces for the prep children (private)
    <run>/checkpoints/<key>/     prep slot dirs; the pristine snapshot in snapshot/
    <run>/slots/<slot>/          slot dirs (a body's private workspace)
    <run>/receipts/<slot>.json   one content-free receipt per visited slot
    <run>/results.json, summary.md, report.html

Removal (``measure_at``, ``remove_at``) is the mirror of creation: every directory is
opened ``O_NOFOLLOW`` through its parent's descriptor, names are unlinked through that
descriptor (an unlink never follows a link: a planted symlink is removed, never its
target), no other file system is entered, and nothing raises: what could not be removed
is counted (``Removal.failures``) and left in place.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from efold import digests
from efold.controller.errors import ControllerError
from efold.errors import Code, EfoldError
from efold.registry.files import (
    NOT_WRITABLE_ERRNOS,
    check_owner_safe,
    fsync_fd,
    make_private_dir,
    not_writable,
    open_dir_nofollow,
    open_private_child,
    shared_dir_reason,
    unsafe_file_reason,
)
from efold.registry.journal import CREATING_NAME
from efold.registry.lease import LEASE_NAME, Lease, acquire_lease

DEFAULT_RUNS_ROOT = "efold-runs"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _source_dirs() -> list[str]:
    """The folders whose files ``efold.digests.build_digest`` hashes (physical paths).
    The package root's own top level is not among them: only its files are hashed, so
    a run under ``<package root>/efold-runs`` (the README's default from a clone)
    leaves the build digest as it is."""
    root = digests.package_root()
    return [os.path.realpath(root / pkg) for pkg in digests._BUILD_PACKAGES]


def _source_identities() -> set[tuple[int, int]]:
    """``(st_dev, st_ino)`` of every source folder that exists."""
    identities: set[tuple[int, int]] = set()
    for source in _source_dirs():
        try:
            st = os.stat(source)
        except OSError:
            continue
        identities.add((st.st_dev, st.st_ino))
    return identities


def refuse_source_tree(path: str | os.PathLike[str]) -> None:
    """``RUN_ROOT_IN_SOURCE`` if ``path`` is, or lies inside, a folder whose files make
    up the build digest: a run written there would change the digest and silently
    invalidate every registration. Checked by name (the path with its existing part
    resolved) and by identity (``st_dev/st_ino`` of every existing ancestor), so
    neither a symlink nor a bind mount hides the source tree."""
    absolute = os.path.abspath(os.fspath(path))
    real = os.path.realpath(absolute)
    for source in _source_dirs():
        if real == source or real.startswith(source + "/"):
            raise ControllerError(Code.RUN_ROOT_IN_SOURCE, "run root inside the source tree")
    identities = _source_identities()
    current = absolute
    while True:
        try:
            st = os.stat(current)
        except OSError:
            pass  # not created yet: its existing ancestors decide
        else:
            if (st.st_dev, st.st_ino) in identities:
                raise ControllerError(Code.RUN_ROOT_IN_SOURCE, "run root inside the source tree")
        parent = os.path.dirname(current)
        if parent == current:
            return
        current = parent


def claim_run_dir(path: str | os.PathLike[str], *, parent_is: str = "runs root") -> Path:
    """Create ``path`` (0700) exclusively: an existing path, even empty (or a symlink,
    even dangling), refuses with ``RUN_ROOT_EXISTS``. Refuses before creating anything:
    ``RUN_ROOT_IN_SOURCE`` inside efold's own source folders; ``PATH_REFUSED`` if a
    symlink is on the way to the parent, or an ancestor could be swapped by someone
    else (owned by another user, or group/other-writable without the sticky bit): the
    refusal names the directory (the parent itself as ``parent_is``), its mode and
    owner, and the fix. Missing parents are made 0700 whatever the umask."""
    run = Path(os.path.abspath(os.fspath(path)))
    refuse_source_tree(run)
    if run.parent != run and not os.path.lexists(run.parent):
        existing = run.parent
        while not os.path.lexists(existing):
            existing = existing.parent
        check_owner_safe(existing, what="ancestor")  # before creating anything below it
        make_private_dir(run.parent, parents=True)
    check_owner_safe(run.parent, what=parent_is)
    parent_fd = open_dir_nofollow(run.parent)
    try:
        # The parent as opened (not as named) must not be a source folder either.
        opened = os.fstat(parent_fd)
        if (opened.st_dev, opened.st_ino) in _source_identities():
            raise ControllerError(Code.RUN_ROOT_IN_SOURCE, "run root inside the source tree")
        try:
            os.mkdir(run.name, 0o700, dir_fd=parent_fd)
        except FileExistsError as exc:
            raise ControllerError(Code.RUN_ROOT_EXISTS, "run directories are never reused") from exc
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                raise ControllerError(Code.PATH_REFUSED, "parent directory missing") from exc
            if exc.errno in NOT_WRITABLE_ERRNOS:
                raise not_writable(run.parent, run.name, exc) from exc
            raise
        try:
            run_fd = os.open(run.name, _DIR_FLAGS, dir_fd=parent_fd)
            try:
                os.fchmod(run_fd, 0o700)  # exact mode whatever the umask
            finally:
                os.close(run_fd)
            fsync_fd(parent_fd)  # the run's name is durable before anything relies on it
        except BaseException:  # a Ctrl-C included: the directory is still empty, ours
            with contextlib.suppress(OSError):
                os.rmdir(run.name, dir_fd=parent_fd)
            raise
    finally:
        os.close(parent_fd)
    return run


def new_run_path(runs_root: str | os.PathLike[str], campaign: str) -> Path:
    """A new run's name under ``runs_root``: its campaign, the time, 6 random hex digits."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return Path(runs_root) / f"{campaign}-{stamp}-{secrets.token_hex(3)}"


def new_run_dir(runs_root: str | os.PathLike[str], campaign: str) -> Path:
    return claim_run_dir(new_run_path(runs_root, campaign))


# What a controller leaves in the directory it claimed before its journal exists: its
# lease, and the journal it was creating (``registry.journal_file``: created whole under
# this name, then renamed into place, so the name outlives only a killed creation).
CLAIM_NAMES: Final = frozenset({LEASE_NAME, CREATING_NAME, *(
    f"{CREATING_NAME}-{suffix}" for suffix in ("wal", "shm", "journal"))})


def _claim_files_only(run_fd: int) -> list[str] | None:
    """The names in the directory open at ``run_fd`` when each is one a claim leaves
    (``CLAIM_NAMES``) and a file efold may trust (regular, one link, ours, not group/
    other-writable: never a directory, a link or a FIFO); else None."""
    names = os.listdir(run_fd)
    if not set(names) <= CLAIM_NAMES:
        return None
    for name in names:
        if unsafe_file_reason(os.stat(name, dir_fd=run_fd, follow_symlinks=False)):
            return None
    return names


def is_bare_claim_at(run_fd: int) -> bool:
    """Whether the directory open at ``run_fd`` is a *bare claim*: private and ours, it
    holds nothing but what a claim leaves before its journal, its lease among them, so
    nothing was recorded or launched for it. Whether the controller that claimed it
    still lives is its lease's to say."""
    if shared_dir_reason(os.fstat(run_fd)) is not None:
        return False
    names = _claim_files_only(run_fd)
    return names is not None and LEASE_NAME in names


def unclaim_run_dir(run: Path) -> bool:
    """Remove the directory this process claimed (``claim_run_dir``) while it holds
    nothing but what a claim leaves (nothing at all, or ``CLAIM_NAMES``): the lease
    last, then the directory. False, and nothing removed, when it holds anything else
    or cannot be removed."""
    try:
        parent_fd = open_dir_nofollow(run.parent)
    except (EfoldError, OSError):
        return False
    try:
        run_fd = os.open(run.name, _DIR_FLAGS, dir_fd=parent_fd)
        try:
            names = _claim_files_only(run_fd)
            if names is None:
                return False
            for name in sorted(names, key=lambda n: n == LEASE_NAME):  # the lease last
                os.unlink(name, dir_fd=run_fd)
        finally:
            os.close(run_fd)
        os.rmdir(run.name, dir_fd=parent_fd)
        return True
    except OSError:
        return False
    finally:
        os.close(parent_fd)


def claim_leased_run_dir(path: str | os.PathLike[str]) -> tuple[Path, Lease]:
    """``claim_run_dir``, then the run's lease at once: from its first moments the
    directory reads as a live claim, never as one a stopped controller left. An
    exception (a Ctrl-C included) before the lease is held removes the directory."""
    run = claim_run_dir(path)
    try:
        return run, acquire_lease(run)
    except BaseException:
        unclaim_run_dir(run)
        raise


def private_subdir(run: Path, *parts: str, durable: bool = True) -> Path:
    """Create ``run/parts...`` (0700): the last part exclusively, missing intermediate
    parts likewise, each step opened ``O_NOFOLLOW`` through the previous one's
    descriptor. ``PATH_REFUSED`` if the run path holds a symlink; ``PRIVATE_DIR_REFUSED``
    if the last part already exists (a planted symlink included) or an existing
    intermediate part is a symlink, not a directory, not ours, or group/other-writable.
    Nothing is created through a planted link. ``durable=False``: the last part's name
    is not fsynced into its parent (the caller does it later, once for many)."""
    if not parts:
        raise ValueError("private_subdir needs at least one part")
    for part in parts:
        if not part or part in (".", "..") or "/" in part or "\0" in part:
            raise ValueError(f"not a single path component: {part!r}")
    fd = open_dir_nofollow(run)
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            child = open_private_child(fd, part, exclusive=last, durable=durable or not last)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    return run.joinpath(*parts)


# How deep a removal goes below the entry it was asked to remove: a tree deeper than
# this (no efold writer nests so deep; a hostile child could) is left, counted.
MAX_REMOVAL_DEPTH = 64


@dataclass
class Removal:
    """What a removal freed (or, measured, would free) and what it left in place."""

    # Disk usage (``st_blocks * 512``, as ``du`` counts it) of what was removed, each
    # inode counted once; the entries removed; the entries left in place (never raised).
    bytes: int = 0
    entries: int = 0
    failures: int = 0


def _usage(st: os.stat_result) -> int:
    return st.st_blocks * 512


def _entry(dir_fd: int, name: str, removal: Removal, seen: set[tuple[int, int]], *,
           remove: bool, depth: int = 0) -> None:
    """Measure (with ``remove``: remove) the entry ``name`` of ``dir_fd``; a directory's
    entries first, deepest first. Never raises for the file system: counts."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError:
        removal.failures += 1
        return
    if stat.S_ISDIR(st.st_mode):
        before = removal.failures
        _empty_dir(dir_fd, name, st, removal, seen, remove=remove, depth=depth)
        if remove and removal.failures > before:
            return  # not emptied: the directory stays, with what remains in it
    if remove:
        try:
            if stat.S_ISDIR(st.st_mode):
                os.rmdir(name, dir_fd=dir_fd)
            else:
                os.unlink(name, dir_fd=dir_fd)  # a symlink itself, never its target
        except OSError:
            removal.failures += 1
            return
    if (st.st_dev, st.st_ino) not in seen:
        seen.add((st.st_dev, st.st_ino))
        removal.bytes += _usage(st)
    removal.entries += 1


def _empty_dir(parent_fd: int, name: str, st: os.stat_result, removal: Removal,
               seen: set[tuple[int, int]], *, remove: bool, depth: int) -> None:
    """Every entry of the directory ``name`` (``st``: as stat'ed without following)."""
    if st.st_dev != os.fstat(parent_fd).st_dev:  # a mount point: never entered
        removal.failures += 1
        return
    if depth >= MAX_REMOVAL_DEPTH:  # bounded recursion, bounded open descriptors
        removal.failures += 1
        return
    try:
        # O_NOFOLLOW: a directory swapped for a link since the stat is refused here.
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        removal.failures += 1
        return
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
            removal.failures += 1  # swapped for another directory meanwhile
            return
        if remove and opened.st_uid == os.geteuid():
            # A child may have made its own directory read-only: it is still ours.
            os.fchmod(fd, 0o700)
        for child in os.listdir(fd):
            _entry(fd, child, removal, seen, remove=remove, depth=depth + 1)
    except OSError:
        removal.failures += 1
    finally:
        os.close(fd)


def _at(parent_fd: int, name: str, *, remove: bool) -> Removal:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"not a single path component: {name!r}")
    removal = Removal()
    _entry(parent_fd, name, removal, set(), remove=remove)
    return removal


def measure_at(parent_fd: int, name: str) -> Removal:
    """What ``remove_at(parent_fd, name)`` would free now (nothing is changed)."""
    return _at(parent_fd, name, remove=False)


def remove_at(parent_fd: int, name: str) -> Removal:
    """Remove the entry ``name`` of the directory ``parent_fd`` and, for a directory,
    everything in it, never through a link (see the module docstring). A missing name
    removes nothing; a directory that could not be emptied is left with what remains."""
    return _at(parent_fd, name, remove=True)
