"""A real child program for the pilot's fault tests: the production entry point with a
faulty body. ``python -I faulty_child.py MODE MARKER KIND --ipc-fd N --key-fd M``; with
``--control-fd N`` instead of KIND..., the production fork-server template forking
such children (each one's body and hooks installed right after its fork).

MARKER is a file path: a fault fires only when the marker does not exist yet (the child
creates it first), so exactly one slot of a run is hit and the run can be seen going on.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from efold.errors import Code
from efold.guard import rmax_for_reader
from efold.ipc.messages import (
    Granted,
    Prepared,
    Refused,
    SettleOutcome,
    Terminal,
    UsageReport,
    Welcome,
)
from efold.protocol.assignment import Assignment
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


def take_hold(session: ProbeSession) -> Granted:
    """Admit and consume one request, as the guard would just before its send."""
    reply = session.admit(request_id="q1", round=1, payload_digest="0" * 64,
                          rmax=rmax_for_reader("faux", "faux-extractive-v1"))
    assert isinstance(reply, Granted)
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


class RoundsToTheWatchdog(ReaderProbe):
    """Asks round after round, each settled within its deadline, until the watchdog
    ends it (once per run): a slot that runs to its deadline, then is contained."""

    def run(self, session: ProbeSession) -> Terminal:
        if first_time():
            import time

            deadline = session.welcome.deadlines.run_ms / 1000
            for n in range(1, session.welcome.budgets.max_requests + 1):
                reply = session.admit(request_id=f"q{n}", round=n, payload_digest="0" * 64,
                                      rmax=rmax_for_reader("faux", "faux-extractive-v1"))
                assert isinstance(reply, Granted)
                session.consume(permit_id=reply.permit_id, body_digest="0" * 64)
                time.sleep(deadline * 0.8)
                session.settle(permit_id=reply.permit_id, outcome=SettleOutcome.SETTLED,
                               code=None, usage=UsageReport(input=10, output=10),
                               tier="default", cost=None)
            time.sleep(600)
        return super().run(session)


class HangAll(ReaderProbe):
    """Every probe child takes a hold, consumes it, then hangs (N requests in flight)."""

    def run(self, session: ProbeSession) -> Terminal:
        import time

        take_hold(session)
        time.sleep(600)
        return super().run(session)


class HangThroughSigterm(HangAfterConsume):
    """As ``hang``, but SIGTERM does not end it: containment must wait out its grace and
    SIGKILL it, so the run's shutdown lasts at least that grace (a window in which a
    repeated signal is sure to land)."""

    def run(self, session: ProbeSession) -> Terminal:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return super().run(session)


class OverspendSettlement(ReaderProbe):
    """Reports a settled usage of 40M input tokens, far above the envelope I: an
    integrity stop (input above the admitted budget), whatever it would cost."""

    def run(self, session: ProbeSession) -> Terminal:
        if first_time():
            reply = take_hold(session)
            session.settle(permit_id=reply.permit_id, outcome=SettleOutcome.SETTLED, code=None,
                           usage=UsageReport(input=40_000_000, output=100), tier="default",
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
                           usage=UsageReport(input=2**58, output=2**64 - 1), tier="priority",
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


class PrepPlantsHostileTree(FoldPrep):
    """Plants a hostile tree (tests/pilot/hostile_tree.py; MARKER is its pid file),
    then hangs: a fold whose build never returns (once; later preps are normal)."""

    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I: not on the path
        import hostile_tree

        if not os.path.exists(MARKER):
            hostile_tree.plant(MARKER)
            hostile_tree._hang()
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


class TamperSession(FoldPrep):
    """A restart arm's first prep that changes its durable session after reporting its
    digest (once): the fresh process must never build from it."""

    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        # The marker first: once isolated, the child writes only beneath its slot.
        tamper = getattr(assignment.task, "stage", None) == "session" and first_time()
        prepared = super().run(assignment, welcome)
        if tamper:
            path = os.path.join(assignment.slot_dir, "session.jsonl")
            os.chmod(path, 0o600)
            with open(path, "ab") as f:
                f.write(b"\n")
        return prepared


class TamperLedger(FoldPrep):
    """The ledger arm's second extraction drops the first extraction's entries and
    reports the digest of what it wrote (once): an extension the controller refuses."""

    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        task = assignment.task
        if getattr(task, "stage", None) != "ledger" or task.extraction != 2 or not first_time():
            return super().run(assignment, welcome)
        import msgspec

        from efold.digests import sha256_hex
        from efold.folds.ledger import LEDGER_FILE, decode_ledger, encode_ledger

        prepared = super().run(assignment, welcome)
        path = os.path.join(assignment.slot_dir, LEDGER_FILE)
        with open(path, "rb") as f:
            ledger = decode_ledger(f.read())
        first = ledger.extractions[0].added
        data = encode_ledger(msgspec.structs.replace(ledger, entries=ledger.entries[first:]))
        os.chmod(path, 0o600)
        with open(path, "wb") as f:
            f.write(data)
        return msgspec.structs.replace(prepared, snapshot_digest=sha256_hex(data))


FAULTS = {
    "kill-after-admit": ("probe", KillAfterAdmit), "overspend": ("probe", OverspendSettlement),
    "absurd-usage": ("probe", AbsurdUsage), "halt": ("probe", HaltThenAdmit),
    "survivor": ("probe", LeaveSurvivor), "hang": ("probe", HangAfterConsume),
    "rounds-to-the-watchdog": ("probe", RoundsToTheWatchdog),
    "hang-through-sigterm": ("probe", HangThroughSigterm), "hang-all": ("probe", HangAll),
    "env": ("prep", EnvDump), "symlink": ("prep", PlantSymlink),
    "prep-survivor": ("prep", PrepLeavesSurvivor),
    "prep-hostile": ("prep", PrepPlantsHostileTree),
    "oversized": ("prep", PlantOversized),
    "tamper-session": ("prep", TamperSession),
    "tamper-ledger": ("prep", TamperLedger),
}

# -- parametrized faults of the reliability suite (tests/reliability/test_child_faults.py)

# The probe child's protocol steps, in order: "die-at:<step>" SIGKILLs the first probe
# child of the run (first_time()) exactly there.
DIE_STEPS = ("before-hello", "after-hello", "after-ready", "after-admit", "after-consume",
             "after-settle", "after-terminal", "after-doneack")


def die(reached: str = "") -> None:
    """SIGKILL this child, first naming the point it reached in the marker file."""
    if reached:
        with open(MARKER, "w") as f:
            f.write(reached)
    os.kill(os.getpid(), signal.SIGKILL)


def dying_channel(step: str) -> type:
    """The production child channel, dying by SIGKILL at ``step`` (once per run)."""
    from efold.ipc.child_channel import ChildChannel
    from efold.ipc.messages import Admit, Consume, Granted, Hello, Ready, Settle

    after_reply = {"after-hello": Hello, "after-admit": Admit, "after-consume": Consume,
                   "after-settle": Settle, "after-doneack": Terminal}

    class DyingChannel(ChildChannel):
        _sending: object = None

        def request(self, msg):
            if step == "before-hello" and isinstance(msg, Hello) and first_time():
                die(step)
            self._sending = msg
            reply = super().request(msg)
            kind = after_reply.get(step)
            if kind is not None and isinstance(msg, kind) and first_time():
                # After Admit: only a granted hold counts (a refusal holds nothing).
                assert kind is not Admit or isinstance(reply, Granted)
                die(step)
            return reply

        def send(self, msg):
            super().send(msg)
            if step == "after-ready" and isinstance(msg, Ready) and first_time():
                die(step)

        def _io(self, frame, *, expect_reply):
            if step == "after-terminal" and isinstance(self._sending, Terminal) \
                    and first_time():
                self._sock.sendall(frame)  # the Terminal is out; its DoneAck never read
                die(step)
            return super()._io(frame, expect_reply=expect_reply)

    return DyingChannel


class TamperSnapshot(ReaderProbe):
    """Mode ``tamper-snapshot:<file>``: flips one byte of <file> in the checkpoint's pristine
    snapshot (after its prep child reported the digest), then restores as usual. The
    bytes stay tampered: every later probe of that checkpoint restores them too."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name

    def restore(self, assignment: Assignment) -> str:
        if assignment.snapshot is not None and first_time():
            path = os.path.join(assignment.snapshot.path, self._name)
            fd = os.open(path, os.O_RDWR)
            try:
                at = os.fstat(fd).st_size // 2
                byte = os.pread(fd, 1, at)
                os.pwrite(fd, bytes([byte[0] ^ 0x01]), at)
            finally:
                os.close(fd)
            with open(MARKER, "w") as f:
                f.write(f"{self._name} {at}")
        return super().restore(assignment)


