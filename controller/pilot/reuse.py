"""A continuation's checkpoints built by an earlier link: reused only when they verify.

A continuation (``controller.rundirs.chain``) needs the checkpoints of the slots it
runs; an earlier link of its chain may have built them already (and paid for their
summaries). Each such checkpoint is taken from the latest earlier link whose journal
recorded it (an ``assignments`` row of kind ``checkpoint``: its snapshot digest, as the
controller verified it there): the snapshot's files are copied into this run's own
checkpoint directory, bounded and refusing links, and the copy is read back as any prep
child's snapshot is (``folds.read_checkpoint``), against the digest that earlier journal
holds. Only a copy that verifies is journaled here as the checkpoint (with the isolation
its build reported); anything else (the earlier run gone, a file changed, a digest that
differs) leaves the checkpoint to be prepared again, in a prep child, as in a first run.
No fold code runs for a reused checkpoint, and nothing is spent on it.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec

from efold.controller.pilot.prep_launch import PrepResult
from efold.controller.processes.tree import inspect_tree
from efold.controller.rundirs.aggregate import run_records
from efold.controller.rundirs.chain import located
from efold.controller.rundirs.run_context import RunContext
from efold.controller.rundirs.runroot import private_subdir
from efold.errors import EfoldError
from efold.folds import read_checkpoint
from efold.folds.snapshot import MAX_FILE_BYTES
from efold.isolation import Isolation
from efold.protocol.assignment import SnapshotRef
from efold.protocol.records import ChainLink
from efold.registry import publish_exclusive
from efold.registry.files import read_private
from efold.registry.journal import JournalReader
from efold.worker.prep import SNAPSHOT_DIR, snapshot_path

__all__ = ["Built", "earlier_checkpoints", "reuse_checkpoint"]

CHECKPOINTS_DIR: Final = "checkpoints"
_MAX_LINKS: Final = 999


@dataclass(frozen=True)
class Built:
    """A checkpoint an earlier link built: its snapshot there and the digest (and the
    isolation) that link's journal recorded for it."""

    snapshot: Path
    digest: str
    isolation: str | None


def earlier_checkpoints(link: ChainLink | None, run: Path) -> dict[str, Built]:
    """Per checkpoint key, the latest earlier link's journaled snapshot (empty for a
    run that continues nothing, or whose earlier links cannot be read)."""
    out: dict[str, Built] = {}
    here = run
    for _ in range(_MAX_LINKS):
        if link is None:
            break
        previous = located(link.previous, here)
        try:
            with JournalReader(previous) as journal:
                rows = journal.rows("assignments", "kind = 'checkpoint'")
            plan, _ = run_records(previous)
        except (EfoldError, OSError):
            break  # what cannot be read is prepared again
        for row in rows:
            out.setdefault(row["slot"], Built(
                snapshot_path(str(previous / CHECKPOINTS_DIR / row["slot"])),
                row["snapshot_digest"], row.get("isolation")))
        here, link = previous, plan.link
    return out


def reuse_checkpoint(ctx: RunContext, key: str, slot_dir: Path,
                     built: Built) -> PrepResult | None:
    """``built`` copied into ``slot_dir`` (this run's, fresh) and verified against its
    journaled digest, then journaled here; None when it does not verify (the caller
    prepares it again: ``slot_dir`` is then removed first, nothing of the copy kept)."""
    started = time.monotonic()
    target = slot_dir / SNAPSHOT_DIR
    try:
        private_subdir(slot_dir, SNAPSHOT_DIR)
        for name in sorted(os.listdir(built.snapshot)):
            data = read_private(built.snapshot, name,
                                max_bytes=MAX_FILE_BYTES)
            publish_exclusive(target, name, data)
        restored = read_checkpoint(target, expected_digest=built.digest)
        isolation = None if built.isolation is None else \
            msgspec.json.decode(built.isolation, type=Isolation)
    except (EfoldError, OSError, msgspec.DecodeError):
        shutil.rmtree(target, ignore_errors=True)  # ours, fresh: the prep child's place
        return None
    ctx.journal.record_assignment(key, kind="checkpoint", snapshot_digest=built.digest,
                                  isolation=built.isolation)
    return PrepResult(key, SnapshotRef(path=str(target), digest=built.digest), None,
                      inspect_tree(slot_dir), int((time.monotonic() - started) * 1000),
                      restored, isolation=isolation, reused=True)
