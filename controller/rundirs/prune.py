"""Pruning old runs (``efold-controller prune``): remove whole run directories, or only
their ``slots/`` (``slots_only``), of runs that are over for certain.

Selection. The candidates are the run directories ``efold.controller.rundirs.run_index`` finds
under ROOT (one level down, never through a symlink, holding ``journal.sqlite``), newest
start first: ``keep`` spares the N newest, ``older_than_ns`` spares every run that
started that recently or later, ``runs`` names runs exactly (each must be a run
directory directly under ROOT, else ``run_not_found``). Without ``slots_only``, the
*bare claims* under ROOT are candidates too (``run_index.is_bare_claim``: a directory
holding nothing but a controller's lease and the journal it was still creating, left
by a controller stopped before it recorded anything); ``older_than_ns`` applies to them
by their directory's mtime, ``keep`` does not (they are no runs), and ``runs`` may name
one. Anything else under ROOT (another directory without a journal, a symlink, the
smoke and faux-burn records ``.efold-*``) is never a candidate: it is left alone, and
listed as a note unless its name starts with a dot.

Decision, per run, while this process holds the run lease *shared* (``_held``): a
controller or ``reap`` taking the lease meanwhile is refused ``lease_held``, so what was
decided still holds when the removal runs. A run is removable only when all of:

* nobody holds its lease (else ``prune_run_live``);
* its records read (else kept with their refusal code, e.g. ``run_records_invalid``);
* its status (``efold.report.status``, through ``run_index``) is neither
  ``unreconciled`` nor ``running``, and ``recover``'s observation
  (``efold.controller.rundirs.recovery.observe``: the journal and /proc) calls it reconciled
  (else ``prune_unreconciled``). Complete, stopped, interrupted and crashed runs are
  removable once reconciled;
* it is no link of a chain (``pilot --continue``), or every link of its chain is
  removed with it (else ``prune_chain_partial``): a chain goes only whole.

Two kinds of leftover of a controller stopped in its first moments are removable too,
under the same lease rule: a bare claim, and a run *stopped before its plan* (its
journal written, ``plan.json`` absent rather than damaged, so its records refuse
``run_records_invalid``) that ``recover`` calls reconciled and that launched nothing.

Removal never follows a link and never leaves the file system (``runroot.remove_at``).
A whole run goes in two steps: everything but its records first, then the records
(``.efold-lease``, ``registration.json``, ``plan.json``, the journal last) and the
directory. If the first step leaves anything behind, the records stay, so the run is
still a run directory (listed, readable, prunable again): ``prune_incomplete``.
``slots_only`` removes ``slots/`` alone: plan, registration, receipts, journal and
checkpoints stay, and ``aggregate`` gives the same results, byte for byte.

Sizes are disk usage (``st_blocks * 512``, each inode once), as ``du`` counts them.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import msgspec

from efold.controller.errors import ControllerError
from efold.controller.rundirs.aggregate import PLAN_NAME
from efold.controller.rundirs.chain import chain_links, is_chained
from efold.controller.rundirs.recovery import observe
from efold.controller.rundirs.run_index import (
    FoundRun,
    RunEntry,
    describe,
    describe_claim,
    find_claims,
    find_runs,
    is_bare_claim,
    started_text,
    status_text,
)
from efold.controller.rundirs.runroot import Removal, is_bare_claim_at, measure_at, remove_at
from efold.errors import Code, EfoldError
from efold.registry.files import check_owner_safe, open_dir_nofollow, unsafe_file_reason
from efold.registry.journal import JOURNAL_NAME
from efold.registry.lease import LEASE_NAME, LeaseState, probe_lease

SLOTS_DIR: Final = "slots"
# A run's records, removed last (in this order, the journal last of all): while they
# exist, the directory is a run directory that ``runs`` lists and ``prune`` can finish.
_RECORDS: Final = (LEASE_NAME, "registration.json", "plan.json",
                   f"{JOURNAL_NAME}-wal", f"{JOURNAL_NAME}-shm", f"{JOURNAL_NAME}-journal",
                   JOURNAL_NAME)
# The shared lock is retried this often: a controller between marking its lease released
# and unlocking it holds the lock a moment longer (``registry.lease``).
_LOCK_ATTEMPTS: Final = 10
_LOCK_RETRY_S: Final = 0.005
# A claim's lease that names no holder is kept this long (``_lease_being_taken``).
CLAIM_GRACE_S: Final = 60.0
# A run whose controller stopped after creating its journal, before its plan.
BEFORE_PLAN_STATUS: Final = "stopped before its plan"
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

_DURATION = re.compile(r"([0-9]{1,9})([smhdw])")
_UNIT_S: Final = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}

Action = Literal["remove", "removed", "keep", "incomplete"]


def parse_duration(text: str) -> int:
    """``7d``, ``12h``, ``30m``, ``90s``, ``2w`` as nanoseconds; ValueError otherwise."""
    found = _DURATION.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"{text!r} is not a duration (a whole number and one of s, m, h, "
                         "d, w: 7d, 12h)")
    return int(found.group(1)) * _UNIT_S[found.group(2)] * 1_000_000_000


@dataclass(frozen=True)
class Selection:
    """Which runs are candidates (see the module docstring). All unset: every run."""

    older_than_ns: int | None = None
    keep: int | None = None
    runs: tuple[str, ...] = ()


class PruneEntry(msgspec.Struct, frozen=True):
    """One selected run: its status, what the action removes (``bytes``: the whole
    directory, or its ``slots/``), what it did (``remove``: would remove, dry run or not
    yet confirmed) and what it freed; ``code``/``detail`` say why it is kept."""

    name: str
    path: str
    started: str
    status: str
    bytes: int
    action: Action
    freed: int = 0
    failures: int = 0
    code: str | None = None
    detail: str | None = None


class PruneNote(msgspec.Struct, frozen=True):
    """An entry under ROOT that is no run directory: never touched."""

    name: str
    why: str


class PruneReport(msgspec.Struct, frozen=True):
    root: str
    slots_only: bool
    applied: bool  # False: nothing was removed (a dry run, or not yet confirmed)
    runs: list[PruneEntry]
    notes: list[PruneNote]
    removable_bytes: int  # what the runs marked remove/removed/incomplete measure
    freed_bytes: int

    @property
    def removable(self) -> list[PruneEntry]:
        return [e for e in self.runs if e.action == "remove"]

    @property
    def kept(self) -> list[PruneEntry]:
        return [e for e in self.runs if e.action in ("keep", "incomplete")]


# -- the root and the selection ------------------------------------------------------


def _open_root(root: str) -> int:
    """ROOT opened without following a link, below ancestors nobody else can swap;
    ``runs_root_invalid`` otherwise."""
    if not os.path.lexists(root):
        raise ControllerError(Code.RUNS_ROOT_INVALID, f"{root}: no such directory")
    if not os.path.isdir(root):
        raise ControllerError(Code.RUNS_ROOT_INVALID, f"{root}: not a directory")
    try:
        check_owner_safe(root)
        return open_dir_nofollow(root)
    except EfoldError as exc:
        raise ControllerError(Code.RUNS_ROOT_INVALID,
                              f"{root}: {exc.detail or exc.code.value} (give the real path "
                              "of a directory only you can write)") from exc


def _notes(root: str, runs: set[str]) -> list[PruneNote]:
    notes: list[PruneNote] = []
    with os.scandir(root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name in runs or entry.name.startswith("."):
                continue  # a run, or efold's own records beside the runs (never touched)
            if entry.is_symlink():
                notes.append(PruneNote(entry.name, "a symlink: never followed"))
            elif entry.is_dir(follow_symlinks=False):
                notes.append(PruneNote(entry.name,
                                       f"not a run directory (no {JOURNAL_NAME}): left alone"))
    return notes


def _named(root: str, name: str, found: list[FoundRun]) -> FoundRun:
    """A run named by ``--run``: a name under ROOT, or a path whose parent is ROOT;
    ``run_not_found`` for anything else (a symlink included: never followed)."""
    base = os.path.basename(os.path.normpath(name))
    if "/" in name:
        parent = os.path.dirname(os.path.abspath(name))
        if not (os.path.isdir(parent) and os.path.samefile(parent, root)):
            raise ControllerError(Code.RUN_NOT_FOUND, f"{name}: not directly under {root}")
    for run in found:
        if os.path.basename(run.path) == base:
            return run
    raise ControllerError(Code.RUN_NOT_FOUND,
                          f"{base}: no run directory of that name under {root} (one holding "
                          f"{JOURNAL_NAME}, or a claim that recorded nothing; a symlink is "
                          "never followed)")


def _found(root: str, slots_only: bool) -> tuple[list[FoundRun], list[FoundRun]]:
    """The runs under ROOT, newest first, and (unless ``slots_only``) its bare claims."""
    return find_runs(root), [] if slots_only else find_claims(root)


def _select(root: str, selection: Selection, now_ns: int, found: list[FoundRun],
            bare: list[FoundRun]) -> list[FoundRun]:
    """The selected runs (``found``), then the selected bare claims (``bare``)."""
    if selection.runs:
        named = [_named(root, name, found + bare) for name in selection.runs]
        unique = {os.path.basename(f.path): f for f in named}
        return [f for f in found + bare if os.path.basename(f.path) in unique]
    chosen = found
    if selection.keep is not None:
        # --keep spares the newest runs that have a plan: a run stopped before its plan,
        # like a claim that recorded nothing, is no run to keep.
        planned = [f for f in found if os.path.lexists(os.path.join(f.path, PLAN_NAME))]
        spared = {f.path for f in planned[:selection.keep]}
        chosen = [f for f in found if f.path not in spared]
    chosen = chosen + bare
    if selection.older_than_ns is not None:
        limit = selection.older_than_ns
        chosen = [f for f in chosen if now_ns - f.started_ns > limit]
    return chosen


# -- the decision, under the run lease held shared ---------------------------------------


class _Live(Exception):
    """The run lease is held by another process."""


@contextmanager
def _held(root_fd: int, name: str) -> Iterator[int]:
    """The run directory ``name`` of ``root_fd`` opened without following a link, with
    its lease held shared for the block (none to hold when it has no lease file).
    Raises ``_Live`` while another process holds the lease exclusively; an unsafe lease
    file is left to the status, which refuses it (``lease_file_invalid``)."""
    run_fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
    lease_fd: int | None = None
    try:
        try:
            lease_fd = os.open(LEASE_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                               | os.O_NONBLOCK, dir_fd=run_fd)
        except OSError:
            lease_fd = None  # absent, or a link: the status says which
        if lease_fd is not None and unsafe_file_reason(os.fstat(lease_fd)) is None:
            for attempt in range(_LOCK_ATTEMPTS):
                try:
                    fcntl.flock(lease_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if attempt + 1 == _LOCK_ATTEMPTS:
                        raise _Live() from None
                    time.sleep(_LOCK_RETRY_S)
        yield run_fd
    finally:
        if lease_fd is not None:
            os.close(lease_fd)  # closing releases our shared lock
        os.close(run_fd)


def _before_its_plan(found: FoundRun, entry: RunEntry) -> bool:
    """Whether the run's controller stopped after its journal, before it published its
    plan: its records refuse (``run_records_invalid``) for ``plan.json`` is absent, not
    damaged."""
    return entry.refused == Code.RUN_RECORDS_INVALID.value \
        and not os.path.lexists(os.path.join(found.path, PLAN_NAME))


def _why_kept(found: FoundRun, entry: RunEntry) -> tuple[Code | None, str]:
    """Why the run must stay (a fixed code and a detail), or None: it is over for
    certain (see the module docstring). A run stopped before its plan is over once
    reconciled, if nothing was launched for it. Called with its lease held shared."""
    early = _before_its_plan(found, entry)
    if entry.refused is not None and not early:
        return Code(entry.refused), entry.detail or ""
    if entry.status in ("unreconciled", "running"):
        return Code.PRUNE_UNRECONCILED, f"status {entry.status}: run `recover` then `reap`"
    try:
        report = observe(found.path)
    except EfoldError as exc:
        return exc.code, exc.detail
    if not report.reconciled:
        return Code.PRUNE_UNRECONCILED, report.verdict
    if early and report.launches:  # launched without a plan: not a state efold leaves
        return Code.RUN_RECORDS_INVALID, entry.detail or ""
    return None, ""


# -- removal -----------------------------------------------------------------------------


def _remove_run(root_fd: int, run_fd: int, name: str) -> Removal:
    """Everything but the records, then (only if that left nothing) the records and the
    directory itself."""
    total = Removal()

    def add(part: Removal) -> None:
        total.bytes += part.bytes
        total.entries += part.entries
        total.failures += part.failures

    for entry in sorted(os.listdir(run_fd)):
        if entry not in _RECORDS:
            add(remove_at(run_fd, entry))
    if total.failures:
        return total
    for record in _RECORDS:
        add(remove_at(run_fd, record))
        if total.failures:
            return total
    run_st = os.fstat(run_fd)
    try:
        named = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
        if (named.st_dev, named.st_ino) != (run_st.st_dev, run_st.st_ino):
            total.failures += 1  # the name was swapped meanwhile: not ours to remove
            return total
        os.rmdir(name, dir_fd=root_fd)
    except OSError:
        total.failures += 1
        return total
    total.bytes += run_st.st_blocks * 512
    total.entries += 1
    return total


def _assess(root_fd: int, found: FoundRun, slots_only: bool, *, remove: bool) -> PruneEntry:
    """The run decided (and measured) under its lease held shared; with ``remove``, and
    when nothing keeps it, removed before the lease is let go."""
    name = os.path.basename(found.path)
    if not slots_only and is_bare_claim(found.path):
        return _assess_claim(root_fd, found, remove=remove)
    try:
        with _held(root_fd, name) as run_fd:
            # A link of a chain is decided on its own records (``_whole_chains`` then
            # keeps it unless its whole chain goes).
            entry = describe(found, chain=False)
            code, detail = _why_kept(found, entry)
            if _before_its_plan(found, entry):
                entry = msgspec.structs.replace(entry, refused=None, detail=None,
                                                status=BEFORE_PLAN_STATUS)
            size = (measure_at(run_fd, SLOTS_DIR) if slots_only
                    else measure_at(root_fd, name)).bytes
            done: Removal | None = None
            if code is None and remove:
                done = (remove_at(run_fd, SLOTS_DIR) if slots_only
                        else _remove_run(root_fd, run_fd, name))
    except _Live:
        entry = describe(found, chain=False)  # read-only: what a live controller's run shows
        return PruneEntry(entry.name, found.path, started_text(entry), status_text(entry), 0,
                          "keep", code=Code.PRUNE_RUN_LIVE.value,
                          detail="a controller or reap holds the run lease")
    except OSError as exc:  # the directory vanished or was swapped for a link meanwhile
        return PruneEntry(name, found.path, "-", "unknown", 0, "keep",
                          code=Code.RUN_NOT_FOUND.value, detail=exc.strerror or "unreadable")
    return _decided(entry, size, code, detail, done)


def _assess_claim(root_fd: int, found: FoundRun, *, remove: bool) -> PruneEntry:
    """A bare claim (``run_index.is_bare_claim``) decided under its lease held shared: a
    live holder is its controller, still starting; with none, nothing was recorded or
    launched for it, and it goes as a run does (its lease last)."""
    name = os.path.basename(found.path)
    entry = describe_claim(found)
    try:
        with _held(root_fd, name) as run_fd:
            if not is_bare_claim_at(run_fd):
                return _decided(entry, 0, Code.RUN_NOT_FOUND,
                                "no longer a claim that recorded nothing", None)
            taking = _lease_being_taken(found.path, run_fd)
            if taking is not None:
                return _decided(entry, 0, Code.PRUNE_RUN_LIVE, taking, None)
            size = measure_at(root_fd, name).bytes
            done = _remove_run(root_fd, run_fd, name) if remove else None
    except _Live:
        return _decided(entry, 0, Code.PRUNE_RUN_LIVE,
                        "the controller that claimed it is live and still starting", None)
    except OSError as exc:  # the directory vanished or was swapped for a link meanwhile
        return PruneEntry(name, found.path, "-", "unknown", 0, "keep",
                          code=Code.RUN_NOT_FOUND.value, detail=exc.strerror or "unreadable")
    return _decided(entry, size, None, "", done)


def _lease_being_taken(path: str, run_fd: int) -> str | None:
    """Why a claim's lease, unlocked, may still be being taken, or None. A lease file is
    created, then locked, then its holder written (``registry.lease``): no holder yet,
    and younger than ``CLAIM_GRACE_S``, it is a controller between those steps; older,
    one killed there."""
    try:
        status = probe_lease(path)
    except EfoldError as exc:  # changed since it was found a bare claim: let it be
        return f"its lease does not read now ({exc.code.value})"
    if status.state is not LeaseState.HOLDER_DEAD or status.holder is not None:
        return None
    age_s = (time.time_ns() - os.stat(LEASE_NAME, dir_fd=run_fd).st_mtime_ns) / 1e9
    if age_s >= CLAIM_GRACE_S:
        return None
    return (f"its lease names no holder yet ({age_s:.0f} s old): a controller may be "
            f"taking it; kept until it is {CLAIM_GRACE_S:g} s old")


def _decided(entry: RunEntry, size: int, code: Code | None, detail: str,
             done: Removal | None) -> PruneEntry:
    """The line for a run decided (``code``: why it stays) and, when ``done``, removed."""
    head = (entry.name, entry.path, started_text(entry), status_text(entry), size)
    if code is not None:
        return PruneEntry(*head, "keep", code=code.value, detail=detail or None)
    if done is None:
        return PruneEntry(*head, "remove")
    if done.failures:
        return PruneEntry(*head, "incomplete", freed=done.bytes, failures=done.failures,
                          code=Code.PRUNE_INCOMPLETE.value,
                          detail=f"{done.failures} entries could not be removed")
    return PruneEntry(*head, "removed", freed=done.bytes)


# -- entry points --------------------------------------------------------------------------


def _report(root: str, slots_only: bool, applied: bool, runs: list[PruneEntry],
            notes: list[PruneNote]) -> PruneReport:
    removable = sum(e.bytes for e in runs if e.action != "keep")
    return PruneReport(root=root, slots_only=slots_only, applied=applied, runs=runs,
                       notes=notes, removable_bytes=removable,
                       freed_bytes=sum(e.freed for e in runs))


def plan_prune(root: str, selection: Selection, *, slots_only: bool = False,
               now_ns: int | None = None) -> PruneReport:
    """What ``apply_prune`` would do now: every selected run decided and measured;
    nothing is removed. ``runs_root_invalid`` / ``run_not_found`` refuse."""
    root_fd = _open_root(root)
    try:
        runs, claims = _found(root, slots_only)
        chosen = _select(root, selection, time.time_ns() if now_ns is None else now_ns,
                         runs, claims)
        entries = [_assess(root_fd, found, slots_only, remove=False) for found in chosen]
    finally:
        os.close(root_fd)
    if not slots_only:
        entries = _whole_chains(entries)
    notes = [] if selection.runs else _notes(root, {os.path.basename(f.path)
                                                    for f in runs + claims})
    return _report(root, slots_only, False, entries, notes)


def _whole_chains(entries: list[PruneEntry]) -> list[PruneEntry]:
    """Each link of a chain (``pilot --continue``) to be removed stays unless every link
    of its chain is removed with it (``prune_chain_partial``): the others would no
    longer read as one."""
    going = {os.path.abspath(e.path) for e in entries if e.action == "remove"}
    out = []
    for entry in entries:
        # Without a plan no run is a link: a continuation names itself in the run it
        # continues only once its plan is published (``run_setup.link_continuation``).
        if entry.action == "remove" and os.path.lexists(os.path.join(entry.path, PLAN_NAME)):
            try:
                links = [str(p) for p in chain_links(entry.path)] \
                    if is_chained(Path(entry.path)) else []
            except EfoldError as exc:
                links, entry = [], msgspec.structs.replace(
                    entry, action="keep", code=exc.code.value, detail=exc.detail or None)
            left = [link for link in links if link not in going]
            if left:
                entry = msgspec.structs.replace(
                    entry, action="keep", code=Code.PRUNE_CHAIN_PARTIAL.value,
                    detail=f"a link of a chain of {len(links)}: prune every link together "
                           f"({', '.join(os.path.basename(link) for link in left)} not "
                           "selected or kept)")
        out.append(entry)
    return out


def apply_prune(planned: PruneReport) -> PruneReport:
    """Remove what ``planned`` marked ``remove``, each run decided again first under its
    lease (a run whose decision changed meanwhile is kept, with the new reason)."""
    root_fd = _open_root(planned.root)
    try:
        runs, claims = _found(planned.root, planned.slots_only)
        by_name = {os.path.basename(f.path): f for f in runs + claims}
        done: list[PruneEntry] = []
        for entry in planned.runs:
            found = by_name.get(entry.name)
            if entry.action != "remove":
                done.append(entry)
            elif found is None:
                done.append(msgspec.structs.replace(
                    entry, action="keep", code=Code.RUN_NOT_FOUND.value,
                    detail="no longer a run directory"))
            else:
                done.append(_assess(root_fd, found, planned.slots_only, remove=True))
    finally:
        os.close(root_fd)
    return _report(planned.root, planned.slots_only, True, done, planned.notes)


__all__ = ["PruneEntry", "PruneNote", "PruneReport", "Selection", "apply_prune",
           "parse_duration", "plan_prune"]
