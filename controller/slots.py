"""Running one child: a prep launch per checkpoint, a probe launch per slot.

The controller side of the lockstep protocol, with the durable permit source answering
``Admit``/``Consume``/``Settle`` (journal first, then the reply). Whatever happens to the
child (clean exit, crash, timeout, IPC violation) ends in a journaled, contained launch
and, for a probe, exactly one receipt.

How a probe slot's status is decided (from the controller's own ledger, never from the
child's claim alone):
- no hold ever granted: ``unadmitted`` (an answer without any admitted request is an
  unguarded dispatch: a sticky integrity stop);
- holds granted, the worker lost / aborted / refused later: ``incomplete``;
- holds granted, an answer: ``completed`` (scored); an empty answer: ``invalid``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from efold.controller.containment import ContainmentPolicy
from efold.controller.errors import ControllerError
from efold.controller.launcher import WorkerHandle, supervise
from efold.controller.permits import (
    DurablePermitSource,
    Grant,
    PermitIntegrityError,
    SettleKind,
)
from efold.controller.records import (
    Availability,
    Exclusion,
    Outcome,
    PlannedSlot,
    Receipt,
    SlotStatus,
    Spend,
    Usage,
)
from efold.controller.stops import SlotEnd, StopPolicy
from efold.corpus.model import Probe
from efold.digests import sha256_hex
from efold.errors import Code, EfoldError
from efold.identity import ProcessIdentity
from efold.ipc.errors import IpcError, IpcPeerError
from efold.ipc.messages import (
    Admit,
    Budgets,
    Consume,
    Consumed,
    Deadlines,
    Permit,
    Prepared,
    Refused,
    Settle,
    Settled,
    Stop,
    Terminal,
    TerminalStatus,
    Welcome,
)
from efold.registry.errors import RegistryError
from efold.registry.journal import JournalWriter
from efold.worker.assignment import ASSIGNMENT_VERSION, Assignment, SnapshotRef
from efold.worker.tasks import PrepTask, ProbeTask

# IPC failures that are the peer's fault and break the protocol's integrity: sticky.
_INTEGRITY_IPC = frozenset({
    Code.IPC_BAD_MAC, Code.IPC_BINDING_MISMATCH, Code.IPC_OUT_OF_ORDER,
    Code.IPC_FRAME_TOO_LARGE, Code.IPC_BAD_MESSAGE, Code.IPC_SEQ_MISMATCH,
})


@dataclass
class RunContext:
    """What every launch of one run shares. Owned by the pilot (single writer)."""

    run_dir: Path
    journal: JournalWriter
    epoch: int
    controller: ProcessIdentity
    registration_digest: str
    plan_digest: str
    build_digest: str
    source: DurablePermitSource
    policy: StopPolicy
    budgets: Budgets
    prep_seconds: float
    probe_seconds: float
    containment: ContainmentPolicy = field(default_factory=ContainmentPolicy)
    hello_timeout_ms: int = 30_000
    # The child command line (the launcher's default: ``python -I -m efold.worker``).
    # Tests substitute a program that embeds the same entry point with a faulty body.
    program: tuple[str, ...] | None = None

    def launch_options(self) -> dict[str, object]:
        from efold.controller.childenv import child_environment

        options: dict[str, object] = {"policy": self.containment, "env": child_environment()}
        if self.program is not None:
            options["program"] = self.program
        return options

    def welcome(self, seconds: float) -> Welcome:
        ms = int(seconds * 1000)
        return Welcome(deadlines=Deadlines(run_ms=ms, exchange_ms=ms), budgets=self.budgets)

    def assignment(self, *, kind: str, body: str, slot: str, slot_dir: Path,
                   cache_key: str | None, snapshot: SnapshotRef | None,
                   task: PrepTask | ProbeTask) -> Assignment:
        return Assignment(
            version=ASSIGNMENT_VERSION, kind=kind,  # type: ignore[arg-type]
            body=body, run_dir=str(self.run_dir), slot_dir=str(slot_dir), epoch=self.epoch,
            slot=slot, controller=self.controller,
            registration_digest=self.registration_digest, plan_digest=self.plan_digest,
            build_digest=self.build_digest, cache_key=cache_key, snapshot=snapshot,
            hello_timeout_ms=self.hello_timeout_ms, task=task,
        )

    def record_stop(self, code: Code, slot: str | None) -> None:
        """A sticky stop of the run, journaled, with the policy's precedence."""
        self.policy.stop(code)
        self.source.stop(code)
        self.journal.record_stop(epoch=self.epoch, code=code.value, slot=slot, sticky=True)


