"""Running one child: a prep launch per checkpoint, a probe launch per slot.

The controller side of the lockstep protocol, with the durable permit source answering
``Admit``/``Consume``/``Settle`` (journal first, then the reply). Whatever happens to the
child (clean exit, crash, timeout, IPC violation) ends in a journaled, contained launch,
every sticky stop its containment decided taken before anything else is launched, and,
for a probe, exactly one receipt.

How a probe slot's status is decided (from the controller's own ledger, never from the
child's claim alone):
- no hold ever granted: ``unadmitted`` (an answer without any admitted request is an
  unguarded dispatch: a sticky integrity stop);
- holds granted, then lost / aborted / refused later: ``incomplete``;
- holds granted and an answer: ``completed`` (scored); a failed answer: ``invalid``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from efold.controller.containment import ContainmentPolicy
from efold.controller.launcher import WorkerHandle, supervise
from efold.controller.permits import DurablePermitSource
from efold.controller.receipts import write_receipt
from efold.controller.stops import SlotEnd, StopPolicy
from efold.controller.tree import TreeReport, inspect_tree
from efold.corpus.model import Availability, Outcome, Probe
from efold.digests import sha256_hex
from efold.errors import Code, EfoldError
from efold.folds.snapshot import RestoredCheckpoint
from efold.guard.ledger import PermitIntegrityError, SettleKind
from efold.guard.permits import CONTINUABLE_CODES, Permit, child_code
from efold.identity import ProcessIdentity
from efold.ipc.messages import (
    Admit,
    BudgetGrant,
    Consume,
    Consumed,
    DeadlineGrant,
    Granted,
    Halt,
    Halted,
    Prepared,
    Refused,
    Settle,
    Settled,
    Stop,
    Terminal,
    TerminalStatus,
    Welcome,
)
from efold.protocol.assignment import ASSIGNMENT_VERSION, Assignment, SnapshotRef
from efold.protocol.records import (
    Exclusion,
    PlannedSlot,
    Receipt,
    SlotSpend,
    SlotStatus,
    TokenCounts,
)
from efold.protocol.tasks import PrepTask, ProbeTask
from efold.registry.errors import RegistryError
from efold.registry.journal import JournalWriter

# IPC failures that are the peer's fault and break the protocol's integrity: sticky.
_INTEGRITY_IPC = frozenset({
    Code.IPC_BAD_MAC, Code.IPC_BINDING_MISMATCH, Code.IPC_OUT_OF_ORDER,
    Code.IPC_FRAME_TOO_LARGE, Code.IPC_BAD_MESSAGE, Code.IPC_SEQ_MISMATCH,
})
# The controller's watchdog outlasts the deadline it grants the child, so a child can
# abort its own request first (an own abort, settled by the child) before it is killed.
# Invariant: > guard.transport.ABORT_BOUND_S, the most a transport overruns a deadline.
WATCHDOG_MARGIN_S = 5.0


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
    budgets: BudgetGrant
    prep_seconds: float
    probe_seconds: float
    containment: ContainmentPolicy = field(default_factory=ContainmentPolicy)
    hello_timeout_ms: int = 30_000
    # The child command line (the launcher's default: ``python -I -m efold.worker``).
    # Tests substitute a program that embeds the same entry point with a faulty body.
    program: tuple[str, ...] | None = None
    # Invariant: each sticky code is journaled once per run, however often it is taken.
    _journaled: set[Code] = field(default_factory=set)
    # The signal that interrupted the run (SIGINT/SIGTERM), once; then admission is
    # closed (an ``interrupted`` sticky stop) and the launch in flight is contained.
    interrupted: int | None = None
    # The cancel scope of the launch in flight, if any (``launch_scope``).
    _launch_scope: anyio.CancelScope | None = None

    def launch_options(self) -> dict[str, object]:
        from efold.controller.childenv import child_environment

        options: dict[str, object] = {"policy": self.containment, "env": child_environment()}
        if self.program is not None:
            options["program"] = self.program
        return options

    def welcome(self, seconds: float) -> Welcome:
        ms = int(seconds * 1000)
        return Welcome(deadlines=DeadlineGrant(run_ms=ms, exchange_ms=ms), budgets=self.budgets)

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

    def record_stop(self, code: Code, slot: str | None, *, journaled: bool = False) -> None:
        """Take a sticky stop of the run (journaling it unless it already is), with the
        policy's precedence: admission closes at once."""
        self.policy.stop(code)
        self.source.stop(code)
        if not journaled and code not in self._journaled:
            self.journal.record_stop(epoch=self.epoch, code=code.value, slot=slot, sticky=True)
        self._journaled.add(code)

    @contextmanager
    def launch_scope(self) -> Iterator[anyio.CancelScope]:
        """The scope one launch runs in: an interruption cancels it, and the launcher
        contains the child (shielded) on the way out. ``cancelled_caught`` then says the
        launch was interrupted."""
        with anyio.CancelScope() as scope:
            self._launch_scope = scope
            try:
                if self.interrupted is not None:
                    scope.cancel()
                yield scope
            finally:
                self._launch_scope = None

    def interrupt(self, signum: int) -> bool:
        """The operator interrupted the run: close admission (a journaled ``interrupted``
        stop) and cancel the launch in flight. Only the first signal counts; False for a
        repeat, which changes nothing (containment is never skipped)."""
        if self.interrupted is not None:
            return False
        self.interrupted = signum
        self.record_stop(Code.INTERRUPTED, None)
        if self._launch_scope is not None:
            self._launch_scope.cancel()
        return True

    def adopt_containment(self, handle: WorkerHandle | None, slot: str) -> None:
        """Every sticky stop a containment episode decided (``lookup_worker_lost``,
        ``unreconciled_containment``) becomes the run's before anything else launches."""
        episode = handle.containment if handle is not None else None
        if episode is not None:
            for code in episode.stops:
                self.record_stop(code, slot, journaled=episode.persisted)

    def failure_of(self, exc: BaseException, handle: WorkerHandle | None, slot: str) -> Code:
        """The code a failed launch stands for: the child's own (its exit status) when
        it exited by itself, else the failure's. Sticky: an IPC integrity violation, and
        a digest mismatch (the code, registration or a fold changed under the run:
        every later child would refuse too, and the run must not end as complete)."""
        code = _own_code(handle)
        if code is None:
            code = exc.code if isinstance(exc, EfoldError) else Code.WORKER_TIMEOUT
        if code in _INTEGRITY_IPC or code is Code.WORKER_DIGEST_MISMATCH:
            self.record_stop(code, slot)
        return code


