"""One prep launch: a contained prep child builds one checkpoint.

Prep protocol ``efold-prep-v2`` (docs/architecture.md §3): ``Hello`` ; ``Welcome`` ;
the summariser's permit exchanges, if any ; ``Prepared{snapshot_digest, ...}`` ;
``DoneAck``. Whatever happens to the child ends in a journaled, contained launch, every
sticky stop its containment decided taken before anything else launches. Then the
controller checks the tree the child left (``controller.tree``) and reads the snapshot
it reports back, as data, against the digest it reported (``read_checkpoint``); only a
verified snapshot is journaled as the checkpoint and handed to the probe slots.

A prep whose task names a summariser (``PrepTask.summariser``) and whose arm
summarises (``folds.registry.uses_summariser``, no external command) is an auxiliary
caller: its summary requests are served by ``probe_server.serve_permits`` from the
run's durable permit source, under the run's cap, on the slot named by the checkpoint
key and held to the summariser's terms (its Rmax, ``max_requests`` per checkpoint, its
prices); the summariser's credential, if any, reaches that child alone. Any other prep
child has no route: an ``Admit`` from it is ``lookup_preparation_forbidden``.

A prep that is not prepared fails with the controller's own code: when its child
failed after a summary request was refused (the refusal's code) or lost (the loss's
code, its hold retained), that code, not the child's generic exit; the holds a dead
child left open are abandoned as lost (``PermitLedger.abandon_slot``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import anyio

from efold.controller.errors import ControllerError
from efold.controller.probe_server import PermitLog, serve_permits
from efold.controller.run_context import LaunchEnd, RunContext
from efold.controller.tree import TreeReport, inspect_tree
from efold.errors import Code, EfoldError
from efold.folds import read_checkpoint
from efold.folds.registry import uses_summariser
from efold.folds.snapshot import RestoredCheckpoint
from efold.ipc.messages import Prepared
from efold.protocol.assignment import SnapshotRef
from efold.protocol.tasks import PrepTask
from efold.worker.prep import snapshot_path


@dataclass(frozen=True)
class PrepResult:
    key: str
    snapshot: SnapshotRef | None  # None: not prepared (``code`` says why)
    code: Code | None
    tree: TreeReport
    elapsed_ms: int
    restored: RestoredCheckpoint | None = None  # the snapshot as verified (for evidence)


def sends_summaries(task: PrepTask) -> bool:
    """Whether a prep child of ``task`` sends summary requests: its task names a
    summariser and its fold is a built-in compaction arm (a command uses none)."""
    return task.summariser is not None and task.command is None and uses_summariser(task.arm)


async def run_prep(ctx: RunContext, *, key: str, slot_dir: Path, task: PrepTask) -> PrepResult:
    """Build one checkpoint in a prep child (serving its summary requests, if it sends);
    check its tree; verify and journal the snapshot it reports."""
    started = time.monotonic()
    sends = sends_summaries(task)
    credential: bytes | None = None
    if sends:
        summariser = ctx.summariser
        if summariser is None or summariser.route != task.summariser:
            raise ControllerError(Code.LOOKUP_ROUTE_MISMATCH,
                                  "the prep task's summariser is not the run's")
        # Before the first admission on the key: its requests are the summariser's.
        ctx.source.set_terms(key, summariser.terms)
        credential = summariser.credential
    assignment = ctx.assignment(kind="prep", body="fold", slot=key, slot_dir=slot_dir,
                                cache_key=None, snapshot=None, task=task)
    prepared: Prepared | None = None
    log = PermitLog()
    end = LaunchEnd()
    async with ctx.launch(assignment, end, credential=credential) as handle:
        try:
            with anyio.fail_after(ctx.prep_seconds + ctx.prep_margin):
                await handle.accept_hello(ctx.welcome(ctx.prep_seconds),
                                          timeout=ctx.prep_seconds)
                ended = await serve_permits(ctx, handle.channel, key, until=(Prepared,),
                                            timeout=ctx.prep_seconds, admitting=sends, log=log)
        except TimeoutError:
            end.failure = Code.WORKER_TIMEOUT
            raise
        if isinstance(ended, Code):  # a permit integrity violation (its stop is taken)
            end.failure = ended
        else:
            prepared = ended
            await handle.acknowledge_done()
    code = end.failure
    if end.interrupted:
        prepared = None
    if prepared is None:
        failed = (Code.INTERRUPTED if end.interrupted
                  else _summary_failure(ctx, key, log) or code or Code.LOOKUP_PREPARATION_INVALID)
        # The child is gone: what it still held is lost (whether its request went out
        # is unknown, so the hold stays retained).
        ctx.source.abandon_slot(key, failed)
        code = failed
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


def _summary_failure(ctx: RunContext, key: str, log: PermitLog) -> Code | None:
    """Why the summary requests of an unprepared checkpoint failed, from the controller's
    own records: the code its ledger closed the key with (a loss or an integrity
    outcome), else the last refusal it answered; None when neither happened."""
    return ctx.source.ledger(key).terminal_code or log.refused
