"""One probe slot end to end: launch, serve, judge, receipt.

The child is launched as every child of the run is (``RunContext.launch``) and served
by ``controller.pilot.probe_server``; whatever happens to it (clean exit, crash, timeout, IPC
violation) ends in a journaled, contained launch, every sticky stop its containment
decided taken before anything else is launched. Then the slot is judged
(``controller.pilot.judging``, pure), the stops the verdict names are taken, and exactly one
receipt is written: journal first, then the file.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec

from efold.boundary.case import Case
from efold.controller.campaigns.stops import SlotEnd
from efold.controller.pilot.boundary_slots import CheckpointFacts, judge_boundary
from efold.controller.pilot.evidence import Evidence
from efold.controller.pilot.judging import JudgeFacts, judge_slot, slot_end
from efold.controller.pilot.probe_server import serve_probe
from efold.controller.pilot.receipts import write_receipt, write_receipt_off_loop
from efold.controller.processes.launcher import teardown_bound
from efold.controller.processes.subreaper import DIRECT_CHILDREN
from efold.controller.rundirs.run_context import LaunchEnd, RunContext
from efold.corpus.model import Probe
from efold.errors import Code
from efold.ipc.messages import Terminal, TerminalStatus
from efold.protocol.assignment import SnapshotRef
from efold.protocol.records import BoundaryRecord, PlannedSlot, Receipt
from efold.protocol.tasks import BoundaryTask, ProbeTask, Route
from efold.registry.files import write_all
from efold.worker.judge import judge_run_id


@dataclass(frozen=True)
class SlotResult:
    receipt: Receipt
    end: SlotEnd | None  # how the stop policy sees it; None: never admitted


@dataclass(frozen=True)
class BoundarySlot:
    """What a boundary slot needs beyond a question slot's: its case, the facts of the
    checkpoint it resumes from, the agent's route, and whether the route is real (the
    environment identity then names the runtime and the build)."""

    case: Case
    facts: CheckpointFacts
    route: Route
    real: bool


async def run_probe(ctx: RunContext, *, planned: PlannedSlot, probe: Probe, slot_dir: Path,
                    snapshot: SnapshotRef, cache_key: str, task: ProbeTask | BoundaryTask,
                    evidence: Evidence, boundary: BoundarySlot | None = None,
                    admit_after: anyio.Event | None = None,
                    hand_over: Callable[[], None] | None = None,
                    concluded: Callable[[Receipt, SlotEnd | None], None] | None = None,
                    overlap_request: bool = False) -> SlotResult:
    """One probe slot end to end; its receipt is written (journal, then file) here. A
    question slot is concluded as soon as its child's terminal arrives; a boundary slot
    (``boundary``) only after its child has exited, when its oracles are evaluated
    (``controller.pilot.boundary_slots``).

    ``admit_after``: see ``probe_server.serve_permits``. ``concluded``: called once a
    question slot's child has its ``DoneAck`` (its receipt written, its members
    durable), with the receipt and the slot's end as the stop policy sees it; the next
    slot's first admission waits for it (``places.Places``), not for this slot's
    teardown (exit, leftovers, reap, the exit row). ``hand_over``: called then too, or
    already at the first ``Admit`` with ``overlap_request`` (once ``admit_after`` is
    set): the next slot's launch, its child's start and restore then overlap this
    slot's teardown, and its request too with ``overlap_request``."""
    slot = planned.slot
    started = time.monotonic()
    watchdog = anyio.CancelScope()  # the slot's deadline, set at its launch below

    # The longest this slot's first admission may wait: the slot before it in its place
    # may have just been admitted, and runs to its deadline, then its teardown (a slot
    # that does not conclude at its DoneAck lets the next one in at its end).
    admit_wait = 0.0
    if admit_after is not None and not admit_after.is_set():
        admit_wait = ctx.probe_seconds + ctx.probe_margin + teardown_bound(ctx.containment)

    async def after_the_slot_before() -> None:
        """Wait for the slot before this one in its place to conclude; the wait does not
        count against this slot's own deadline, and its child's exchange timeout allows
        for it (``admit_wait``). Then the place passes on (with ``overlap_request``)."""
        if admit_after is not None and not admit_after.is_set():
            # Paused, not only extended afterwards: the slot before may run to its own
            # deadline, then be contained, well past this one's.
            left = watchdog.deadline - anyio.current_time()
            watchdog.deadline = math.inf
            await admit_after.wait()
            watchdog.deadline = anyio.current_time() + left
        if boundary is None and hand_over is not None and overlap_request:
            hand_over()

    # Journaled before the launch (a reused cache key refuses here), committed with the
    # launch row: the child confirms its cache key and snapshot against it.
    with ctx.journal.deferred():
        ctx.journal.record_assignment(slot, kind="probe", cache_key=cache_key,
                                      snapshot_digest=snapshot.digest)
    assignment = ctx.assignment(kind="probe", body="reader" if boundary is None else "boundary",
                                slot=slot, slot_dir=slot_dir, cache_key=cache_key,
                                snapshot=snapshot, task=task)
    # 19-C: the judge's requests are their own caller, on their own ledger key, under
    # the same cap; its terms are set before the slot's first admission.
    judge_key = judge_run_id(slot) if isinstance(task, ProbeTask) and task.judge else None
    if judge_key is not None and ctx.judge is not None:
        ctx.source.set_terms(judge_key, ctx.judge.terms)
    terminal: Terminal | None = None
    receipt: Receipt | None = None
    end = LaunchEnd()
    async with ctx.launch(assignment, end, credential=ctx.reader_credential) as handle:
        if handle is not None:  # None: it never started (end says why)
            watchdog.deadline = anyio.current_time() + ctx.probe_seconds + ctx.probe_margin
            with watchdog:
                ended = await serve_probe(ctx, handle, slot, judge_key, after_the_slot_before,
                                          admit_wait)
            if watchdog.cancelled_caught:
                end.failure = Code.WORKER_TIMEOUT
                raise TimeoutError
            if isinstance(ended, Code):  # a permit integrity violation (its stop is taken)
                end.failure = ended
            else:
                terminal = ended
                if boundary is None:
                    # Its members, then its receipt, in one commit, before ``DoneAck``.
                    await handle.note_members()
                    receipt = await _conclude(ctx, planned, probe, terminal, end.failure,
                                              evidence, started)
                if ctx.answers_file is not None:
                    keep_answer(ctx.answers_file, slot, terminal)
                await handle.acknowledge_done()
                if receipt is not None:
                    if concluded is not None:
                        concluded(receipt, slot_end(ctx.source.ledger(slot), receipt))
                    if hand_over is not None:
                        hand_over()
    if end.interrupted and terminal is None:
        end.failure = Code.INTERRUPTED  # the operator's, not the child's
    if terminal is None:
        # The worker is gone without a terminal: what it held is lost (whether its
        # request went out is unknown, so the hold stays retained).
        ctx.source.abandon_slot(slot, end.failure or Code.LOOKUP_WORKER_LOST)
        if judge_key is not None:
            ctx.source.abandon_slot(judge_key, end.failure or Code.LOOKUP_WORKER_LOST)
    if receipt is None:
        record = None
        if boundary is not None and terminal is not None \
                and terminal.status is TerminalStatus.ANSWERED:
            b = boundary
            # The oracles may run a contained command (``tests-pass``) as this process's
            # own, unregistered child: no other launch in flight may scan for orphans
            # until it is over (``DirectChildren.spawning``).
            with DIRECT_CHILDREN.spawning():
                record = await anyio.to_thread.run_sync(
                    lambda: judge_boundary(b.case, slot_dir, terminal.work_sha256, b.facts,
                                           b.route, real=b.real))
        receipt = await _conclude(ctx, planned, probe, terminal, end.failure, evidence,
                                  started, boundary=record)
    return SlotResult(receipt, slot_end(ctx.source.ledger(slot), receipt))