class PrepDiesWriting(FoldPrep):
    """Mode ``prep-die-writing:<file>``: the first prep child writes the first half of the
    snapshot's <file> (every file before it complete), then SIGKILLs itself. The marker
    is claimed and opened before ``FoldPrep.run`` isolates the child: Landlock then
    refuses opening it, while a descriptor opened before stays writable."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name

    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        import efold.folds.snapshot as snapshot

        try:
            marker = os.open(MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return super().run(assignment, welcome)
        real = snapshot._write_new
        name = self._name

        def write_new(dir_fd: int, fname: str, data: bytes, *, sync: bool = True):
            if fname == name:
                fd = os.open(fname, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd)
                os.write(fd, data[: len(data) // 2])
                os.fsync(fd)
                os.close(fd)
                os.write(marker, f"{fname} {len(data) // 2}/{len(data)}".encode())
                os.kill(os.getpid(), signal.SIGKILL)
            return real(dir_fd, fname, data, sync=sync)

        snapshot._write_new = write_new
        return super().run(assignment, welcome)


class RaceAtBarrier(ReaderProbe):
    """Mode ``race:<K>``: the first K probe children of the run (each claims
    ``MARKER.<i>``, i < K) wait, after Ready, until all K have arrived, so their first
    Admits reach the controller together; each then waits again, its reply in hand,
    until all K have their replies (``MARKER.reply.<i>``), so no hold is consumed or
    settled before every racer was answered. Then they read as usual. Later children
    read at once."""

    def __init__(self, parties: int) -> None:
        super().__init__()
        self._parties = parties

    def _wait_for_all(self, prefix: str) -> None:
        import time

        deadline = time.monotonic() + 60
        while not all(os.path.exists(f"{prefix}{j}") for j in range(self._parties)):
            if time.monotonic() > deadline:
                raise SystemExit("the barrier never filled")
            time.sleep(0.005)

    def run(self, session: ProbeSession) -> Terminal:
        for i in range(self._parties):
            try:
                os.close(os.open(f"{MARKER}.{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            except FileExistsError:
                continue
            self._wait_for_all(f"{MARKER}.")
            session.admit = self._first_admit(session, session.admit, i)  # type: ignore[method-assign]
            break
        return super().run(session)

    def _first_admit(self, session: ProbeSession, admit: Any, party: int) -> Any:
        def first_admit(**kwargs: object) -> object:
            reply = admit(**kwargs)
            session.admit = admit  # type: ignore[method-assign]
            with open(f"{MARKER}.reply.{party}", "w") as f:
                f.write("granted" if isinstance(reply, Granted) else reply.code.value)
            self._wait_for_all(f"{MARKER}.reply.")
            return reply

        return first_admit


def witnessing_channel(witness_dir: str) -> type:
    """The production child channel, which, on its ``DoneAck``, reads the run's journal
    as any other process does (read-only: committed rows only) and writes down whether
    its slot's receipt and its own membership were there (``witness_dir/<pid>``)."""
    from efold.ipc.child_channel import ChildChannel
    from efold.ipc.messages import DoneAck
    from efold.registry.journal import JournalReader

    class WitnessingChannel(ChildChannel):
        def request(self, msg):
            reply = super().request(msg)
            if isinstance(msg, Terminal) and isinstance(reply, DoneAck):
                run_dir, slot = _ASSIGNED
                with JournalReader(run_dir) as reader:
                    seen = {"receipts": len(reader.rows("receipts", "slot = ?", (slot,))),
                            "members": len(reader.rows("members", "pid = ?",
                                                       (os.getpid(),)))}
                with open(os.path.join(witness_dir, str(os.getpid())), "w") as f:
                    json.dump(seen, f)
            return reply

    return WitnessingChannel