# -- prep -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrepResult:
    key: str
    snapshot: SnapshotRef | None
    code: Code | None
    prepared: Prepared | None
    elapsed_ms: int


async def run_prep(ctx: RunContext, *, key: str, slot_dir: Path, task: PrepTask) -> PrepResult:
    """Build one checkpoint in a prep child; verify the snapshot it reports."""
    from efold.folds import read_checkpoint
    from efold.worker.prep import snapshot_path

    started = time.monotonic()
    assignment = ctx.assignment(kind="prep", body="fold", slot=key, slot_dir=slot_dir,
                                cache_key=None, snapshot=None, task=task)
    prepared: Prepared | None = None
    code: Code | None = None
    handle: WorkerHandle | None = None
    try:
        async with supervise(ctx.journal, assignment, **ctx.launch_options()) as handle:  # type: ignore[arg-type]
            with anyio.fail_after(ctx.prep_seconds):
                await handle.accept_hello(ctx.welcome(ctx.prep_seconds), timeout=ctx.prep_seconds)
                msg = await handle.channel.receive(timeout=ctx.prep_seconds)
                assert isinstance(msg, Prepared)  # the lockstep core admits nothing else
                prepared = msg
                await handle.acknowledge_done()
        exit_ = handle.containment
        if exit_ is not None and exit_.code is not None:
            ctx.record_stop(exit_.code, key)
    except RegistryError:
        raise  # the journal failed: stop the run
    except (EfoldError, TimeoutError) as exc:
        code = _own_code(handle) or (
            exc.code if isinstance(exc, EfoldError) else Code.WORKER_TIMEOUT)
    snapshot: SnapshotRef | None = None
    if prepared is not None and code is None:
        path = snapshot_path(str(slot_dir))
        try:
            read_checkpoint(path, expected_digest=prepared.snapshot_digest)
            snapshot = SnapshotRef(path=str(path), digest=prepared.snapshot_digest)
        except EfoldError:
            code = Code.LOOKUP_PREPARATION_INVALID
    if code is None and snapshot is None:
        code = Code.LOOKUP_PREPARATION_INVALID
    return PrepResult(key, snapshot, code, prepared, int((time.monotonic() - started) * 1000))


# -- probe ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """Evaluator-side facts about a slot, computed by the controller, never the child."""

    availability: Availability | None
    excluded: Exclusion | None
    checkpoint_sha256: str | None


@dataclass
class _Exchange:
    terminal: Terminal | None = None
    failure: Code | None = None
    own_abort: bool = False


async def _serve_probe(ctx: RunContext, handle: WorkerHandle, slot: str, ex: _Exchange) -> None:
    channel = handle.channel
    await handle.accept_hello(ctx.welcome(ctx.probe_seconds), timeout=ctx.probe_seconds)
    await handle.accept_ready(timeout=ctx.probe_seconds)
    source = ctx.source
    while True:
        msg = await channel.receive(timeout=ctx.probe_seconds)
        try:
            if isinstance(msg, Admit):
                grant = source.admit(slot=slot, request_id=msg.request_id, round=msg.round,
                                     payload_digest=msg.payload_digest, rmax_units=msg.rmax)
                if isinstance(grant, Grant):
                    await channel.reply(Permit(permit_id=grant.permit_id, hold=grant.hold_units))
                else:
                    await channel.reply(Refused(code=grant.code))
            elif isinstance(msg, Consume):
                source.consume(slot=slot, permit_id=msg.permit_id, body_digest=msg.body_digest)
                await channel.reply(Consumed())
            elif isinstance(msg, Settle):
                integrity = source.settle(
                    slot=slot, permit_id=msg.permit_id, kind=SettleKind(msg.outcome.value),
                    code=msg.code, usage=msg.usage.present() if msg.usage else None,
                    tier=msg.tier,
                )
                if integrity is not None:
                    ctx.record_stop(integrity, slot)
                await channel.reply(Settled())
            elif isinstance(msg, Terminal):
                ex.terminal = msg
                return
        except PermitIntegrityError as exc:
            ctx.record_stop(exc.code, slot)
            ex.failure = exc.code
            await channel.reply(Stop(code=exc.code))
            return


