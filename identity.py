"""Process identity: who a pid *is*, not just its number.

A pid is recycled; (pid, start time in clock ticks since boot, boot id) is not, within
one boot. Every process efold launches, signals or trusts is named by this triple (plus
its process group where containment needs it). Read straight from /proc: children call
this at start-up, so it must not import psutil.
"""

from __future__ import annotations

import functools
import os

import msgspec

_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


class ProcessIdentity(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A process that existed: its pid, its start time (clock ticks after boot, field 22
    of /proc/PID/stat) and the boot it belongs to."""

    pid: int
    start_time: int
    boot_id: str


@functools.cache
def boot_id() -> str:
    """This boot's id, read once per process (it cannot change while the process runs;
    a worker forked from the template inherits the template's reading)."""
    with open(_BOOT_ID_PATH, encoding="ascii") as f:
        return f.read().strip()


def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    tail = raw[raw.rindex(b")") + 2 :].decode("ascii")
    return tail.split()


def start_time(pid: int) -> int:
    """Start time of ``pid`` in clock ticks since boot. Raises ProcessLookupError if gone."""
    try:
        fields = _stat_fields(pid)
    except FileNotFoundError as exc:
        raise ProcessLookupError(pid) from exc
    return int(fields[19])  # field 22 overall; fields[0] here is field 3 (state)


def process_state(pid: int) -> str:
    """One-letter state (R, S, Z, ...). Raises ProcessLookupError if gone."""
    try:
        return _stat_fields(pid)[0]
    except FileNotFoundError as exc:
        raise ProcessLookupError(pid) from exc


def process_group(pid: int) -> int:
    """Process group id of ``pid`` from /proc (works for zombies, unlike getpgid)."""
    try:
        return int(_stat_fields(pid)[2])
    except FileNotFoundError as exc:
        raise ProcessLookupError(pid) from exc


def parent_pid(pid: int) -> int:
    try:
        return int(_stat_fields(pid)[1])
    except FileNotFoundError as exc:
        raise ProcessLookupError(pid) from exc


def identity_of(pid: int) -> ProcessIdentity:
    return ProcessIdentity(pid=pid, start_time=start_time(pid), boot_id=boot_id())


def current_identity() -> ProcessIdentity:
    return identity_of(os.getpid())


def is_same_process(identity: ProcessIdentity) -> bool:
    """True while the process named by ``identity`` is alive and not a zombie."""
    if identity.boot_id != boot_id():
        return False
    try:
        if start_time(identity.pid) != identity.start_time:
            return False
        return process_state(identity.pid) not in ("Z", "X")
    except (ProcessLookupError, ValueError, IndexError):
        return False
