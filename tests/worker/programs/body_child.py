"""A real child that runs efold's worker entry point with a test body.

    python body_child.py MODE prep|probe --ipc-fd N --key-fd M

Tree modes (prep) build a process tree after Welcome, write the pids of its members to
``tree.pids`` in the slot directory (JSON), and only then send ``Prepared``; the
controller in the test then contains the worker. Other modes exercise the session or
hang on purpose.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from efold.errors import Code
from efold.ipc.messages import Prepared, Refused, SettleOutcome, Terminal, UsageReport, Welcome
from efold.protocol.assignment import Assignment
from efold.worker.builtin import BuiltinProbe
from efold.worker.entry import main
from efold.worker.session import ProbeSession

D = "d" * 64


def _sleep_forever() -> None:
    deadline = time.monotonic() + 120  # never outlive a broken test by much
    while time.monotonic() < deadline:
        time.sleep(0.5)
    os._exit(0)


def _fork(setup) -> int:  # type: ignore[no-untyped-def]
    """Fork a child that runs ``setup()`` then sleeps; returns its pid once it is ready."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            setup()
        finally:
            os.write(w, b"x")
            os.close(w)
        _sleep_forever()
    os.close(w)
    os.read(r, 1)
    os.close(r)
    return pid


def _is_zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"


def _ignore_term() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _setsid_and_ignore_term() -> None:
    os.setsid()
    _ignore_term()


class TreeBody:
    def __init__(self, mode: str) -> None:
        self.mode = mode

    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        pids: dict[str, int] = {"leader": os.getpid()}
        mode = self.mode
        if mode in ("grandchild_ignores_term", "leader_ignores_term"):
            pids["grandchild"] = _fork(_ignore_term)
            if mode == "leader_ignores_term":
                _ignore_term()
        elif mode == "forker":
            pids["forker"] = _fork(self._start_forking)
        elif mode == "zombie":
            pids["zombie"] = self._fork_short_lived()
            pids["grandchild"] = _fork(_ignore_term)
        elif mode == "unreaped_grandchild":
            pid = os.fork()
            if pid == 0:
                os._exit(0)  # exits at once; the leader never waits for it
            pids["grandchild"] = pid
            while not _is_zombie(pid):
                time.sleep(0.005)
        elif mode == "setsid_child":
            pids["escaped"] = _fork(_setsid_and_ignore_term)
        elif mode == "setsid_orphan":
            pids["escaped"] = self._double_fork_escape()
        else:
            raise SystemExit(99)
        with open(os.path.join(assignment.slot_dir, "tree.pids"), "w") as f:
            json.dump(pids, f)
        return Prepared(snapshot_digest=D, files=0, bytes=0, rejected={})

    @staticmethod
    def _start_forking() -> None:
        _ignore_term()
        if os.fork() == 0:  # the forker proper: keeps forking children during containment
            for _ in range(300):
                if os.fork() == 0:
                    _sleep_forever()
                time.sleep(0.005)
            _sleep_forever()

    @staticmethod
    def _fork_short_lived() -> int:
        """A child that lives until its parent reads the record, then exits unreaped."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(w)
            os.read(r, 1)  # a byte when the leader says so (SIGUSR1), or EOF
            os._exit(0)
        os.close(r)
        signal.signal(signal.SIGUSR1, lambda *_: os.write(w, b"x"))
        return pid

    @staticmethod
    def _double_fork_escape() -> int:
        """A grandchild that leaves the group and is orphaned at once: tied to the launch
        only by its adoption by the controller (the subreaper)."""
        r_ready, w_ready = os.pipe()
        r_pid, w_pid = os.pipe()
        if os.fork() == 0:
            pid = os.fork()
            if pid == 0:
                _setsid_and_ignore_term()
                os.write(w_ready, b"x")
                _sleep_forever()
            os.write(w_pid, pid.to_bytes(4, "big"))
            os._exit(0)
        os.close(w_ready)
        os.close(w_pid)
        pid = int.from_bytes(os.read(r_pid, 4), "big")
        os.read(r_ready, 1)
        os.close(r_pid)
        os.close(r_ready)
        os.wait()  # reap the intermediate child: the escapee is now an orphan
        return pid


class HangBody:
    """Prep body that never answers in time (for cancelled exchanges)."""

    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        time.sleep(60)
        raise SystemExit(99)


class CrashBody:
    """Prep body with a bug: an unexpected exception, never a traceback or status 1."""

    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        raise RuntimeError("a bug in a body")


class SessionBody(BuiltinProbe):
    """Probe body that drives every session exchange, then expects a Stop."""

    def run(self, session: ProbeSession) -> Terminal:
        first = session.admit(request_id="r1", round=0, payload_digest=D, rmax=5)
        if isinstance(first, Refused):
            raise SystemExit(98)
        session.consume(permit_id=first.permit_id, body_digest=D)
        session.settle(
            permit_id=first.permit_id, outcome=SettleOutcome.SETTLED, code=None,
            usage=UsageReport(input=3, output=1), tier="default", cost=2,
        )
        second = session.admit(request_id="r2", round=1, payload_digest=D, rmax=5)
        assert isinstance(second, Refused) and second.code is Code.NOT_ADMITTED_CAP
        session.admit(request_id="r3", round=2, payload_digest=D, rmax=5)  # -> Stop
        raise SystemExit(97)  # unreachable: the controller answers Stop


BODIES = {
    "crash": CrashBody,
    "hang": HangBody,
    "session": SessionBody,
}

if __name__ == "__main__":
    mode = sys.argv[1]
    body = BODIES[mode]() if mode in BODIES else TreeBody(mode)
    sys.exit(main(sys.argv[2:], body=body))  # type: ignore[arg-type]
