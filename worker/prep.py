"""The prep body: replay a trace through one fold arm and write the snapshot.

Writes only inside its private slot directory, and so does its fold: before any fold
code runs the child isolates itself (``worker.fold_isolation``: Landlock writes only
beneath the slot, a private ``TMPDIR``, no network unless it sends to a summariser
route) and reports how in ``Prepared.isolation``. A task that pins its fold
(``PrepTask.fold_sha256``) is refused with ``worker_digest_mismatch`` when the fold's
code changed since: the pin is recomputed right before the build.

Model requests: by default none. The compaction arms' summaries come from the
deterministic offline summariser, and such a child imports neither the guard nor an HTTP
client. When the task names a summariser model (``PrepTask.summariser``) and the arm is
a built-in compaction arm (``folds.registry.uses_summariser``; an external command uses
none), each summary is one guarded, paid request on that route (``summariser_for``):
through the guard ``worker.route.route_guard`` builds, with the credential the
controller passed on this child's credential pipe (if any), under permits the
controller's durable source grants on this prep's slot, its checkpoint key
(``PermitSession``, ``efold-prep-v2``). The guard is built at the first summary only, so
a build that never compacts sends nothing and imports nothing more. A summary request
that is refused, lost or stopped fails the prep with its code (``WorkerError``).

A proxy fold (``PrepTask.proxy``, ``folds.proxy``) runs its proxy in a private data
directory of this slot (``fold-data/``); the proxy's own upstream calls are answered the
same way, by the deterministic summariser offline or as guarded requests on the
summariser route (``proxy_summarise``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from efold.errors import Code, EfoldError
from efold.ipc.errors import IpcError
from efold.ipc.messages import Prepared, Welcome
from efold.protocol.assignment import Assignment
from efold.protocol.tasks import SESSION_FILE, PrepTask, Route, StageFile
from efold.worker.errors import WorkerError
from efold.worker.session import PermitSession
from efold.worker.verify import verify_digests

if TYPE_CHECKING:
    from efold.corpus.model import Trace
    from efold.folds.capture import Summarise
    from efold.folds.fold import Fold
    from efold.folds.summary import Summariser
    from efold.guard.request import Guard
    from efold.isolation import Isolation
    from efold.worker.permit_client import SessionPermitSource

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


def summary_payload(route: Route, messages: list[dict[str, str]]) -> dict[str, Any]:
    """One summary request in the route's wire format, within the guard's allowlists
    (``folds.request`` has the item shapes): Chat Completions sends ``messages`` as
    they are (usage asked for when streaming); Responses sends the system text as
    ``instructions`` and every other message as an input item; Messages sends the system
    text as ``system`` and every other message as a one-``text``-block message. Nothing
    is stored server-side; the route's options ride along (``route_options``); no tools,
    no cache key."""
    from efold.worker.route import route_options

    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    if route.api == "anthropic-messages":
        turns = [{"role": m["role"], "content": [{"type": "text", "text": m["content"]}]}
                 for m in messages if m["role"] != "system"]
        body: dict[str, Any] = {"model": route.model, "messages": turns}
        if system:
            body["system"] = system
        return {**body, **route_options(route)}
    if route.api == "openai-chat":
        return {"model": route.model, "messages": messages, "store": False,
                **route_options(route)}
    items = [
        {"type": "message", "role": m["role"],
         "content": [{"type": "output_text" if m["role"] == "assistant" else "input_text",
                      "text": m["content"]}]}
        for m in messages if m["role"] != "system"
    ]
    return {"model": route.model, "instructions": system, "input": items, "store": False,
            **route_options(route)}


class _SummaryRoute:
    """The summariser's way to its model: every summary request is a guarded run of its
    own (one round, its own request id ``SLOT-sN``, a ledger extraction's ``SLOT-pK-sN``) over this child's one permit source.
    A summary is not a round of a conversation: it carries no prior output, and the
    probe run's limit of 10 rounds does not apply to it; what bounds a checkpoint's
    summaries is ``summariser.max_requests``, which the controller's permit source holds
    the prep to (the next admission refuses: ``lookup_request_limit``)."""

    def __init__(self, route: Route, session: PermitSession, *, stage: str = "") -> None:
        self._route = route
        self._session = session
        # A ledger extraction's ``-pN``: the checkpoint's stages share its key, never an id.
        self._stage = stage
        self._source: SessionPermitSource | None = None
        self._sent = 0  # summary requests begun so far

    def complete(self, messages: list[dict[str, str]]) -> str:
        """Send one summary request; its reply text (``WorkerError`` with the request's
        code, or the stop the guard took, when it did not settle)."""
        from efold.worker.route import reply_text

        guard, source = self._open()
        result = guard.request(summary_payload(self._route, messages))
        if not result.ok:
            code = source.stop_code or result.code or Code.LOOKUP_STOPPED
            raise WorkerError(code, f"summary request {result.outcome.value}")
        return reply_text(result.output_items)

    def _open(self) -> tuple[Guard, SessionPermitSource]:
        from efold.worker.credential import credential
        from efold.worker.permit_client import SessionPermitSource
        from efold.worker.route import route_guard

        session = self._session
        if self._source is None:
            self._source = SessionPermitSource(session)
        self._sent += 1
        # The slot's own deadline per request: the controller's watchdog allows a
        # margin beyond it, so a slow request ends as our own abort, not a kill.
        guard = route_guard(self._route, self._source,
                            run_id=f"{session.assignment.slot}{self._stage}-s{self._sent}",
                            deadline_s=session.welcome.deadlines.run_ms / 1000,
                            cache_key=None, credential=credential())
        return guard, self._source


def summariser_for(task: PrepTask, session: PermitSession | None) -> Summariser | None:
    """The summariser a prep of ``task`` builds with: None (the fold's own, offline)
    unless the task names a summariser model and the arm is one it writes for; then
    one whose summaries are requests on that route through ``session``."""
    from efold.folds.registry import uses_summariser

    route = task.summariser
    if route is None or task.command is not None or not uses_summariser(task.arm):
        return None  # (a proxy fold's calls are answered by ``proxy_summarise``)
    if session is None:
        raise WorkerError(Code.WORKER_USAGE, "a summarising prep needs a permit session")
    from efold.folds.model_summary import model_summariser

    return model_summariser(_SummaryRoute(route, session).complete)


PROXY_DATA_DIR = "fold-data"


def proxy_summarise(task: PrepTask, session: PermitSession | None) -> Summarise:
    """How a proxy fold's own upstream calls are answered: by the deterministic
    summariser offline, or as guarded, metered requests on the task's summariser route
    (each call one request, its messages flattened to text: ``flat_messages``)."""
    from efold.folds.proxy import deterministic_summary

    if task.summariser is None:
        return deterministic_summary
    if session is None:
        raise WorkerError(Code.WORKER_USAGE, "a summarising prep needs a permit session")
    complete = _SummaryRoute(task.summariser, session).complete
    return lambda messages: complete(flat_messages(messages))


def flat_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """A proxy's chat messages as plain-text ``system``/``user``/``assistant`` messages,
    the shape every summary request has: tool calls written out after the text, tool
    results as owner text, anything else dropped."""
    from efold.folds.capture import content_text

    flat: list[dict[str, str]] = []
    for m in messages:
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("system", "developer", "user", "assistant", "tool"):
            continue
        text = content_text(m.get("content"))
        for call in m.get("tool_calls") or ():
            function = (call.get("function") or {}) if isinstance(call, dict) else {}
            text += f"\n(tool call {function.get('name')} {function.get('arguments')})"
        if role == "tool":
            role, text = "user", f"Tool result: {text}"
        flat.append({"role": "system" if role == "developer" else role, "content": text})
    return flat


def fold_of(task: PrepTask, slot_dir: str, session: PermitSession | None) -> Fold:
    """The fold ``task`` names. A command runs in this child's own environment (the
    controller's allowlist plus the run markers) with the role's ``env`` added."""
    from efold.folds.external import DEFAULT_TIMEOUT_S
    from efold.folds.registry import fold_for

    env = {**os.environ, **(task.env or {})}
    from efold.folds.registry import extracts_ledger, makes_opaque

    if task.command is None and makes_opaque(task.arm) and task.summariser is not None:
        if session is None:
            raise WorkerError(Code.WORKER_USAGE, "a compacting prep needs a permit session")
        from efold.folds.provider_compact import ENDPOINTS, ProviderCompactFold
        from efold.worker.compact_route import CompactRoute

        route = task.summariser
        return ProviderCompactFold(ENDPOINTS[task.arm], CompactRoute(route, session).compact,
                                   provider=route.provider)
    if task.proxy is not None and task.command is not None:
        from efold.folds.proxy import ProxyFold

        p = task.proxy
        return ProxyFold(
            task.arm, task.command, upstream_env=p.upstream_env, port_env=p.port_env,
            model=p.model, context_window=p.context_window,
            summarise=proxy_summarise(task, session),
            data_dir=Path(slot_dir) / PROXY_DATA_DIR,
            timeout_s=DEFAULT_TIMEOUT_S if task.timeout_seconds is None else task.timeout_seconds,
            env=env, cwd=task.cwd,
        )
    if task.ledger is not None and extracts_ledger(task):
        from efold.folds.arms import LedgerColdFold
        from efold.folds.ledger import decode_ledger

        return LedgerColdFold(decode_ledger(read_stage_file(task.ledger)))
    return fold_for(task.arm, task.command, timeout_s=task.timeout_seconds, env=env,
                    cwd=task.cwd, summariser=summariser_for(task, session),
                    lookup=task.offer_lookup)


FAILURE_FILE = "prep-failure.json"
FAILURE_DETAIL_CHARS = 500


def _write_failure(slot_dir: str, exc: EfoldError) -> None:
    """Leave ``{"code", "detail"}`` of a failed build in the slot directory, complete or
    absent (published: temp file, fsync, link). Only efold's fixed code and its short
    detail, never a trace or a plugin's output; best effort, so that the failure itself
    still exits with its status when this cannot be written."""
    import msgspec

    from efold.registry.files import publish_exclusive

    body = {"code": exc.code.value, "detail": exc.detail[:FAILURE_DETAIL_CHARS]}
    try:
        publish_exclusive(slot_dir, FAILURE_FILE, msgspec.json.encode(body))
    except (EfoldError, OSError, ValueError):
        pass


def _leave_session(trace: Trace, slot_dir: str, isolation: Isolation) -> Prepared:
    """The first prep of a restart arm: replay the trace into the agent's durable session
    (``folds.arms.durable_session``) and publish it as ``SESSION_FILE``, a trace of its
    own whose digest the controller journals and hands to the fresh process that builds
    the checkpoint from it."""
    from efold.corpus import dump_trace, trace_digest
    from efold.corpus.model import Trace
    from efold.folds import TracePrefix
    from efold.folds.arms import durable_session
    from efold.registry.files import publish_exclusive

    session = Trace(trace.header, durable_session(TracePrefix.of(trace)))
    data = dump_trace(session)
    publish_exclusive(slot_dir, SESSION_FILE, data)
    return Prepared(snapshot_digest=trace_digest(session), files=1, bytes=len(data),
                    rejected={}, isolation=isolation)


def read_stage_file(stage: StageFile) -> bytes:
    """The bytes of a file an earlier prep of this checkpoint left, as the controller
    journaled them (``worker_digest_mismatch`` when they differ now)."""
    from efold.digests import sha256_hex
    from efold.input_files import TRACE_LIMIT
    from efold.registry.files import read_private

    path = Path(stage.path)
    try:  # bounded, owner-only, no link on the way
        data = read_private(path.parent, path.name, max_bytes=TRACE_LIMIT)
    except EfoldError as exc:
        raise WorkerError(Code.WORKER_DIGEST_MISMATCH, f"an earlier stage's file: {exc.detail}") from exc
    if sha256_hex(data) != stage.sha256:
        raise WorkerError(Code.WORKER_DIGEST_MISMATCH, "an earlier stage's file differs")
    return data


def _extract_ledger(task: PrepTask, trace: Trace, slot_dir: str, isolation: Isolation,
                    session: PermitSession | None) -> Prepared:
    """Extraction ``task.extraction`` of the ledger arm (``folds.ledger``), after the
    ledger the previous extraction committed: published as ``LEDGER_FILE``. With a
    summariser route, that model writes it (one guarded request through ``session``);
    without, the deterministic extractor."""
    from efold.digests import sha256_hex
    from efold.folds import TracePrefix
    from efold.folds.ledger import (
        LEDGER_FILE,
        Extractor,
        decode_ledger,
        deterministic,
        encode_ledger,
        extract,
    )
    from efold.registry.files import publish_exclusive

    extractor: Extractor = deterministic
    if task.summariser is not None:
        if session is None:
            raise WorkerError(Code.WORKER_USAGE, "an extracting prep needs a permit session")
        from efold.folds.ledger_model import ALLOWANCE_TOKENS, model_extractor, source_bytes

        envelope = task.summariser_envelope or ALLOWANCE_TOKENS[0]
        extractor = model_extractor(
            _SummaryRoute(task.summariser, session, stage=f"-p{task.extraction}").complete,
            max_source_bytes=source_bytes(task.extraction, envelope))
    previous = None if task.ledger is None else decode_ledger(read_stage_file(task.ledger))
    data = encode_ledger(extract(previous, TracePrefix.of(trace), task.extraction, extractor))
    publish_exclusive(slot_dir, LEDGER_FILE, data)
    return Prepared(snapshot_digest=sha256_hex(data), files=1, bytes=len(data),
                    rejected={}, isolation=isolation)


class FoldPrep:
    """Registered as the ``fold`` prep body (a ``SendingPrepBody``)."""

    def __init__(self) -> None:
        self._session: PermitSession | None = None

    def bind_session(self, session: PermitSession) -> None:
        self._session = session

    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        from efold.corpus import load_trace, trace_digest
        from efold.folds import TracePrefix, write_checkpoint
        from efold.folds.probe_modes import without_lookup
        from efold.folds.regime import fold_case
        from efold.worker.fold_isolation import empty_private_tmp, isolate_prep

        verify_digests(assignment)
        task = assignment.task
        if not isinstance(task, PrepTask):
            raise WorkerError(Code.WORKER_USAGE, "a prep child needs a prep task")
        # Before any fold code: pinning an entry point imports it.
        isolation = isolate_prep(task, assignment.slot_dir)
        try:
            trace = load_trace(Path(task.trace_file).read_bytes())
            if trace_digest(trace) != task.trace_sha256:
                raise WorkerError(Code.WORKER_DIGEST_MISMATCH, "trace digest differs")
            _verify_fold_pin(task)
            if task.stage == "session":
                return _leave_session(trace, assignment.slot_dir, isolation)
            if task.stage == "ledger":
                return _extract_ledger(task, trace, assignment.slot_dir, isolation,
                                       self._session)
            fold = fold_of(task, assignment.slot_dir, self._session)
            prefix = TracePrefix.of(trace, settings=task.settings)
            checkpoint = (fold.build(prefix) if task.regime is None
                          else fold_case(fold, prefix, mode=task.regime.mode,
                                         target=task.regime.target))
            if not task.offer_lookup:
                checkpoint = without_lookup(checkpoint)
            manifest = write_checkpoint(checkpoint, snapshot_path(assignment.slot_dir))
        except (WorkerError, IpcError):
            raise  # our own refusals, a Stop, a broken channel: each exits with its code
        except EfoldError as exc:
            # The fold's own code, as a claim the controller may show (never act on).
            _write_failure(assignment.slot_dir, exc)
            raise WorkerError(Code.LOOKUP_PREPARATION_INVALID, exc.code.value) from exc
        finally:
            empty_private_tmp(assignment.slot_dir)
        sizes = [f.bytes for f in manifest.files]
        return Prepared(
            snapshot_digest=manifest.digest,
            files=len(sizes) + 1,
            bytes=sum(sizes),
            rejected={},
            isolation=isolation,
        )
