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
/proc/PID/cgroup), so ``recover`` and ``reap`` find them from any cgroup of the same
hierarchy (``open_journaled``). A run's cgroups are removed only when empty: the kernel
refuses to remove a populated one, and so does ``Cgroup.remove``.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from typing import Final, Literal

from efold.controller.cgroup_mount import (
    DIR_FLAGS,
    RUN_PREFIX,
    Cgroup2,
    NoCgroup2,
    find_cgroup2,
    mapped,
    open_below,
    parse_cgroup2_mount,
)
from efold.controller.cgroups import LAUNCH_PREFIX, Cgroup, RunCgroup
from efold.controller.errors import ControllerError
from efold.controller.proctable import ProcEntry, read_entry
from efold.errors import Code
from efold.registry.journal import JournalReader, JournalWriter

Mode = Literal["cgroup", "process-group"]
CGROUP: Final = "cgroup"
PROCESS_GROUP: Final = "process-group"
# ``meta`` keys of the run's journal.
META_MODE: Final = "containment"
META_RUN_CGROUP: Final = "run_cgroup"
META_FALLBACK: Final = "containment_fallback"  # why process-group mode (the reason)
META_OPERATOR_FALLBACK: Final = "containment_fallback_allowed"  # a real run's operator flag
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
    def open(cls, *, use_cgroups: bool = True) -> RunCgroups:
        """Create the run's cgroup below this controller's own, or say why there is none
        (``use_cgroups`` False: the operator chose process groups). Never raises for
        "unavailable": the fallback is a mode, and the caller decides whether it may
        run in it (``require``)."""
        if not use_cgroups:
            return cls(PROCESS_GROUP, "process-group containment chosen by the campaign")
        found = find_cgroup2()
        if isinstance(found, NoCgroup2):
            return cls(PROCESS_GROUP, found.reason)
        try:
            run = RunCgroup.create(found, _token())
        except ControllerError as exc:
            return cls(PROCESS_GROUP, f"the run's cgroup cannot be created ({exc.detail})")
        return cls(CGROUP, run.rel, run)

    def require(self, required: bool) -> None:
        """Refuse (``containment_unavailable``) a run that requires cgroup containment
        where there is none."""
        if required and self.mode != CGROUP:
            raise ControllerError(Code.CONTAINMENT_UNAVAILABLE, self.detail)

    def journal(self, journal: JournalWriter) -> None:
        """Record the mode (and the run cgroup, or why none) before the first launch."""
        journal.record_meta(META_MODE, self.mode)
        if self.run is not None:
            journal.record_meta(META_RUN_CGROUP, self.run.rel)
        else:
            journal.record_meta(META_FALLBACK, self.detail)

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
        return f"containment: cgroup, below {detail} (no process of the run can leave it)"
    return f"containment: process-group, no cgroup ({detail}); {PROCESS_GROUP_BLIND_SPOT}"


def journaled_mode(journal: JournalReader) -> tuple[Mode, str | None]:
    """The run's journaled mode and run cgroup path (a journal from before cgroups, or
    one whose run never opened, is process-group)."""
    mode = journal.meta(META_MODE)
    if mode == CGROUP:
        return CGROUP, journal.meta(META_RUN_CGROUP)
    return PROCESS_GROUP, None


def open_journaled(rel: str) -> Cgroup | None:
    """The cgroup at the journaled path ``rel`` (a run cgroup ``.../efold-*`` or a launch
    cgroup below one), from whichever cgroup2 mount holds it; None when it is gone (the
    kernel removes only empty cgroups, so nothing of it is alive). Raises
    ``ControllerError`` when it cannot be looked at: no such hierarchy visible here
    (``cgroup_not_found`` with the reason), a path that is no run's (``cgroup_path_refused``),
    no permission."""
    parts = [p for p in rel.split("/") if p]
    run_at = next((i for i, p in enumerate(parts) if p.startswith(RUN_PREFIX)), None)
    if run_at is None or any(not p.startswith(LAUNCH_PREFIX) for p in parts[run_at + 1:]) \
            or len(parts) > run_at + 2:
        raise ControllerError(Code.CGROUP_PATH_REFUSED, "not a run or launch cgroup")
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        found = parse_cgroup2_mount(f.read(), "/" + "/".join(parts))
    if isinstance(found, NoCgroup2):
        raise ControllerError(Code.CGROUP_NOT_FOUND, found.reason)
    return _open_rel(found, "/" + "/".join(parts))


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
