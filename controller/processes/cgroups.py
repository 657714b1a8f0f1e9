"""Membership by cgroup v2: a cgroup per run and per launch (issue 43, first increment).

A process cannot leave its cgroup by ``setsid``, double forks, clearing its environment
or re-exec under another name, and the kernel keeps the membership after the placing
process dies: a new process finds the run's cgroup by path and sees every survivor.
This module is the layer only; launches do not use it yet.

Layout, below this controller's own cgroup (the ``0::`` line of /proc/self/cgroup, on
the cgroup2 mount found in /proc/self/mountinfo, which is not always /sys/fs/cgroup)::

    <own>/efold-<run_id>/launch-<launch_id>

Every path is opened from the mount's directory fd one component at a time with
``O_NOFOLLOW`` (no ``..``, no symlink), and every file inside a cgroup through the
cgroup's own directory fd. Every ``OSError`` becomes a ``ControllerError`` with a fixed
code in one place (``cgroup_mount.mapped``). Finding the hierarchy (and saying why there
is none: the fallback) is ``cgroup_mount.find_cgroup2``.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from efold.controller.errors import ControllerError
from efold.controller.processes.cgroup_mount import (
    DIR_FLAGS,
    RUN_PREFIX,
    Cgroup2,
    exists,
    mapped,
    open_below,
    parse_own_cgroup,
)
from efold.errors import Code
from efold.protocol.records import OPAQUE_ID

LAUNCH_PREFIX: Final = "launch-"
# How long one poll() on cgroup.events may sleep before the file is read again, from
# the first slice doubling to the last: the kernel sends at most one notification per
# 10 ms per file (CGROUP_FILE_NOTIFY_MIN_INTV) and delays the rest by a timer, so a
# change right after another (place, then kill) is seen by a re-read before its wake.
_FIRST_SLICE_S: Final = 0.001
_LAST_SLICE_S: Final = 0.05

# -- one cgroup ------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """A process in a cgroup: pid and start time (field 22 of /proc/PID/stat, clock
    ticks since boot), the pair containment journals and re-proves."""

    pid: int
    start_time: int


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm (field 2) may hold spaces and parentheses: split after its last ')'.
    rest = stat[stat.rindex(b")") + 2:].split()
    return int(rest[22 - 3])


def cgroup_of(pid: int) -> str | None:
    """The cgroup2 path of ``pid`` (its ``0::`` line), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    own = parse_own_cgroup(text)
    return own if isinstance(own, str) else None


