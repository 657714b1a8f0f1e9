"""Re-proving a recorded process before touching it, and signalling only through pidfds.

A *member* is a process recorded in the journal: identity (pid, start time, boot id),
the process group it was in, and its role. Before every signal it is re-proven:

1. ``pidfd_open(pid)`` first, so the descriptor names whatever holds the pid *now*;
2. then /proc: the same start time (else the pid was recycled or the record is forged),
   not a zombie (a zombie counts as dead), the same process group.

If the /proc read matches after the pidfd was opened, the pidfd names the recorded
process (a recycled pid would show a later start time), and a signal sent through it
can only reach that process (or nothing, if it has died since). No signal ever goes to
a bare pid or a bare pgid.

Group signals use the leader's launch pidfd with ``PIDFD_SIGNAL_PROCESS_GROUP`` (Linux
>= 6.9): the kernel binds the group to the leader's ``struct pid``, not to a number, so
it cannot reach a recycled group.
"""

from __future__ import annotations

import enum
import errno
import os
import signal
from dataclasses import dataclass
from typing import Final

from efold.controller.processes.proctable import ProcEntry, read_entry
from efold.identity import ProcessIdentity, boot_id

# linux/pidfd.h: PIDFD_SIGNAL_THREAD = 1, _THREAD_GROUP = 2, _PROCESS_GROUP = 4.
PIDFD_SIGNAL_PROCESS_GROUP: Final = 4

ROLE_LEADER: Final = "leader"
ROLE_DESCENDANT: Final = "descendant"


@dataclass(frozen=True, slots=True)
class Member:
    """A recorded process: who it was and which group it was in when observed."""

    identity: ProcessIdentity
    pgid: int
    role: str

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.identity.pid, self.identity.start_time, self.pgid)


class ProofState(enum.StrEnum):
    ALIVE = "alive"  # re-proven: same process, same group, not a zombie
    EXITED = "exited"  # gone, a zombie, or from another boot: counts as dead
    MISMATCH = "mismatch"  # the pid is held by another process, or the group changed


@dataclass(slots=True)
class Proof:
    member: Member
    state: ProofState
    # Open only when ALIVE (the caller closes it); None otherwise.
    pidfd: int | None
    # What /proc showed for the pid (None if nothing holds it).
    entry: ProcEntry | None

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def prove(member: Member, *, current_boot: str | None = None) -> Proof:
    """Re-prove ``member`` now. An ALIVE proof holds an open pidfd; close it."""
    ident = member.identity
    if ident.boot_id != (current_boot or boot_id()):
        return Proof(member, ProofState.EXITED, None, None)
    try:
        fd = os.pidfd_open(ident.pid)
    except ProcessLookupError:
        return Proof(member, ProofState.EXITED, None, None)
    except OSError:
        # Cannot get a handle (e.g. descriptor exhaustion): unprovable, never signalled.
        return Proof(member, ProofState.MISMATCH, None, read_entry(ident.pid))
    entry = read_entry(ident.pid)
    if entry is None:
        os.close(fd)
        return Proof(member, ProofState.EXITED, None, None)
    if entry.start_time != ident.start_time:
        os.close(fd)
        return Proof(member, ProofState.MISMATCH, None, entry)
    if entry.exited:
        os.close(fd)
        return Proof(member, ProofState.EXITED, None, entry)
    if entry.pgid != member.pgid:
        os.close(fd)
        return Proof(member, ProofState.MISMATCH, None, entry)
    return Proof(member, ProofState.ALIVE, fd, entry)


def signal_pidfd(pidfd: int, sig: int, *, group: bool = False) -> bool:
    """Send ``sig`` through ``pidfd`` (to its process group with ``group``). Returns
    False if the target (or every group member) is already gone."""
    flags = PIDFD_SIGNAL_PROCESS_GROUP if group else 0
    try:
        signal.pidfd_send_signal(pidfd, sig, None, flags)
    except ProcessLookupError:
        return False
    return True


_group_support: bool | None = None


def group_signal_supported(pidfd: int) -> bool:
    """Whether the kernel takes ``PIDFD_SIGNAL_PROCESS_GROUP`` (probed once, with signal
    0, which checks permission and delivers nothing)."""
    global _group_support
    if _group_support is None:
        try:
            signal.pidfd_send_signal(pidfd, 0, None, PIDFD_SIGNAL_PROCESS_GROUP)
            _group_support = True
        except ProcessLookupError:
            _group_support = True  # understood the flag; the group is just empty
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            _group_support = False
    return _group_support
