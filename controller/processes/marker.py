"""The launch marker: how a process of a run is still found once its ties are gone.

Every child starts with ``EFOLD_LAUNCH_MARKER=<32 hex digits>`` in its environment: a
fresh random token per launch, journaled with the launch (``launches.marker``) before
the child's first message is read. Its descendants inherit it (the worker passes its
own environment to fold commands), so a process that called ``setsid``, double-forked
and was reparented to init after the controller died is still attributable to its
launch by reading ``/proc/PID/environ``.

How unforgeable it is: the token is 128 random bits, known only to the journal (a 0600
file in a 0700 run directory) and to the environments of the run's own processes, which
only the same user can read. A process that carries it either descends from the launch
or was given it by someone who could already signal every process of that user. To
count, a marked process must also have started no earlier than the launch's leader, on
the same boot. And a marker never authorises a signal by itself: a marked process is
journaled as a member and re-proven (pidfd, start time, group) like any other.

What it cannot do: a process that re-executes with a cleaned environment (``env -i``)
drops the marker; it is then found only through the other ties (group, recorded
identity, parent links, adoption by the live controller).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from typing import Final

from efold.controller.processes.proctable import ProcEntry

MARKER_VAR: Final = "EFOLD_LAUNCH_MARKER"
_PREFIX: Final = MARKER_VAR.encode() + b"="
_TOKEN: Final = re.compile(rb"[0-9a-f]{32}")


def new_marker() -> str:
    return secrets.token_hex(16)


def marker_of(pid: int) -> str | None:
    """The launch marker in ``pid``'s initial environment, if it carries a well-formed
    one (unreadable processes, other users' among them, carry none)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read(1 << 20)
    except OSError:
        return None
    for item in raw.split(b"\0"):
        if item.startswith(_PREFIX):
            value = item[len(_PREFIX):]
            return value.decode() if _TOKEN.fullmatch(value) else None
    return None


def marked_processes(table: Mapping[int, ProcEntry], marker: str, *,
                     not_before: int) -> list[int]:
    """Live pids carrying ``marker`` that started no earlier than ``not_before`` (the
    launch leader's start time, in clock ticks)."""
    # Only processes young enough to belong to the launch have their environment read:
    # this runs at every launch's end, and most of a machine's processes are older.
    return [pid for pid, found in markers_by_process(table, not_before=not_before).items()
            if found == marker]


def markers_by_process(table: Mapping[int, ProcEntry], *,
                       not_before: int = 0) -> dict[int, str]:
    """Every live process started no earlier than ``not_before`` (clock ticks) carrying a
    well-formed marker, with it (one /proc pass)."""
    found: dict[int, str] = {}
    for pid, entry in sorted(table.items()):
        if not entry.exited and entry.start_time >= not_before:
            marker = marker_of(pid)
            if marker is not None:
                found[pid] = marker
    return found