class Cgroup:
    """One cgroup held by a directory fd (and its parent's, to remove it). ``rel`` is
    its path as /proc/PID/cgroup shows it. Not thread-safe; ``close`` releases the fds."""

    def __init__(self, mount: str, rel: str, fd: int, parent_fd: int) -> None:
        self.mount, self.rel = mount, rel
        self._fd, self._parent_fd = fd, parent_fd

    @property
    def path(self) -> str:
        return os.path.join(self.mount, self.rel.lstrip("/"))

    @property
    def fd(self) -> int:
        """The cgroup's directory descriptor (``clone3``'s ``CLONE_INTO_CGROUP`` takes
        it); owned here, never to be closed by the caller."""
        return self._fd

    @property
    def name(self) -> str:
        return self.rel.rsplit("/", 1)[-1]

    def close(self) -> None:
        for fd in (self._fd, self._parent_fd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._parent_fd = -1

    def __enter__(self) -> Cgroup:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # files of this cgroup, always through its fd and never through a symlink
    def _read(self, name: str) -> str:
        with mapped(f"read {name}"):
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._fd)
            try:
                return os.read(fd, 1 << 20).decode("ascii")
            finally:
                os.close(fd)

    def _write(self, name: str, value: str) -> None:
        with mapped(f"write {name}"):
            fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._fd)
            try:
                os.write(fd, value.encode("ascii"))
            finally:
                os.close(fd)

    def _child(self, name: str, create: bool = False) -> Cgroup:
        if create:
            with mapped(f"create cgroup {name}"):
                os.mkdir(name, 0o755, dir_fd=self._fd)
        with mapped(f"open cgroup {name}"):
            fd = os.open(name, DIR_FLAGS, dir_fd=self._fd)
        return Cgroup(self.mount, f"{self.rel.rstrip('/')}/{name}", fd, os.dup(self._fd))

    def open_child(self, name: str) -> Cgroup:
        """The existing child cgroup ``name`` (``cgroup_not_found`` when it is gone)."""
        return self._child(name)

    def children(self) -> Iterator[Cgroup]:
        """The child cgroups, opened one at a time (a fold that may write its cgroup can
        make some: they stay inside ours, and every operation here covers them)."""
        with mapped("list cgroup"):
            names = sorted(e.name for e in os.scandir(self._fd)
                           if e.is_dir(follow_symlinks=False))
        for name in names:
            yield self._child(name)

    def place(self, pid: int) -> None:
        """Move ``pid`` into this cgroup, then prove it there from /proc/PID/cgroup."""
        self._write("cgroup.procs", f"{pid}\n")
        seen = cgroup_of(pid)
        if seen != self.rel:
            raise ControllerError(Code.CGROUP_PLACE_UNVERIFIED,
                                  "process gone" if seen is None else "in another cgroup")

    def own_pids(self) -> list[int]:
        """Pids of this cgroup itself (its cgroup.procs), none of its children's."""
        return [int(p) for p in self._read("cgroup.procs").split()]

    def pids(self) -> list[int]:
        """Pids of this cgroup and every descendant cgroup (cgroup.procs)."""
        found = self.own_pids()
        for child in self.children():
            with child:
                found.extend(child.pids())
        return found

    def members(self) -> list[Member]:
        """Every live process of this cgroup's subtree with its start time (a process
        that exits between the two reads is not listed)."""
        out = []
        for pid in self.pids():
            started = start_time(pid)
            if started is not None:
                out.append(Member(pid, started))
        return out

    def events(self) -> dict[str, int]:
        """cgroup.events: ``populated`` (any live process in the subtree), ``frozen``."""
        pairs = (line.split(" ", 1) for line in self._read("cgroup.events").splitlines())
        return {key: int(value) for key, value in pairs}

    def _await_event(self, key: str, value: int, timeout: float) -> bool:
        # poll(POLLPRI) wakes on every change of cgroup.events; each wake re-reads it.
        deadline = time.monotonic() + timeout
        with mapped("watch cgroup.events"):
            fd = os.open("cgroup.events", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=self._fd)
        try:
            poller = select.poll()
            poller.register(fd, select.POLLPRI | select.POLLERR)
            slice_s = _FIRST_SLICE_S
            while True:
                with mapped("read cgroup.events"):
                    text = os.pread(fd, 4096, 0).decode("ascii")
                if f"{key} {value}" in text.splitlines():
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                poller.poll(max(1, round(min(left, slice_s) * 1000)))
                slice_s = min(slice_s * 2, _LAST_SLICE_S)
        finally:
            os.close(fd)

    def freeze(self, timeout: float = 2.0) -> bool:
        """Freeze the subtree; True once cgroup.events says ``frozen 1`` (within
        ``timeout`` seconds), False if not yet (the caller kills anyway)."""
        self._write("cgroup.freeze", "1")
        return self._await_event("frozen", 1, timeout)

    def thaw(self, timeout: float = 2.0) -> bool:
        self._write("cgroup.freeze", "0")
        return self._await_event("frozen", 0, timeout)

    def kill(self) -> None:
        """SIGKILL every process of the subtree, frozen ones included (cgroup.kill)."""
        self._write("cgroup.kill", "1")

    def wait_empty(self, timeout: float) -> bool:
        """True once cgroup.events says ``populated 0`` within ``timeout`` seconds."""
        return self._await_event("populated", 0, timeout)

    def controllers(self) -> set[str]:
        return set(self._read("cgroup.controllers").split())

    def enable(self, controller: str) -> str | None:
        """Enable ``controller`` for this cgroup's children (cgroup.subtree_control);
        None on success, else why not (not offered here, or refused by the kernel,
        e.g. EBUSY: this cgroup has processes of its own)."""
        if controller not in self.controllers():
            # e.g. on a hybrid host whose v1 hierarchy holds that controller
            return (f"the {controller} controller is not offered to {self.rel} "
                    "(not in its cgroup.controllers)")
        try:
            self._write("cgroup.subtree_control", f"+{controller}")
        except ControllerError as exc:
            return f"enabling {controller} below {self.rel} refused ({exc.detail})"
        return None

    def set_pids_max(self, limit: int) -> None:
        """Bound the subtree's process count (pids.max): a fork beyond it fails with
        EAGAIN inside the cgroup. Refused with CGROUP_CONTROLLER_UNAVAILABLE where the
        pids controller is not enabled for this cgroup."""
        if limit < 1:
            raise ControllerError(Code.CGROUP_ARGUMENT_INVALID, "pids.max below 1")
        if not exists(self._fd, "pids.max"):
            raise ControllerError(Code.CGROUP_CONTROLLER_UNAVAILABLE,
                                  f"no pids controller for {self.rel}")
        self._write("pids.max", f"{limit}\n")

    def remove(self) -> None:
        """Remove this cgroup, children first; only empty cgroups (a populated one is
        refused by the kernel: CGROUP_NOT_EMPTY, and nothing more is removed)."""
        for child in self.children():
            with child:
                child.remove()
        with mapped(f"remove cgroup {self.name}"):
            os.rmdir(self.name, dir_fd=self._parent_fd)
        self.close()


