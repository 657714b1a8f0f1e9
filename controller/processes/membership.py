"""Which processes belong to a launch: the ties containment and recovery rely on.

A process is *tied* to a launch when, in one /proc snapshot, it is

1. the leader itself (same pid and start time);
2. in the launch's process group **while the leader pins it** (the leader is alive or an
   unreaped zombie, so the group number cannot have been recycled);
3. a recorded member still holding its pid with the recorded start time (whatever group
   it is in now: a member that called ``setsid`` is still ours);
4. an orphan adopted by the controller (the controller is a child subreaper): parented
   to the controller, not one of its registered direct children nor in the group of
   one (another launch's, whose unreaped leader pins its group number), and started no
   earlier than the leader;
5. a process carrying the launch's environment marker (``efold.controller.processes.marker``),
   started no earlier than the leader: how an escaped orphan reparented to init is
   still found after the controller died;
6. a descendant, by parent links, of any of the above.

Rules 3, 4 and 5 are how a descendant that escaped the group with ``setsid`` is still
found: through its recorded identity, its parent chain, or (once its parent is gone)
its adoption by the controller. Only a process that escaped *and* was reparented away
from the controller before any snapshot saw it can be missed; that cannot happen while
the controller is a subreaper and alive.

With several launches live at once, an adopted orphan that left its group is attributed
to whichever launch is contained first (rule 4 cannot tell launches apart). It is a
worker's orphan either way. One still in its launch's group is that launch's alone,
while that launch's leader is unreaped, however close their start times.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from efold.controller.processes.marker import marked_processes
from efold.controller.processes.proctable import ProcEntry, descendants, scan_since
from efold.controller.processes.subreaper import DIRECT_CHILDREN, reap_adopted
from efold.identity import ProcessIdentity


def leader_pins_group(table: Mapping[int, ProcEntry], leader: ProcessIdentity) -> bool:
    entry = table.get(leader.pid)
    return entry is not None and entry.start_time == leader.start_time


def tied_processes(
    table: Mapping[int, ProcEntry],
    *,
    leader: ProcessIdentity,
    pgid: int,
    recorded: Iterable[ProcessIdentity],
    controller_pid: int,
    direct_children: frozenset[int],
    marker: str | None = None,
) -> list[ProcEntry]:
    """Entries tied to the launch, zombies included, in a stable discovery order:
    leader, group members, recorded members, adopted orphans, marked processes, then
    descendants."""
    order: list[int] = []
    seen: set[int] = set()

    def add(pid: int) -> None:
        if pid not in seen:
            seen.add(pid)
            order.append(pid)

    pinned = leader_pins_group(table, leader)
    if pinned:
        add(leader.pid)
        for pid in sorted(table):
            if table[pid].pgid == pgid:
                add(pid)
    for ident in recorded:
        entry = table.get(ident.pid)
        if entry is not None and entry.start_time == ident.start_time:
            add(ident.pid)
    for pid in sorted(table):
        entry = table[pid]
        if (
            entry.ppid == controller_pid
            and pid not in direct_children
            and entry.pgid not in direct_children
            and pid != leader.pid
            and entry.start_time >= leader.start_time
        ):
            add(pid)
    if marker is not None:
        for pid in marked_processes(table, marker, not_before=leader.start_time):
            add(pid)
    for pid in descendants(table, list(order)):
        add(pid)
    return [table[pid] for pid in order]


def live_in_groups(
    table: Mapping[int, ProcEntry], groups: Iterable[int]
) -> list[ProcEntry]:
    """Live (non-zombie) processes whose process group is one of ``groups``."""
    wanted = set(groups)
    return [e for pid, e in sorted(table.items()) if e.pgid in wanted and not e.exited]


def tied_now(leader: ProcessIdentity, pgid: int, marker: str | None) -> list[ProcEntry]:
    """Processes tied now (one /proc scan) to a launch of this controller: its own
    other direct children are not orphans of it. Callers that may see adopted orphans
    await ``DIRECT_CHILDREN.quiet()`` first.

    The scan reads only what started no earlier than the leader (``scan_since``), and
    the ties are the same as over the whole table: every tied process started no
    earlier than the leader. The leader, its group (its session's members, all forked
    below it after its ``setsid``), adopted orphans and marked processes by their rules,
    descendants after their ancestors; and an older process can never become tied: it
    cannot join a group of another session, and is reparented only to one of its own
    ancestors, which are older still.

    Nor is the controller's other registered children's /proc read again once pinned
    (``scan_since``'s ``skip``): none of them can be tied. Each is a launch's leader or
    the template, in a session of its own (or the controller's) from before its
    registration, so never in the leader's group, whose session is the leader's; its
    parent is the controller, so it is no adopted orphan (rule 4 excludes it) and no
    descendant of a tied process; and the environment /proc shows for it is its own
    launch's or the template's, with another marker."""
    others = DIRECT_CHILDREN.start_times()
    others.pop(leader.pid, None)
    return tied_processes(
        scan_since(leader.start_time, skip=others), leader=leader, pgid=pgid, recorded=(),
        controller_pid=os.getpid(), direct_children=frozenset(others), marker=marker,
    )


def left_behind(leader: ProcessIdentity, pgid: int, marker: str | None) -> tuple[bool, bool]:
    """After the leader's exit: whether a process tied to the launch is still alive, and
    whether any process besides the leader was seen at all. Exited ones, our adopted
    zombies, are reaped on the way (nobody else ever will)."""
    alive = seen = False
    for entry in tied_now(leader, pgid, marker):
        if entry.pid == leader.pid:
            continue
        seen = True
        if entry.exited:
            reap_adopted(entry.pid, entry.start_time)
        else:
            alive = True
    return alive, seen
