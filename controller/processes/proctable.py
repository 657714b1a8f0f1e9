"""A content-free snapshot of the process table, read from /proc.

Containment and recovery need, for every process, only who it is and how it is tied to
others: pid, parent, process group, session, start time, state. Nothing else (no
command line, no environment) is read, so a snapshot can be journaled or reported.

A snapshot is a POSIX observation, not an atomic kernel view: processes come and go
while /proc is read. Callers re-prove anything before acting on it.
"""

from __future__ import annotations

import os
import resource
import select
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

_STAT_READ = 4096


@dataclass(frozen=True, slots=True)
class ProcEntry:
    pid: int
    ppid: int
    pgid: int
    sid: int
    start_time: int  # clock ticks since boot (field 22 of /proc/PID/stat)
    state: str  # one letter: R, S, D, Z, T, X, ...

    @property
    def exited(self) -> bool:
        """A zombie (or a dead task still listed) counts as dead."""
        return self.state in ("Z", "X")


def read_entry(pid: int) -> ProcEntry | None:
    """The entry for ``pid``, or None if it is gone (or unreadable)."""
    # Raw descriptors, one read: every launch scans /proc more than once, and a Python
    # file object per process costs three times as much. A stat line is a few hundred
    # bytes (its one variable field, comm, at most 64), so 4 KiB holds it whole.
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        raw = os.read(fd, _STAT_READ)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        # comm (field 2) may hold spaces and parentheses: split after the last ')'.
        fields = raw[raw.rindex(b")") + 2 :].split()
        return ProcEntry(
            pid=pid,
            ppid=int(fields[1]),
            pgid=int(fields[2]),
            sid=int(fields[3]),
            start_time=int(fields[19]),
            state=fields[0].decode("ascii"),
        )
    except (ValueError, IndexError):
        return None


def scan() -> dict[int, ProcEntry]:
    """Every process visible in /proc, by pid."""
    table: dict[int, ProcEntry] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            entry = read_entry(int(name))
            if entry is not None:
                table[entry.pid] = entry
    return table


def scan_since(not_before: int, *,
               skip: Mapping[int, int] | None = None) -> dict[int, ProcEntry]:
    """Every process visible in /proc that started at or after clock tick
    ``not_before``, by pid, read now as ``scan`` reads it; some older ones may be left
    out, and so may each process ``skip`` names by pid and start time once it is
    pinned (still that process). What a live launch's membership needs
    (``membership.tied_now``): every process tied to a launch started no earlier than
    its leader, and none of the controller's other registered children, which can never
    be.

    Cheaper than ``scan`` and as exact for those processes: a process read once is
    pinned by a pidfd (``_Pins``), and while its pidfd reports no exit its pid still
    names it, so its start time (which never changes) is known without reading it."""
    return _PINS.scan(not_before, skip)


class _Pins:
    """Processes read before, each pinned by a pidfd.

    Why this is exact: /proc is listed first, then the pidfds are polled. A pinned
    process whose pidfd reports no exit was alive after the listing, so the pid the
    listing showed was still its own (a pid is not reused while its process lives,
    zombie included: a zombie's pidfd reports the exit). A pidfd is opened *before* its
    process's stat is read, and the pin is kept only if it still reports no exit after
    the read: the entry read is then the pinned process's.

    Invariant: ``_pins[pid] == (pidfd, start_time)`` of a process that was alive when
    pinned, its pidfd registered in ``_poller``; a pidfd is unregistered and closed
    exactly once, when its pin is dropped. At most ``PIN_LIMIT`` pins (descriptors of
    this process): beyond it, processes are read at every scan, as ``scan`` does.
    """

    # A tenth of the soft descriptor limit, at most 128: a busy machine (thousands of
    # processes) costs full reads beyond it, never the controller's descriptors.
    PIN_LIMIT: Final = min(128, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 10)

    def __init__(self) -> None:
        self._pins: dict[int, tuple[int, int]] = {}
        self._by_fd: dict[int, int] = {}  # pidfd -> pid
        self._poller = select.poll()
        self._lock = threading.Lock()  # one scan at a time (scans are synchronous)

    def scan(self, not_before: int, skip: Mapping[int, int] | None = None) -> dict[int, ProcEntry]:
        skip = skip or {}
        with self._lock:
            listed = [int(name) for name in os.listdir("/proc") if name.isdigit()]
            self._drop_exited()
            table: dict[int, ProcEntry] = {}
            fresh: list[tuple[int, ProcEntry]] = []
            for pid in listed:
                pinned = self._pins.get(pid)
                if pinned is not None and (pinned[1] < not_before or skip.get(pid) == pinned[1]):
                    continue  # the process pinned, alive, started before or skipped
                pidfd = self._open(pid, len(fresh)) if pinned is None else None
                entry = read_entry(pid)
                if entry is not None:
                    table[pid] = entry
                if pidfd is not None:
                    if entry is None or entry.exited:
                        os.close(pidfd)
                    else:
                        fresh.append((pidfd, entry))
            self._pin(fresh)
            return table

    def _open(self, pid: int, pending: int) -> int | None:
        """A pidfd for ``pid`` if the limit allows one more (``pending``: opened in this
        scan, not pinned yet)."""
        if len(self._pins) + pending >= self.PIN_LIMIT:
            return None
        try:
            return os.pidfd_open(pid)
        except OSError:
            return None  # gone already, or pidfds refused: read at every scan

    def _exited(self, fds: Iterable[int]) -> set[int]:
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        return {fd for fd, _ in poller.poll(0)}

    def _drop_exited(self) -> None:
        for fd, _ in self._poller.poll(0):
            pid = self._by_fd.pop(fd)
            del self._pins[pid]
            self._poller.unregister(fd)
            os.close(fd)

    def _pin(self, fresh: list[tuple[int, ProcEntry]]) -> None:
        """Pin each (pidfd, entry) whose process had not exited by the end of its read."""
        exited = self._exited(fd for fd, _ in fresh)
        for fd, entry in fresh:
            if fd in exited:
                os.close(fd)
                continue
            self._pins[entry.pid] = (fd, entry.start_time)
            self._by_fd[fd] = entry.pid
            self._poller.register(fd, select.POLLIN)


_PINS: Final = _Pins()


def children_index(table: Mapping[int, ProcEntry]) -> dict[int, list[int]]:
    """ppid -> child pids, in pid order."""
    index: dict[int, list[int]] = {}
    for pid in sorted(table):
        index.setdefault(table[pid].ppid, []).append(pid)
    return index


def descendants(table: Mapping[int, ProcEntry], roots: Iterable[int]) -> list[int]:
    """Every process below ``roots`` by parent links (roots excluded), breadth first."""
    index = children_index(table)
    seen: set[int] = set(roots)
    order: list[int] = []
    frontier = list(seen)
    while frontier:
        nxt: list[int] = []
        for pid in frontier:
            for child in index.get(pid, ()):
                if child not in seen:
                    seen.add(child)
                    order.append(child)
                    nxt.append(child)
        frontier = nxt
    return order
