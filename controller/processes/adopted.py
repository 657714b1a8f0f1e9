"""A launch leader the controller did not spawn itself but adopted (a worker forked by
the template, ``efold.controller.processes.template``), seen through the same small
interface as the trio ``Process`` of a spawned one (``WorkerProcess``).

The adopted leader is the controller's child from birth (``CLONE_PARENT``); it is
waited for through its own pidfd and reaped by its pid, like trio does for a spawned
child, and never by ``wait(-1)``.
"""

from __future__ import annotations

import os
import signal
from typing import Protocol

import anyio


class WorkerProcess(Protocol):
    """What ``WorkerHandle`` needs of its leader's process object (an anyio ``Process``
    for a spawned child, ``AdoptedProcess`` for an adopted one)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def kill(self) -> None: ...


class AdoptedProcess:
    """An adopted child, waited for on a pidfd of its own.

    Invariant: ``_pidfd`` stays open until the child is reaped (``returncode`` set), so
    ``pid`` keeps naming this process; it is closed exactly once, right after the reap.
    """

    def __init__(self, pid: int) -> None:
        self._pid = pid
        # A descriptor of its own: trio refuses two tasks waiting on one fd number, and
        # the launcher waits on the launch pidfd separately (``wait_exit``).
        self._pidfd: int | None = os.pidfd_open(pid)
        self._returncode: int | None = None

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._returncode

    def _try_reap(self) -> bool:
        try:
            reaped, status = os.waitpid(self._pid, os.WNOHANG)
        except ChildProcessError:
            return False  # not ours to reap (yet): wait() looks again shortly
        if reaped != self._pid:
            return False
        self._returncode = os.waitstatus_to_exitcode(status)
        if self._pidfd is not None:
            fd, self._pidfd = self._pidfd, None
            os.close(fd)
        return True

    async def wait(self) -> int:
        """Until the child has exited; reap it. The exit status as anyio gives it
        (negative: killed by that signal)."""
        while self._returncode is None:
            if self._pidfd is not None:
                await anyio.wait_readable(self._pidfd)
            if not self._try_reap():
                await anyio.sleep(0.005)  # readable, not reapable yet: look again
        return self._returncode

    def kill(self) -> None:
        """SIGKILL through the pidfd (a no-op once reaped or gone)."""
        if self._pidfd is None:
            return
        try:
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        """Give up the pidfd without reaping (only when the child is known to be gone
        or never became ours)."""
        if self._pidfd is not None:
            fd, self._pidfd = self._pidfd, None
            os.close(fd)
