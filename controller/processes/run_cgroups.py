"""A run's membership mode, and the cgroups its launches are placed in.

At run open (``RunCgroups.open``) the controller looks for a writable cgroup2 hierarchy
(``cgroup_mount.find_cgroup2``). Found: the run gets ``<own>/efold-<token>``, every launch
a child ``launch-<token>`` created before the launch starts and holding it (and all it
ever starts) before it runs anything of its own; the mode is ``cgroup``. Not found: the
mode is ``process-group`` (process groups, pidfds and the launch marker, which a process
that leaves its session and drops its environment escapes once the controller is gone),
with the reason. Either way the mode, and the run cgroup's path, are journaled in the
run's ``meta`` before the first launch, and every launch row carries its cgroup.

Paths are journaled as the kernel names them (relative to the hierarchy's root, as in
/proc/PID/cgroup), with the run cgroup's inode and a name derived from the journal's
first epoch, so ``recover`` and ``reap`` find the run's own cgroup from any cgroup of
the same hierarchy, another cgroup namespace included, and never another run's
(``open_run_cgroup``). A run's cgroups are removed only when empty: the kernel refuses
to remove a populated one, and so does ``Cgroup.remove``.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass
from typing import Final, Literal

from efold.controller.errors import ControllerError
from efold.controller.processes.cgroup_mount import (
    DIR_FLAGS,
    RUN_PREFIX,
    Cgroup2,
    NoCgroup2,
    find_cgroup2,
    mapped,
    open_below,
    parse_cgroup2_mount,
)
from efold.controller.processes.cgroups import LAUNCH_PREFIX, Cgroup, RunCgroup
from efold.controller.processes.proctable import ProcEntry, read_entry
from efold.errors import Code
from efold.protocol.records import OPAQUE_ID
from efold.registry.journal import JournalReader, JournalWriter

Mode = Literal["cgroup", "process-group"]
CGROUP: Final = "cgroup"
PROCESS_GROUP: Final = "process-group"
# ``meta`` keys of the run's journal.
META_MODE: Final = "containment"
META_RUN_CGROUP: Final = "run_cgroup"
META_FALLBACK: Final = "containment_fallback"  # why process-group mode (the reason)
META_OPERATOR_FALLBACK: Final = "containment_fallback_allowed"  # a real run's operator flag
META_RUN_CGROUP_ID: Final = "run_cgroup_id"  # its inode: the cgroup's id in every namespace
# What a process-group verdict cannot see (recover says it; the banner and status too).
PROCESS_GROUP_BLIND_SPOT: Final = (
    "process-group containment: a process that left its group and session and dropped "
    "its launch marker cannot be seen")


def _token() -> str:
    return secrets.token_hex(8)


@dataclass
class RunCgroups:
    """The membership of one run. ``mode`` ``cgroup``: ``run`` is the run's cgroup and
    ``detail`` its path; ``process-group``: ``run`` is None and ``detail`` says why.
    Owned by the command that opened the run; ``close`` at its end."""

    mode: Mode
    detail: str
    run: RunCgroup | None = None

    @classmethod
    def open(cls, *, use_cgroups: bool = True, token: str | None = None) -> RunCgroups:
        """Create the run's cgroup below this controller's own, or say why there is none
        (``use_cgroups`` False: the operator chose process groups). Never raises for
        "unavailable": the fallback is a mode, and the caller decides whether it may
        run in it. ``token``: the run cgroup's name after ``efold-`` (``run_token``, so
        that recover can tell the run's own cgroup); None: a fresh random one."""
        if not use_cgroups:
            return cls(PROCESS_GROUP, "process-group containment chosen by the campaign")
        found = find_cgroup2()
        if isinstance(found, NoCgroup2):
            return cls(PROCESS_GROUP, found.reason)
        try:
            run = RunCgroup.create(found, token or _token())
        except ControllerError as exc:
            return cls(PROCESS_GROUP, f"the run's cgroup cannot be created ({exc.detail})")
        return cls(CGROUP, run.rel, run)

    def journal(self, journal: JournalWriter, *, operator_allowed: bool = False) -> None:
        """Record the mode (and the run cgroup, or why none, and whether a real run's
        operator allowed that) in one transaction, before the first launch."""
        if self.run is not None:
            journal.record_meta({META_MODE: self.mode, META_RUN_CGROUP: self.run.rel,
                                 META_RUN_CGROUP_ID: str(os.fstat(self.run.fd).st_ino)})
        else:
            journal.record_meta({META_MODE: self.mode, META_FALLBACK: self.detail,
                                 **({META_OPERATOR_FALLBACK: "--process-group-containment"}
                                    if operator_allowed else {})})

    def new_launch(self) -> Cgroup | None:
        """A fresh, empty cgroup for one launch (None in process-group mode)."""
        return None if self.run is None else self.run.launch_cgroup(_token())

    def close(self) -> bool:
        """Remove the run's cgroup if it is empty (what a launch left in it stays, for
        ``recover`` to see and ``reap`` to kill); True if it is gone."""
        if self.run is None:
            return True
        run, self.run = self.run, None
        try:
            run.remove()
        except ControllerError:
            run.close()
            return False
        return True


