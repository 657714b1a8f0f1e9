"""One prep launch: a contained prep child builds one checkpoint.

Prep protocol ``efold-prep-v2`` (docs/architecture.md §3): ``Hello`` ; ``Welcome`` ;
the summariser's permit exchanges, if any ; ``Prepared{snapshot_digest, ...}`` ;
``DoneAck``. Whatever happens to the child ends in a journaled, contained launch, every
sticky stop its containment decided taken before anything else launches. Then the
controller checks the tree the child left (``controller.processes.tree``) and reads the snapshot
it reports back, as data, against the digest it reported (``read_checkpoint``); only a
verified snapshot is journaled as the checkpoint and handed to the probe slots.

A prep whose task names a summariser (``PrepTask.summariser``) and whose fold calls
it (a built-in compaction arm or a proxy fold: ``folds.registry.calls_summariser``) is
an auxiliary
caller: its summary requests are served by ``probe_server.serve_permits`` from the
run's durable permit source, under the run's cap, on the slot named by the checkpoint
key and held to the summariser's terms (its Rmax, ``max_requests`` per checkpoint, its
prices); the summariser's credential, if any, reaches that child alone. Any other prep
child has no route: an ``Admit`` from it is ``lookup_preparation_forbidden``.

A prep that is not prepared fails with the controller's own code: when its child
failed after a summary request was refused (the refusal's code) or lost (the loss's
code, its hold retained), that code, not the child's generic exit; the holds a dead
child left open are abandoned as lost (``PermitLedger.abandon_slot``).

A failed prep may also carry the child's **claim** of why its fold failed
(``PrepCause``): the ``prep-failure.json`` a prep child leaves in its slot directory
when the build raised (``worker.prep``), read bounded and decoded into a closed shape,
its code one of the fold and corpus codes. It is shown to the operator next to the
controller's code and never decides anything: the child runs the fold, so whatever it
wrote is untrusted text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final

import anyio
import msgspec

from efold.controller.errors import ControllerError
from efold.controller.pilot.probe_server import PermitLog, serve_permits
from efold.controller.processes.tree import TreeReport, inspect_tree
from efold.controller.rundirs.run_context import LaunchEnd, RunContext
from efold.corpus import load_trace, trace_digest
from efold.digests import sha256_hex
from efold.errors import Code, EfoldError
from efold.folds import read_checkpoint
from efold.folds.ledger import LEDGER_FILE, check_extension, decode_ledger
from efold.folds.registry import calls_summariser
from efold.folds.snapshot import RestoredCheckpoint
from efold.input_files import TRACE_LIMIT
from efold.ipc.messages import Prepared
from efold.isolation import Isolation
from efold.protocol.assignment import SnapshotRef
from efold.protocol.tasks import SESSION_FILE, PrepTask
from efold.registry.files import read_private
from efold.worker.prep import FAILURE_DETAIL_CHARS, FAILURE_FILE, snapshot_path

CAUSE_MAX_BYTES: Final = 4096
_CODES = list(Code)
# The codes a fold's build can fail with: errors.py's corpus/ and folds/ sections, which
# are adjacent (from the first corpus code up to the first worker code).
CAUSE_CODES: Final = frozenset(
    _CODES[_CODES.index(Code.TRACE_SCHEMA_INVALID):_CODES.index(Code.WORKER_KEY_INVALID)])


class PrepCause(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Why a prep child says its fold failed: a claim for the operator, never a decision
    (the controller's own ``PrepResult.code`` is the failure)."""

    code: str  # a member of ``CAUSE_CODES``
    detail: Annotated[str, msgspec.Meta(max_length=FAILURE_DETAIL_CHARS)]


@dataclass(frozen=True)
class PrepResult:
    key: str
    snapshot: SnapshotRef | None  # None: not prepared (``code`` says why)
    code: Code | None
    tree: TreeReport
    elapsed_ms: int
    restored: RestoredCheckpoint | None = None  # the snapshot as verified (for evidence)
    cause: PrepCause | None = None  # a failed prep's claimed fold code (informational)
    # How its fold ran (``efold.isolation``), as the child reported it in ``Prepared``;
    # None when it reported none (it failed first).
    isolation: Isolation | None = None
    # Copied from an earlier link of its chain and verified there (``pilot.reuse``): no
    # prep child built it in this run.
    reused: bool = False


def read_cause(slot_dir: Path) -> PrepCause | None:
    """The cause a failed prep child left in ``slot_dir``, or None: absent, unsafe
    (a link, not ours, larger than ``CAUSE_MAX_BYTES``), malformed, or a code that is not
    a fold or corpus code. Non-printable characters of the detail become ``?``."""
    try:
        raw = read_private(slot_dir, FAILURE_FILE, max_bytes=CAUSE_MAX_BYTES)
        cause = msgspec.json.decode(raw, type=PrepCause)
    except (EfoldError, msgspec.DecodeError):
        return None
    if cause.code not in CAUSE_CODES:
        return None
    detail = "".join(c if c.isprintable() else "?" for c in cause.detail)
    return PrepCause(cause.code, detail)