async def run_probe(ctx: RunContext, *, planned: PlannedSlot, probe: Probe, slot_dir: Path,
                    snapshot: SnapshotRef, cache_key: str, task: ProbeTask,
                    evidence: Evidence) -> tuple[Receipt, _Exchange]:
    """One probe slot end to end; its receipt is written (journal, then file) here."""

    slot = planned.slot
    started = time.monotonic()
    assignment = ctx.assignment(kind="probe", body="reader", slot=slot, slot_dir=slot_dir,
                                cache_key=cache_key, snapshot=snapshot, task=task)
    ex = _Exchange()
    receipt: Receipt | None = None
    handle: WorkerHandle | None = None
    try:
        async with supervise(ctx.journal, assignment, **ctx.launch_options()) as handle:  # type: ignore[arg-type]
            try:
                with anyio.fail_after(ctx.probe_seconds):
                    await _serve_probe(ctx, handle, slot, ex)
            except TimeoutError:
                ex.own_abort, ex.failure = True, Code.WORKER_TIMEOUT
                raise
            if ex.terminal is not None:
                receipt = _receipt(ctx, planned, probe, ex, evidence, started)
                _write(ctx, receipt)
                await handle.acknowledge_done()
        if handle.containment is not None and handle.containment.code is not None:
            ctx.record_stop(handle.containment.code, slot)
    except RegistryError:
        raise  # the journal failed: nothing more may be admitted or recorded; stop the run
    except (EfoldError, TimeoutError) as exc:
        if ex.failure is None:
            ex.failure = _own_code(handle) or (
                exc.code if isinstance(exc, EfoldError) else Code.WORKER_TIMEOUT)
        if isinstance(exc, IpcPeerError) and exc.code in _INTEGRITY_IPC:
            ctx.record_stop(exc.code, slot)
        elif isinstance(exc, ControllerError) and exc.code is Code.UNRECONCILED_CONTAINMENT:
            ctx.record_stop(exc.code, slot)
    except IpcError as exc:  # pragma: no cover - IpcError is an EfoldError
        ex.failure = exc.code
    if receipt is None:
        failure = ex.failure or Code.LOOKUP_WORKER_LOST
        kind = (SettleKind.OWN_ABORT_AFTER_SEND if ex.own_abort
                else SettleKind.INTEGRITY_STOP if failure is ctx.policy.stop_code
                else SettleKind.LOST)
        ctx.source.abandon_slot(slot, failure, kind)
        receipt = _receipt(ctx, planned, probe, ex, evidence, started)
        _write(ctx, receipt)
    return receipt, ex


def _own_code(handle: WorkerHandle | None) -> Code | None:
    """The fixed code a child that exited on its own reported through its exit status
    (``worker_digest_mismatch``, ``worker_snapshot_invalid``...), if it did."""
    if handle is None or handle.process.returncode is None:
        return None
    from efold.worker.exit_codes import code_for_exit_status

    return code_for_exit_status(handle.process.returncode)


def _write(ctx: RunContext, receipt: Receipt) -> None:
    from efold.controller.receipts import write_receipt

    write_receipt(ctx.run_dir, ctx.journal, receipt)
    ctx.journal.record_slot_status(receipt.slot, receipt.status.value, receipt.code)


def slot_end(receipt: Receipt, own_abort: bool) -> SlotEnd | None:
    """How the stop policy sees a finished slot (None: not admitted, invisible)."""
    if receipt.spend.admitted == 0:
        return None
    if receipt.status is SlotStatus.COMPLETED:
        return SlotEnd.COMPLETED
    if receipt.status is SlotStatus.INVALID:
        return SlotEnd.INVALID
    if own_abort:
        return SlotEnd.OWN_ABORT
    return SlotEnd.LOST if receipt.code not in _CAPACITY else SlotEnd.CAPACITY


_CAPACITY = frozenset({
    Code.NOT_ADMITTED_CAP.value, Code.LOOKUP_REQUEST_LIMIT.value,
    Code.NOT_ADMITTED_INPUT_ENVELOPE.value, Code.LOOKUP_STOPPED.value,
})