def _own_code(handle: WorkerHandle | None) -> Code | None:
    """The fixed code a child that exited on its own reported through its exit status
    (``worker_digest_mismatch``, ``worker_snapshot_invalid``...), if it did."""
    if handle is None or handle.process.returncode is None:
        return None
    from efold.protocol.exit_codes import code_for_exit_status

    return code_for_exit_status(handle.process.returncode)


# -- prep -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrepResult:
    key: str
    snapshot: SnapshotRef | None
    code: Code | None
    tree: TreeReport
    elapsed_ms: int
    restored: RestoredCheckpoint | None = None  # the snapshot as verified (for evidence)


async def run_prep(ctx: RunContext, *, key: str, slot_dir: Path, task: PrepTask) -> PrepResult:
    """Build one checkpoint in a prep child; check its tree; verify and journal the
    snapshot it reports."""
    from efold.folds import read_checkpoint
    from efold.worker.prep import snapshot_path

    started = time.monotonic()
    assignment = ctx.assignment(kind="prep", body="fold", slot=key, slot_dir=slot_dir,
                                cache_key=None, snapshot=None, task=task)
    prepared: Prepared | None = None
    code: Code | None = None
    handle: WorkerHandle | None = None
    with ctx.launch_scope() as scope:
        try:
            async with supervise(ctx.journal, assignment, **ctx.launch_options()) as handle:  # type: ignore[arg-type]
                with anyio.fail_after(ctx.prep_seconds + WATCHDOG_MARGIN_S):
                    await handle.accept_hello(ctx.welcome(ctx.prep_seconds),
                                              timeout=ctx.prep_seconds)
                    msg = await handle.channel.receive(timeout=ctx.prep_seconds)
                    assert isinstance(msg, Prepared)  # the lockstep core admits nothing else
                    prepared = msg
                    await handle.acknowledge_done()
        except RegistryError:
            raise  # the journal failed: nothing more may be recorded; the run stops
        except (EfoldError, TimeoutError) as exc:
            code = ctx.failure_of(exc, handle, key)
        finally:
            ctx.adopt_containment(handle, key)
    if scope.cancelled_caught:
        code, prepared = Code.INTERRUPTED, None
    tree = inspect_tree(slot_dir)
    if code is None and not tree.ok:
        code = Code.PREFLIGHT_TREE_INVALID
    snapshot: SnapshotRef | None = None
    restored: RestoredCheckpoint | None = None
    if code is None and prepared is not None:
        path = snapshot_path(str(slot_dir))
        try:
            restored = read_checkpoint(path, expected_digest=prepared.snapshot_digest)
        except EfoldError:
            code = Code.LOOKUP_PREPARATION_INVALID
        else:
            snapshot = SnapshotRef(path=str(path), digest=prepared.snapshot_digest)
            ctx.journal.record_assignment(key, kind="checkpoint",
                                          snapshot_digest=snapshot.digest)
    if code is None and snapshot is None:
        code = Code.LOOKUP_PREPARATION_INVALID
    return PrepResult(key, snapshot, code, tree, int((time.monotonic() - started) * 1000),
                      restored if snapshot is not None else None)


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
                if isinstance(grant, Permit):
                    await channel.reply(Granted(permit_id=grant.permit_id, hold=grant.hold_units))
                else:
                    await channel.reply(Refused(code=grant.code))
            elif isinstance(msg, Consume):
                source.consume(slot=slot, permit_id=msg.permit_id, body_digest=msg.body_digest)
                await channel.reply(Consumed())
            elif isinstance(msg, Settle):
                integrity = source.settle(
                    slot=slot, permit_id=msg.permit_id, kind=SettleKind(msg.outcome.value),
                    code=msg.code, usage=msg.usage.present() if msg.usage else None,
                    tier=msg.tier, cost_claim=msg.cost,
                )
                if integrity is not None:
                    ctx.record_stop(integrity, slot)
                await channel.reply(Settled())
            elif isinstance(msg, Halt):
                # The child's guard stopped the run: close admission before answering.
                ctx.record_stop(child_code(msg.code, integrity=True) or Code.CHILD_CODE_FORBIDDEN,
                                slot)
                await channel.reply(Halted())
            elif isinstance(msg, Terminal):
                ex.terminal = msg
                return
        except PermitIntegrityError as exc:
            ctx.record_stop(exc.code, slot)
            ex.failure = exc.code
            await channel.reply(Stop(code=exc.code))
            return