def sends_summaries(task: PrepTask) -> bool:
    """Whether a prep child of ``task`` sends summary requests: its task names a
    summariser and its fold is a built-in compaction arm (a command uses none)."""
    return task.summariser is not None and calls_summariser(task)


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
        # Before the first admission on the key: its requests are the summariser's (a
        # ledger's later extractions find them set: one key, one budget per checkpoint).
        if ctx.source.terms(key) != summariser.terms:
            ctx.source.set_terms(key, summariser.terms)
        credential = summariser.credential
    assignment = ctx.assignment(kind="prep", body="fold", slot=key, slot_dir=slot_dir,
                                cache_key=None, snapshot=None, task=task)
    prepared: Prepared | None = None
    log = PermitLog()
    end = LaunchEnd()
    async with ctx.launch(assignment, end, credential=credential) as handle:
        if handle is not None:  # None: it never started (end says why)
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
    if code is None and prepared is not None and task.stage != "checkpoint":
        snapshot = _verified_stage(task, slot_dir, prepared.snapshot_digest)
        if snapshot is not None:
            with ctx.journal.unsynced():  # as a checkpoint's row, below
                ctx.journal.record_assignment(stage_key(key, task), kind=task.stage,
                                              snapshot_digest=snapshot.digest)
    elif code is None and prepared is not None:
        path = snapshot_path(str(slot_dir))
        try:
            restored = read_checkpoint(path, expected_digest=prepared.snapshot_digest)
        except EfoldError:
            code = Code.LOOKUP_PREPARATION_INVALID
        else:
            snapshot = SnapshotRef(path=str(path), digest=prepared.snapshot_digest)
            isolation = prepared.isolation
            # Committed, not synced here: nothing acts on the row until a later commit
            # that is synced first (the next launch's, before its Hello is answered; a
            # probe's assignment names this snapshot), and one fdatasync covers every
            # commit before it. The event loop does not wait on the disk for it.
            with ctx.journal.unsynced():
                ctx.journal.record_assignment(
                    key, kind="checkpoint", snapshot_digest=snapshot.digest,
                    isolation=None if isolation is None
                    else msgspec.json.encode(isolation).decode())
    if code is None and snapshot is None:
        code = Code.LOOKUP_PREPARATION_INVALID
    return PrepResult(key, snapshot, code, tree, int((time.monotonic() - started) * 1000),
                      restored if snapshot is not None else None,
                      read_cause(slot_dir) if prepared is None else None,
                      None if prepared is None else prepared.isolation)


def stage_key(key: str, task: PrepTask) -> str:
    """The journal's assignment row of what an earlier prep of checkpoint ``key`` left
    (a restart arm's durable session, a ledger extraction): its own row, as every
    assignment is once per name."""
    return f"{key}#ledger{task.extraction}" if task.stage == "ledger" else f"{key}#{task.stage}"


def _verified_stage(task: PrepTask, slot_dir: Path, digest: str) -> SnapshotRef | None:
    """What an earlier prep left, read back as data (bounded, owner-only, not a link)
    and checked; None when it is not what it must be. A durable session is a trace
    whose digest the child reported. A ledger's bytes have the sha256 the child
    reported, and it is the extraction its task asked for after the ledger the
    previous extraction committed (``folds.ledger.check_extension``)."""
    name = SESSION_FILE if task.stage == "session" else LEDGER_FILE
    try:
        data = read_private(slot_dir, name, max_bytes=TRACE_LIMIT)
        if task.stage == "session":
            ok = trace_digest(load_trace(data)) == digest
        else:
            before = None if task.ledger is None else read_private(
                Path(task.ledger.path).parent, LEDGER_FILE, max_bytes=TRACE_LIMIT)
            previous = None if before is None else decode_ledger(before)
            ok = (sha256_hex(data) == digest
                  and (task.ledger is None or sha256_hex(before or b"") == task.ledger.sha256)
                  and check_extension(previous, decode_ledger(data), task.extraction) is None)
    except EfoldError:
        return None
    return SnapshotRef(path=str(slot_dir / name), digest=digest) if ok else None


def _summary_failure(ctx: RunContext, key: str, log: PermitLog) -> Code | None:
    """Why the summary requests of an unprepared checkpoint failed, from the controller's
    own records: the code its ledger closed the key with (a loss or an integrity
    outcome), else the last refusal it answered; None when neither happened."""
    return ctx.source.ledger(key).terminal_code or log.refused
