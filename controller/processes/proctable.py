"""A content-free snapshot of the process table, read from /proc.

Containment and recovery need, for every process, only who it is and how it is tied to
others: pid, parent, process group, session, start time, state. Nothing else (no
command line, no environment) is read, so a snapshot can be journaled or reported.

A snapshot is a POSIX observation, not an atomic kernel view: processes come and go
while /proc is read. Callers re-prove anything before acting on it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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