def membership_line(mode: str, detail: str) -> str:
    """The line a command shows at run open: the mode, where (cgroup) or why not."""
    if mode == CGROUP:
        return (f"containment: cgroup, the run's cgroup below {detail} (`recover RUN` "
                "names it)")
    return (f"containment: process-group, no cgroup ({detail}): a process that leaves its "
            "group and session and drops its launch marker is not seen after a crash; an "
            "ordinary user gets cgroups under `systemd-run --user --scope -p Delegate=yes "
            "efold-controller ...`")


def run_token(journal: JournalReader) -> str:
    """The run's cgroup token: a digest of its journal's first epoch (the controller
    that opened it: pid, start time, boot, time). A copy of the run directory has the
    same; any other run has another, so a journal cannot be pointed at another run's
    cgroup without being that run's."""
    epochs = journal.rows("epochs")
    if not epochs:
        raise ControllerError(Code.CGROUP_ARGUMENT_INVALID, "the journal has no epoch")
    first = epochs[0]
    seed = f"{first['pid']}:{first['start_time']}:{first['boot_id']}:{first['started_ns']}"
    return hashlib.sha256(seed.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class JournaledCgroup:
    """What a run's journal says of its cgroup: the path as the controller's kernel
    named it, its inode (the cgroup's id, the same from every cgroup namespace), and the
    name it must have (``run_token``)."""

    rel: str
    ino: int | None
    name: str


def journaled_mode(journal: JournalReader) -> tuple[Mode, JournaledCgroup | None]:
    """The run's journaled mode and cgroup (a journal from before cgroups, or one whose
    run never opened, is process-group)."""
    if journal.meta(META_MODE) != CGROUP:
        return PROCESS_GROUP, None
    rel = journal.meta(META_RUN_CGROUP) or ""
    ino = journal.meta(META_RUN_CGROUP_ID)
    return CGROUP, JournaledCgroup(rel, int(ino) if ino and ino.isdigit() else None,
                                   RUN_PREFIX + run_token(journal))


def open_run_cgroup(journaled: JournaledCgroup) -> Cgroup | None:
    """The run's cgroup, wherever this process sees it; None when it is gone (the kernel
    removes only empty cgroups). Refused (``cgroup_path_refused``) when the journaled
    path is not this run's cgroup (its name is not the run's token, or the cgroup there
    is another with that name); ``cgroup_not_found`` when no cgroup2 hierarchy is
    visible. Seen from another cgroup namespace (a container's controller, recovered
    from the host) the journaled path names nothing: the cgroup is then looked for by
    its name and inode across the hierarchy, and only a search that finds neither says
    gone."""
    parts = [p for p in journaled.rel.split("/") if p]
    if not parts or parts[-1] != journaled.name or any(p in (".", "..") for p in parts):
        raise ControllerError(Code.CGROUP_PATH_REFUSED, "the journaled cgroup is not this run's")
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        mountinfo = f.read()
    found = parse_cgroup2_mount(mountinfo, "/" + "/".join(parts))
    if isinstance(found, NoCgroup2):
        raise ControllerError(Code.CGROUP_NOT_FOUND, found.reason)
    cgroup = _open_rel(found, "/" + "/".join(parts))
    if cgroup is None:
        elsewhere = _search(found.mount, journaled)
        if elsewhere is None:
            return None
        cgroup = _open_rel(Cgroup2(found.mount, elsewhere), elsewhere)
        if cgroup is None:
            return None
    if journaled.ino is not None and os.fstat(cgroup.fd).st_ino != journaled.ino:
        cgroup.close()
        raise ControllerError(Code.CGROUP_PATH_REFUSED,
                              "another cgroup has the run's name (its id differs)")
    return cgroup


def _search(mount: str, journaled: JournaledCgroup) -> str | None:
    """The path (below ``mount``) of the directory named as the run's cgroup with its
    inode, or None."""
    for top, dirs, _ in os.walk(mount, followlinks=False):
        if journaled.name in dirs:
            path = os.path.join(top, journaled.name)
            try:
                ino = os.stat(path, follow_symlinks=False).st_ino
            except OSError:
                continue
            if journaled.ino is None or ino == journaled.ino:
                return "/" + os.path.relpath(path, mount)
        dirs[:] = [d for d in dirs if not d.startswith(LAUNCH_PREFIX)]
    return None


def launch_cgroup_of(run: Cgroup, journaled_rel: str | None,
                     run_rel: str) -> Cgroup | None:
    """A launch's cgroup, opened below the (located) run cgroup: its journaled path must
    be ``<run cgroup>/launch-<token>``; None when absent or gone."""
    if journaled_rel is None:
        return None
    parent, _, name = journaled_rel.rstrip("/").rpartition("/")
    if parent != run_rel.rstrip("/") or not name.startswith(LAUNCH_PREFIX) \
            or OPAQUE_ID.fullmatch(name[len(LAUNCH_PREFIX):]) is None:
        raise ControllerError(Code.CGROUP_PATH_REFUSED, "not a launch cgroup of this run")
    try:
        return run.open_child(name)
    except ControllerError as exc:
        if exc.code is Code.CGROUP_NOT_FOUND:
            return None
        raise


def _open_rel(found: Cgroup2, rel: str) -> Cgroup | None:
    parent, _, name = found.own.rpartition("/")
    try:
        parent_fd = open_below(found.mount, parent or "/")
    except ControllerError as exc:
        if exc.code is Code.CGROUP_NOT_FOUND:
            return None
        raise
    try:
        with mapped(f"open cgroup {name}"):
            fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except ControllerError as exc:
        os.close(parent_fd)
        if exc.code is Code.CGROUP_NOT_FOUND:
            return None
        raise
    except BaseException:
        os.close(parent_fd)
        raise
    return Cgroup(found.mount, rel, fd, parent_fd)


# -- one launch's cgroup, as the launcher and containment use it ----------------------


def live_in_cgroup(cgroup: Cgroup | None) -> list[ProcEntry]:
    """The live processes of ``cgroup``'s subtree now (none for None, or a cgroup that
    is gone: the kernel removes only empty ones)."""
    if cgroup is None:
        return []
    try:
        pids = cgroup.pids()
    except ControllerError as exc:
        if exc.code is Code.CGROUP_NOT_FOUND:
            return []
        raise
    return live_entries(pids)


def live_entries(pids: list[int]) -> list[ProcEntry]:
    """The process-table entries of ``pids`` that are alive now (not gone, no zombie)."""
    entries = (read_entry(pid) for pid in pids)
    return [e for e in entries if e is not None and not e.exited]


def kill_cgroup(cgroup: Cgroup) -> bool:
    """SIGKILL every process of the subtree (``cgroup.kill``); False if it could not be
    written (the caller's survivor check then sees what lives)."""
    try:
        cgroup.kill()
    except ControllerError:
        return False
    return True


def discard_cgroup(cgroup: Cgroup | None) -> bool:
    """Remove a launch's cgroup if it is empty, and release it either way (a populated
    one stays for ``recover`` and ``reap``); True if it is gone."""
    if cgroup is None:
        return True
    try:
        cgroup.remove()
    except ControllerError:
        cgroup.close()
        return False
    return True