def _receipt(ctx: RunContext, planned: PlannedSlot, probe: Probe, ex: _Exchange,
             evidence: Evidence, started: float) -> Receipt:
    from efold.corpus import score

    led = ctx.source.ledger(planned.slot)
    usage = Usage(**{k: led.usage.get(k, 0) for k in Usage.__struct_fields__})
    spend = Spend(requests=led.requests, admitted=led.admitted,
                  settled_units=led.settled_units, retained_units=led.retained_units,
                  usage=usage, usage_known=led.usage_known)
    terminal = ex.terminal
    status: SlotStatus
    code: str | None = None
    outcome: Outcome | None = None
    correct: bool | None = None
    answer_sha: str | None = None
    if led.admitted == 0:
        status = SlotStatus.UNADMITTED
        if terminal is not None and terminal.status is TerminalStatus.ANSWERED:
            # An answer that no admitted request produced did not come through the guard.
            ctx.record_stop(Code.LOOKUP_UNGUARDED_DISPATCH, planned.slot)
            code = Code.LOOKUP_UNGUARDED_DISPATCH.value
        else:
            code = _code(terminal.code if terminal else ex.failure) or Code.LOOKUP_WORKER_LOST.value
    elif terminal is not None and terminal.status is TerminalStatus.ANSWERED and not led.lost \
            and not led.own_abort and led.terminal_code is None:
        status = SlotStatus.COMPLETED
        result = score(probe, terminal.answer)
        outcome, correct = result.outcome, result.correct
        answer_sha = sha256_hex(terminal.answer.encode())
    elif terminal is not None and terminal.status is TerminalStatus.FAILED \
            and not led.lost and not led.own_abort:
        status = SlotStatus.INVALID
        code = _code(terminal.code) or Code.LOOKUP_EMPTY_FINAL_OUTPUT.value
    else:
        status = SlotStatus.INCOMPLETE
        code = (_code(led.terminal_code) or _code(terminal.code if terminal else None)
                or _code(ex.failure) or Code.LOOKUP_WORKER_LOST.value)
    if terminal is not None and terminal.status in (TerminalStatus.INTEGRITY_STOP,
                                                    TerminalStatus.REFUSED) \
            and terminal.code is not None and terminal.code.value not in _CONTINUE:
        # A guard policy violation: sticky, whether or not a hold existed.
        ctx.record_stop(terminal.code, planned.slot)
    return Receipt(
        slot=planned.slot, role=planned.role, arm=planned.arm, trace_id=planned.trace_id,
        probe_id=planned.probe_id, category=planned.category, repeat=planned.repeat,
        status=status, code=code, outcome=outcome, correct=correct,
        availability=evidence.availability,
        excluded=evidence.excluded if status is SlotStatus.COMPLETED else None,
        spend=spend, lookup_calls=terminal.meter.calls if terminal else 0,
        answer_sha256=answer_sha, checkpoint_sha256=evidence.checkpoint_sha256,
        elapsed_ms=int((time.monotonic() - started) * 1000),
    )


_CONTINUE = frozenset({
    Code.NOT_ADMITTED_INPUT_ENVELOPE.value, Code.LOOKUP_REQUEST_LIMIT.value,
    Code.NOT_ADMITTED_CAP.value, Code.LOOKUP_STOPPED.value, Code.LOOKUP_SLOT_TERMINAL.value,
    Code.LOOKUP_EMPTY_FINAL_OUTPUT.value,
})


def _code(code: Code | None) -> str | None:
    return code.value if code is not None else None


def skipped_receipt(planned: PlannedSlot, code: Code) -> Receipt:
    """A slot visited but never launched: inventory-infeasible (``skipped``), or refused
    before any hold because its checkpoint could not be prepared or admission is closed
    (a sticky stop, the cap): ``unadmitted`` with that code."""
    return Receipt(
        slot=planned.slot, role=planned.role, arm=planned.arm, trace_id=planned.trace_id,
        probe_id=planned.probe_id, category=planned.category, repeat=planned.repeat,
        status=SlotStatus.SKIPPED if code is Code.INVENTORY_INFEASIBLE else SlotStatus.UNADMITTED,
        code=code.value,
    )