@dataclass(frozen=True)
class SlotResult:
    receipt: Receipt
    end: SlotEnd | None  # how the stop policy sees it; None: never admitted


async def run_probe(ctx: RunContext, *, planned: PlannedSlot, probe: Probe, slot_dir: Path,
                    snapshot: SnapshotRef, cache_key: str, task: ProbeTask,
                    evidence: Evidence) -> SlotResult:
    """One probe slot end to end; its receipt is written (journal, then file) here."""
    slot = planned.slot
    started = time.monotonic()
    # Journaled before the launch: the child confirms its cache key and snapshot here.
    ctx.journal.record_assignment(slot, kind="probe", cache_key=cache_key,
                                  snapshot_digest=snapshot.digest)
    assignment = ctx.assignment(kind="probe", body="reader", slot=slot, slot_dir=slot_dir,
                                cache_key=cache_key, snapshot=snapshot, task=task)
    ex = _Exchange()
    receipt: Receipt | None = None
    handle: WorkerHandle | None = None
    with ctx.launch_scope() as scope:
        try:
            async with supervise(ctx.journal, assignment, **ctx.launch_options()) as handle:  # type: ignore[arg-type]
                try:
                    with anyio.fail_after(ctx.probe_seconds + WATCHDOG_MARGIN_S):
                        await _serve_probe(ctx, handle, slot, ex)
                except TimeoutError:
                    ex.failure = Code.WORKER_TIMEOUT
                    raise
                if ex.terminal is not None:
                    receipt = _judge(ctx, planned, probe, ex, evidence, started)
                    write_slot_receipt(ctx, receipt)
                    await handle.acknowledge_done()
        except RegistryError:
            raise  # the journal failed: nothing more may be admitted or recorded; stop
        except (EfoldError, TimeoutError) as exc:
            if ex.failure is None:
                ex.failure = ctx.failure_of(exc, handle, slot)
        finally:
            ctx.adopt_containment(handle, slot)
    if scope.cancelled_caught and receipt is None:
        ex.failure = Code.INTERRUPTED  # the operator's, not the child's
    if receipt is None:
        # The worker is gone without a terminal: what it held is lost (whether its
        # request went out is unknown, so the hold stays retained).
        ctx.source.abandon_slot(slot, ex.failure or Code.LOOKUP_WORKER_LOST)
        receipt = _judge(ctx, planned, probe, ex, evidence, started)
        write_slot_receipt(ctx, receipt)
    return SlotResult(receipt, _slot_end(ctx.source, receipt))


