"""The controller as a child subreaper, and the reaping rules that come with it.

With ``PR_SET_CHILD_SUBREAPER`` every orphaned descendant of a worker reparents to the
controller instead of init, so containment can still find it (through its parent link)
and it cannot escape by double-forking.

The price: such orphans are our children, and when they exit they stay zombies until we
reap them. Reaping must never steal the exit status of a child someone else waits for:
trio waits for each launched worker by its own pid (pidfd readiness, then ``waitpid`` on
that pid). So this module never calls ``wait(-1)``; it reaps only *adopted* orphans,
named by pid and start time, and never a child registered in ``DIRECT_CHILDREN``.

Invariant: every direct child of the controller process is either registered in
``DIRECT_CHILDREN`` (launch leaders, reaped by their trio ``Process``; any other
subprocess the controller starts on purpose, reaped by whoever started it) or an
adopted orphan of some launch. Anything parented to us and not registered is treated
as an orphan of a worker: containment attributes it to the launch it contains and may
signal and reap it. So code in the controller that starts a subprocess while workers
may be live must register it for its lifetime.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import anyio

from efold.controller.errors import ControllerError
from efold.controller.processes.proctable import read_entry
from efold.errors import Code
from efold.identity import ProcessIdentity

PR_SET_CHILD_SUBREAPER: Final = 36
PR_GET_CHILD_SUBREAPER: Final = 37


def _libc() -> ctypes.CDLL:
    # The symbols already loaded in this process (libc among them); find_library would
    # run a subprocess, which this module of all modules must not do casually.
    return ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> None:
    """Mark this process a child subreaper (idempotent)."""
    if is_subreaper():
        return
    if _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise ControllerError(Code.LAUNCH_FAILED, f"prctl(PR_SET_CHILD_SUBREAPER) errno {err}")


def is_subreaper() -> bool:
    flag = ctypes.c_int(0)
    if _libc().prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) != 0:
        return False
    return flag.value != 0


class DirectChildren:
    """Children this process started on purpose and not yet reaped, by pid; and the
    work under way whose child may exist but is not registered (``spawning``).

    Why the second: with several launches in flight, one launch's membership scan can
    run while another launch's spawn is awaited (trio forks in a worker thread). The
    fresh child is then parented to us and unregistered, so rule 4 of
    ``controller.processes.membership`` would take it for an adopted orphan of the launch being
    scanned, and contain it. So a scan that may attribute adopted orphans first awaits
    ``quiet()`` and reads /proc before its next checkpoint."""

    def __init__(self) -> None:
        # Invariant: a pid is here from spawn until its owner has reaped it.
        self._children: dict[int, ProcessIdentity] = {}
        # Invariant: the number of ``spawning()`` blocks open: launches between the
        # start of their spawn and the registration of its child (or its failure), and
        # work that runs children of this process it does not register (a boundary
        # slot's oracles: ``controller.pilot.slots``).
        self._spawning = 0
        self._quiet: anyio.Event | None = None  # set when ``_spawning`` drops to 0

    @contextmanager
    def spawning(self) -> Iterator[None]:
        """Around a spawn, up to and including ``add`` of the child it made; or around
        work that runs unregistered children of this process (they end within it)."""
        self._spawning += 1
        try:
            yield
        finally:
            self._spawning -= 1
            if self._spawning == 0 and self._quiet is not None:
                self._quiet.set()
                self._quiet = None

    async def quiet(self) -> None:
        """Return at a moment when every child this process made on purpose is
        registered. Only until the caller's next checkpoint: scan before awaiting."""
        while self._spawning:
            if self._quiet is None:
                self._quiet = anyio.Event()
            await self._quiet.wait()

    def add(self, identity: ProcessIdentity) -> None:
        self._children[identity.pid] = identity

    def discard(self, pid: int) -> None:
        self._children.pop(pid, None)

    def pids(self) -> frozenset[int]:
        return frozenset(self._children)

    def start_times(self) -> dict[int, int]:
        """pid -> start time of every registered child."""
        return {pid: identity.start_time for pid, identity in self._children.items()}

    def __contains__(self, pid: object) -> bool:
        return pid in self._children


DIRECT_CHILDREN: Final = DirectChildren()


def reap_adopted(pid: int, start_time: int) -> bool:
    """Reap ``pid`` if it is an exited orphan adopted by this process with that start
    time. Returns True if it is gone afterwards (reaped now, or already gone)."""
    if pid in DIRECT_CHILDREN:
        return False  # its owner reaps it; reaping here would steal its exit status
    entry = read_entry(pid)
    if entry is None:
        return True
    if entry.start_time != start_time or entry.ppid != os.getpid() or not entry.exited:
        return False
    try:
        # A specific pid that is our own unreaped child: it cannot have been recycled.
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True  # someone else reaped it already
    return reaped == pid
