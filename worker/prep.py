"""The prep body: replay a trace through one fold arm offline and write the snapshot.

Runs with no credentials and makes no model request (the offline summariser is
deterministic). Writes only inside its private slot directory. A task that pins its fold
(``PrepTask.fold_sha256``) is refused with ``worker_digest_mismatch`` when the fold's
code changed since: the pin is recomputed right before the build.
"""

from __future__ import annotations

import os
from pathlib import Path

from efold.errors import Code, EfoldError
from efold.ipc.messages import Prepared, Welcome
from efold.protocol.assignment import Assignment
from efold.protocol.tasks import PrepTask
from efold.worker.errors import WorkerError
from efold.worker.verify import verify_digests

SNAPSHOT_DIR = "snapshot"


def _verify_fold_pin(task: PrepTask) -> None:
    """``worker_digest_mismatch`` unless the fold about to build is the one the task
    pins (an edited plugin or command after registration, or one no longer pinnable)."""
    if task.fold_sha256 is None:
        return
    from efold.folds.errors import FoldError
    from efold.folds.pinning import fold_sha256

    try:
        pin = fold_sha256(task)
    except FoldError as exc:
        raise WorkerError(Code.WORKER_DIGEST_MISMATCH, f"fold {task.arm}: {exc.detail}") from exc
    if pin != task.fold_sha256:
        raise WorkerError(Code.WORKER_DIGEST_MISMATCH, f"fold {task.arm} differs from its pin")


def snapshot_path(slot_dir: str) -> Path:
    return Path(slot_dir) / SNAPSHOT_DIR


class FoldPrep:
    """Registered as the ``fold`` prep body."""

    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        from efold.corpus import load_trace, trace_digest
        from efold.folds import TracePrefix, write_checkpoint
        from efold.folds.registry import fold_for

        verify_digests(assignment)
        task = assignment.task
        if not isinstance(task, PrepTask):
            raise WorkerError(Code.WORKER_USAGE, "a prep child needs a prep task")
        try:
            trace = load_trace(Path(task.trace_file).read_bytes())
            if trace_digest(trace) != task.trace_sha256:
                raise WorkerError(Code.WORKER_DIGEST_MISMATCH, "trace digest differs")
            _verify_fold_pin(task)
            # A command runs in this child's own environment: the controller's allowlist
            # plus the run markers.
            fold = fold_for(task.arm, task.command, timeout_s=task.timeout_seconds,
                            env=dict(os.environ))
            checkpoint = fold.build(TracePrefix.of(trace))
            manifest = write_checkpoint(checkpoint, snapshot_path(assignment.slot_dir))
        except WorkerError:
            raise
        except EfoldError as exc:
            raise WorkerError(Code.LOOKUP_PREPARATION_INVALID, exc.code.value) from exc
        sizes = [f.bytes for f in manifest.files]
        return Prepared(
            snapshot_digest=manifest.digest,
            files=len(sizes) + 1,
            bytes=sum(sizes),
            rejected={},
        )
