"""One prep launch: a contained prep child builds one checkpoint.

Prep protocol (docs/architecture.md §3): ``Hello`` ; ``Welcome`` ;
``Prepared{snapshot_digest, ...}`` ; ``DoneAck``. Whatever happens to the child ends in
a journaled, contained launch, every sticky stop its containment decided taken before
anything else launches. Then the controller checks the tree the child left
(``controller.tree``) and reads the snapshot it reports back, as data, against the
digest it reported (``read_checkpoint``); only a verified snapshot is journaled as the
checkpoint and handed to the probe slots.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import anyio

from efold.controller.run_context import WATCHDOG_MARGIN_S, LaunchEnd, RunContext
from efold.controller.tree import TreeReport, inspect_tree
from efold.errors import Code, EfoldError
from efold.folds import read_checkpoint
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


async def run_prep(ctx: RunContext, *, key: str, slot_dir: Path, task: PrepTask) -> PrepResult:
    """Build one checkpoint in a prep child; check its tree; verify and journal the
    snapshot it reports."""
    started = time.monotonic()
    assignment = ctx.assignment(kind="prep", body="fold", slot=key, slot_dir=slot_dir,
                                cache_key=None, snapshot=None, task=task)
    prepared: Prepared | None = None
    end = LaunchEnd()
    async with ctx.launch(assignment, end) as handle:
        with anyio.fail_after(ctx.prep_seconds + WATCHDOG_MARGIN_S):
            await handle.accept_hello(ctx.welcome(ctx.prep_seconds), timeout=ctx.prep_seconds)
            prepared = await handle.accept_prepared(timeout=ctx.prep_seconds)
            await handle.acknowledge_done()
    code = end.failure
    if end.interrupted:
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