def write_slot_receipt(ctx: RunContext, receipt: Receipt) -> None:
    write_receipt(ctx.run_dir, ctx.journal, receipt)
    ctx.journal.record_slot_status(receipt.slot, receipt.status.value, receipt.code)


def _slot_end(source: DurablePermitSource, receipt: Receipt) -> SlotEnd | None:
    """From the controller's ledger, never from codes the child chose."""
    led = source.ledger(receipt.slot)
    if led.admitted == 0:
        return None
    if receipt.status is SlotStatus.COMPLETED:
        return SlotEnd.COMPLETED
    if receipt.status is SlotStatus.INVALID:
        return SlotEnd.INVALID
    if led.lost:
        return SlotEnd.LOST
    if led.own_abort:
        return SlotEnd.OWN_ABORT
    return SlotEnd.CAPACITY


def _judge(ctx: RunContext, planned: PlannedSlot, probe: Probe, ex: _Exchange,
           evidence: Evidence, started: float) -> Receipt:
    """The slot's receipt, from the ledger and the terminal; takes the stops it implies."""
    from efold.corpus import score

    led = ctx.source.ledger(planned.slot)
    usage = TokenCounts(**{k: led.usage.get(k, 0) for k in TokenCounts.__struct_fields__})
    spend = SlotSpend(requests=led.requests, admitted=led.admitted,
                  settled_units=led.settled_units, retained_units=led.retained_units,
                  usage=usage, usage_known=led.usage_known)
    terminal = ex.terminal
    claimed = None
    if terminal is not None:
        claimed = child_code(terminal.code,
                             integrity=terminal.status is TerminalStatus.INTEGRITY_STOP)
        if terminal.status is TerminalStatus.INTEGRITY_STOP or (
                terminal.status is TerminalStatus.REFUSED and claimed is not None
                and claimed not in CONTINUABLE_CODES):
            # A guard policy violation: sticky, whether or not a hold existed.
            assert claimed is not None
            ctx.record_stop(claimed, planned.slot)
    status: SlotStatus
    code: Code | None = None
    outcome: Outcome | None = None
    correct: bool | None = None
    answer_sha: str | None = None
    answered = terminal is not None and terminal.status is TerminalStatus.ANSWERED
    if led.admitted == 0:
        status = SlotStatus.UNADMITTED
        if answered:
            # An answer that no admitted request produced did not come through the guard.
            ctx.record_stop(Code.LOOKUP_UNGUARDED_DISPATCH, planned.slot)
            code = Code.LOOKUP_UNGUARDED_DISPATCH
        else:
            code = claimed or ex.failure or Code.LOOKUP_WORKER_LOST
    elif terminal is not None and answered and led.terminal_code is None:
        status = SlotStatus.COMPLETED
        result = score(probe, terminal.answer)
        outcome, correct = result.outcome, result.correct
        answer_sha = sha256_hex(terminal.answer.encode())
    elif terminal is not None and terminal.status is TerminalStatus.FAILED \
            and led.terminal_code is None:
        status = SlotStatus.INVALID
        code = claimed or Code.LOOKUP_EMPTY_FINAL_OUTPUT
    else:
        status = SlotStatus.INCOMPLETE
        code = led.terminal_code or claimed or ex.failure or Code.LOOKUP_WORKER_LOST
    return Receipt(
        slot=planned.slot, role=planned.role, arm=planned.arm, trace_id=planned.trace_id,
        probe_id=planned.probe_id, category=planned.category, repeat=planned.repeat,
        status=status, code=code.value if code is not None else None,
        outcome=outcome, correct=correct, availability=evidence.availability,
        excluded=evidence.excluded if status is SlotStatus.COMPLETED else None,
        spend=spend, lookup_calls=terminal.meter.calls if terminal else 0,
        answer_sha256=answer_sha, checkpoint_sha256=evidence.checkpoint_sha256,
        elapsed_ms=int((time.monotonic() - started) * 1000),
    )


def refused_receipt(planned: PlannedSlot, code: Code) -> Receipt:
    """A slot visited but never launched: inventory-infeasible (``skipped``), or refused
    before any hold because its checkpoint could not be prepared or admission is closed
    (a sticky stop, the cap, the run deadline): ``unadmitted`` with that code."""
    return Receipt(
        slot=planned.slot, role=planned.role, arm=planned.arm, trace_id=planned.trace_id,
        probe_id=planned.probe_id, category=planned.category, repeat=planned.repeat,
        status=SlotStatus.SKIPPED if code is Code.INVENTORY_INFEASIBLE else SlotStatus.UNADMITTED,
        code=code.value,
    )