async def _conclude(ctx: RunContext, planned: PlannedSlot, probe: Probe,
                    terminal: Terminal | None, failure: Code | None, evidence: Evidence,
                    started: float, *, boundary: BoundaryRecord | None = None) -> Receipt:
    """Judge the slot (pure), take the stops the verdict names, write its receipt (its
    syncs off the event loop: ``receipts.write_receipt_off_loop``)."""
    judge = None if ctx.judge is None else JudgeFacts(
        ctx.source.ledger(judge_run_id(planned.slot)), ctx.judge.rubric,
        ctx.judge.pass_threshold)
    verdict = judge_slot(planned, probe, ctx.source.ledger(planned.slot), terminal=terminal,
                         failure=failure, evidence=evidence,
                         elapsed_ms=int((time.monotonic() - started) * 1000), judge=judge,
                         boundary=boundary)
    ctx.take_stops(verdict.stops, planned.slot)
    await write_receipt_off_loop(ctx.run_dir, ctx.journal, verdict.receipt)
    return verdict.receipt


def write_slot_receipt(ctx: RunContext, receipt: Receipt) -> None:
    """The slot's receipt and its status in the journal (``controller.pilot.receipts``)."""
    write_receipt(ctx.run_dir, ctx.journal, receipt)


def keep_answer(answers_file: Path, slot: str, terminal: Terminal) -> None:
    """Append one answered slot's answer to the run's private answers artifact
    (``--keep-answers``): owner-only, created on first use, each line written whole
    and fsynced. Reports never read it: they stay content-free. A run ended by a non-2xx
    answer adds its ``http`` evidence: status, kind and the server's sanitised words
    (``guard.wire.failure``), which only this owner-only file may hold."""
    line: dict[str, Any] = {"slot": slot, "status": terminal.status.value,
                            "answer": terminal.answer}
    if terminal.http is not None:
        line["http"] = msgspec.to_builtins(terminal.http)
    data = msgspec.json.encode(line) + b"\n"
    fd = os.open(answers_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