_ASSIGNED: list[str] = []  # this child's run directory and slot, once restored


class Witness(ReaderProbe):
    """A plain reader that remembers its run directory and slot for the witness."""

    def restore(self, assignment: Assignment) -> str:
        _ASSIGNED[:] = [assignment.run_dir, assignment.slot]
        return super().restore(assignment)


def parametrized(mode: str, kind: str) -> object | None:
    """The body for a parametrized mode (None: not one), installing its hooks."""
    name, _, arg = mode.partition(":")
    if name == "die-at":
        if arg not in DIE_STEPS:
            raise SystemExit(f"unknown step {arg}")
        if kind == "probe":
            import efold.worker.entry as entry

            entry.ChildChannel = dying_channel(arg)
            return ReaderProbe()
        return FoldPrep()
    if name == "witness-done-ack":
        if kind == "probe":
            import efold.worker.entry as entry

            entry.ChildChannel = witnessing_channel(MARKER)
            return Witness()
        return FoldPrep()
    if name == "race":
        return RaceAtBarrier(int(arg)) if kind == "probe" else FoldPrep()
    if name == "tamper-snapshot":
        return TamperSnapshot(arg) if kind == "probe" else FoldPrep()
    if name == "slow-template":  # the template's fault (at its start); children are plain
        return ReaderProbe() if kind == "probe" else FoldPrep()
    if name == "prep-die-writing":
        if kind == "prep":
            return PrepDiesWriting(arg)
        return ReaderProbe()
    return None


def body_for(kind: str) -> object:
    """The body a child of ``kind`` runs in MODE, its hooks installed: at a spawned
    child's start, or in a forked one right after the fork."""
    body = parametrized(MODE, kind)
    if body is None:
        fault_kind, fault = FAULTS[MODE]
        body = fault() if kind == fault_kind else (ReaderProbe() if kind == "probe" else FoldPrep())
    return body


if __name__ == "__main__":
    if sys.argv[3] == "--control-fd":  # the run's fork-server template, forking MODE's children
        from efold.worker import template

        if MODE == "slow-template" and first_time():  # MARKER: the run is opening
            import time

            time.sleep(3)

        sys.exit(template.main(sys.argv[3:], bodies=body_for))  # type: ignore[arg-type]
    kind = sys.argv[3]
    sys.exit(main(sys.argv[3:], body=body_for(kind)))  # type: ignore[arg-type]
