"""A real child program for the pilot's fault tests: the production entry point with a
faulty body. ``python -I faulty_child.py MODE MARKER KIND --ipc-fd N --key-fd M``.

MARKER is a file path: a fault fires only when the marker does not exist yet (the child
creates it first), so exactly one slot of a run is hit and the run can be seen going on.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from efold.errors import Code
from efold.guard import rmax_for_reader
from efold.ipc.messages import Permit, Prepared, Refused, SettleOutcome, Terminal, Usage, Welcome
from efold.worker.assignment import Assignment
from efold.worker.entry import main
from efold.worker.prep import FoldPrep
from efold.worker.reader import ReaderProbe
from efold.worker.session import ProbeSession

MODE, MARKER = sys.argv[1], sys.argv[2]


def first_time() -> bool:
    try:
        fd = os.open(MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def take_hold(session: ProbeSession) -> Permit:
    """Admit and consume one request, as the guard would just before its send."""
    reply = session.admit(request_id="q1", round=1, payload_digest="0" * 64,
                          rmax=rmax_for_reader("faux", "faux-extractive-v1"))
    assert isinstance(reply, Permit)
    session.consume(permit_id=reply.permit_id, body_digest="0" * 64)
    return reply


class KillAfterAdmit(ReaderProbe):
    """Takes a hold, then dies by SIGKILL before settling (once per run)."""

    def run(self, session: ProbeSession) -> Terminal:
        if first_time():
            take_hold(session)
            os.kill(os.getpid(), signal.SIGKILL)
        return super().run(session)


class HangAfterConsume(ReaderProbe):
    """Takes a hold, consumes it, then hangs (a request in flight, forever)."""

    def run(self, session: ProbeSession) -> Terminal:
        if first_time():
            take_hold(session)
            import time

            time.sleep(600)
        return super().run(session)


class OverspendSettlement(ReaderProbe):
    """Reports a settled usage of 40M input tokens, far above the envelope I: an
    integrity stop (input above the admitted budget), whatever it would cost."""

    def run(self, session: ProbeSession) -> Terminal:
        if first_time():
            reply = take_hold(session)
            session.settle(permit_id=reply.permit_id, outcome=SettleOutcome.SETTLED, code=None,
                           usage=Usage(input=40_000_000, output=100), tier="default",
                           cost=None)
        return super().run(session)


class AbsurdUsage(ReaderProbe):
    """Reports a usage of 2^58 input tokens on a lost outcome (priced, it would not fit
    a journal column): an integrity stop decided before pricing, never a crash."""

    def run(self, session: ProbeSession) -> Terminal:
        if first_time():
            reply = take_hold(session)
            session.settle(permit_id=reply.permit_id, outcome=SettleOutcome.LOST,
                           code=Code.LOOKUP_RESPONSE_FAILED,
                           usage=Usage(input=2**58, output=2**64 - 1), tier="priority",
                           cost=None)
        return super().run(session)


class HaltThenAdmit(ReaderProbe):
    """The guard stops the run (Halt), then the same child asks for another hold: the
    refusal code it gets goes into the marker file."""

    def run(self, session: ProbeSession) -> Terminal:
        if first_time():
            session.halt(Code.LOOKUP_PAYLOAD_FORBIDDEN)
            reply = session.admit(request_id="q2", round=1, payload_digest="0" * 64,
                                  rmax=rmax_for_reader("faux", "faux-extractive-v1"))
            with open(MARKER, "w") as f:
                f.write(reply.code.value if isinstance(reply, Refused) else "granted")
        return super().run(session)


class LeaveSurvivor(ReaderProbe):
    """Answers normally, but leaves a grandchild that ignores SIGTERM (once per run);
    its pid goes into the marker file."""

    def run(self, session: ProbeSession) -> Terminal:
        if first_time():
            import subprocess

            child = subprocess.Popen(
                [sys.executable, "-c", "import signal, time\n"
                 "signal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(120)"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            with open(MARKER, "w") as f:
                f.write(str(child.pid))
        return super().run(session)


class PrepLeavesSurvivor(FoldPrep):
    """Prepares normally, but leaves a grandchild that ignores SIGTERM (once)."""

    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        if first_time():
            import subprocess

            subprocess.Popen(
                [sys.executable, "-c", "import signal, time\n"
                 "signal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(120)"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        return super().run(assignment, welcome)


class EnvDump(FoldPrep):
    """Records the names of the variables it was started with, then prepares normally."""

    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        with open(MARKER, "w") as f:
            json.dump(sorted(os.environ), f)
        return super().run(assignment, welcome)


class PlantSymlink(FoldPrep):
    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        prepared = super().run(assignment, welcome)
        os.symlink("/etc/hostname", os.path.join(assignment.slot_dir, "snapshot", "planted"))
        return prepared


class PlantOversized(FoldPrep):
    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        prepared = super().run(assignment, welcome)
        with open(os.path.join(assignment.slot_dir, "big.bin"), "wb") as f:
            f.truncate(64 * 1024 * 1024 + 1)  # sparse: one byte over the per-file limit
        return prepared


FAULTS = {
    "kill-after-admit": ("probe", KillAfterAdmit), "overspend": ("probe", OverspendSettlement),
    "absurd-usage": ("probe", AbsurdUsage), "halt": ("probe", HaltThenAdmit),
    "survivor": ("probe", LeaveSurvivor), "hang": ("probe", HangAfterConsume),
    "env": ("prep", EnvDump), "symlink": ("prep", PlantSymlink),
    "prep-survivor": ("prep", PrepLeavesSurvivor),
    "oversized": ("prep", PlantOversized),
}

if __name__ == "__main__":
    kind = sys.argv[3]
    fault_kind, fault = FAULTS[MODE]
    body = fault() if kind == fault_kind else (ReaderProbe() if kind == "probe" else FoldPrep())
    sys.exit(main(sys.argv[3:], body=body))