class RunCgroup(Cgroup):
    """The run's cgroup ``<own>/efold-<run_id>``; launches get child cgroups."""

    pids_unavailable: str | None = None

    @classmethod
    def create(cls, found: Cgroup2, run_id: str) -> RunCgroup:
        """Create the run's cgroup below our own and try to offer it (and its launches)
        the pids controller; ``pids_unavailable`` says why not, else None."""
        return cls._at(found, run_id, create=True)

    @classmethod
    def open(cls, found: Cgroup2, run_id: str) -> RunCgroup:
        """The existing cgroup of ``run_id`` (e.g. after its controller died):
        CGROUP_NOT_FOUND when it is gone."""
        return cls._at(found, run_id, create=False)

    @classmethod
    def open_path(cls, found: Cgroup2, path: str) -> RunCgroup:
        """The run cgroup at ``path`` (as journaled): it must be a run cgroup directly
        below our own cgroup on ``found``'s mount."""
        parent, _, name = path.rstrip("/").rpartition("/")
        if parent != found.own_path.rstrip("/") or not name.startswith(RUN_PREFIX):
            raise ControllerError(Code.CGROUP_PATH_REFUSED, "not a run cgroup below ours")
        return cls._at(found, name[len(RUN_PREFIX):], create=False)

    @classmethod
    def _at(cls, found: Cgroup2, run_id: str, create: bool) -> RunCgroup:
        if OPAQUE_ID.fullmatch(run_id) is None:
            raise ControllerError(Code.CGROUP_ARGUMENT_INVALID, "run id is not an opaque id")
        own = Cgroup(found.mount, found.own, open_below(found.mount, found.own), -1)
        try:
            child = own._child(RUN_PREFIX + run_id, create)
        finally:
            own.close()
        run = cls(child.mount, child.rel, child._fd, child._parent_fd)
        if create:
            try:
                run.pids_unavailable = run._offer_pids(found)
            except BaseException:
                run.close()
                raise
        return run

    def _offer_pids(self, found: Cgroup2) -> str | None:
        with Cgroup(found.mount, found.own, open_below(found.mount, found.own), -1) as own:
            why = None if "pids" in self.controllers() else own.enable("pids")
        return why or self.enable("pids")

    def launch_cgroup(self, launch_id: str, create: bool = True) -> Cgroup:
        """The cgroup ``launch-<launch_id>`` of one launch (created, or opened)."""
        if OPAQUE_ID.fullmatch(launch_id) is None:
            raise ControllerError(Code.CGROUP_ARGUMENT_INVALID, "launch id is not an opaque id")
        return self._child(LAUNCH_PREFIX + launch_id, create)
