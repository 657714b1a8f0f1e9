"""What a child is asked to do, beyond the protocol: the task inside its ``Assignment``.

Content rule: a probe task carries the probe *question* (what the reader is asked) and
nothing evaluator-only (no expected values, categories or secrets), except inside its
optional ``judge`` (``JudgeTask``): the expected values the judge is shown, which only
the judge's own request carries, never the reader's payload. A prep task names a
trace file in the run directory and the digest it must have, and the fold to build with
its pin.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from efold.ipc.messages import Digest
from efold.protocol.regime import Regime

# Where a campaign's model requests go, all routes together (``campaign.route_kind``):
# nowhere (``faux``), only to loopback (``local``), or to a paid provider (``real``).
RouteKind = Literal["faux", "local", "real"]
ROUTE_KINDS: tuple[RouteKind, ...] = ("faux", "local", "real")


class Route(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where a child's model requests go: a campaign's provider profile, frozen for one
    launch. ``api`` is the guard's wire name (``openai-chat``, ``openai-responses``); the
    catalog that prices the model is ``catalog_file`` (None: the bundled catalog), which
    the child loads and checks against ``catalog_sha256`` before it sends anything. The
    credential is never here: it reaches only a child that sends, over its own
    descriptor (``efold.worker.credential``)."""

    provider: str
    model: str
    api: str
    base_url: str
    effort: str | None
    stream: bool
    catalog_file: str | None
    catalog_sha256: Digest
    max_output_tokens: int | None = None  # every request's reply limit (None: none sent)
    max_tokens_field: str = "max_completion_tokens"  # the Chat Completions field for it


class ProxyTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A proxy fold's wiring (``folds.proxy``): the variables that tell the proxy its
    upstream (efold's capture endpoint) and its port, and what the capture endpoint
    says when the proxy asks which model it fronts (the reader's model and its context
    window in estimated tokens)."""

    upstream_env: str
    port_env: str
    model: str
    context_window: int


class PrepTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True,
               tag="prep", tag_field="task"):
    """Build ``arm``'s checkpoint of a trace. ``command`` set: the fold is that external
    command (named ``arm``, limited to ``timeout_seconds``, run in ``cwd`` with ``env``
    added), or the proxy it starts when ``proxy`` is set. ``fold_sha256`` set: the
    fold's pin (``efold.folds.pinning``), recomputed by the child just before it builds;
    any difference refuses. Built by ``efold.controller.pilot.preparation.prep_task``."""

    arm: str
    trace_file: str  # path of the trace JSONL (reader-safe: no probes)
    trace_sha256: Digest
    command: list[str] | None = None
    timeout_seconds: float | None = None
    fold_sha256: Digest | None = None
    summariser: Route | None = None  # set: the arm's summaries are written by this model
    settings: dict[str, Any] | None = None  # the role's settings, passed to the fold
    cwd: str | None = None  # a command's working directory (None: inherited)
    env: dict[str, str] | None = None  # a command's extra environment variables
    proxy: ProxyTask | None = None  # set: ``command`` starts a proxy fold
    # The campaign requires isolation (``isolation = "required"``): the child refuses
    # to run fold code without both (``fold_isolation_unavailable``).
    isolation_required: bool = False
    # What this prep leaves (``controller.pilot.preparation``): ``checkpoint``, the arm's
    # checkpoint of ``trace_file`` (for a restart arm, the session file its first prep
    # left; for the ledger arm, given the ledger its last extraction committed);
    # ``session``, the first of a restart arm's two preps (``folds.registry.restarts``):
    # only the agent's durable session, ``SESSION_FILE``, its trace digest reported in
    # ``Prepared.snapshot_digest``; ``ledger``: extraction number ``extraction`` of the
    # ledger arm (``folds.ledger``) after ``ledger``, published as ``LEDGER_FILE``, its
    # sha256 reported.
    stage: Literal["checkpoint", "session", "ledger"] = "checkpoint"
    extraction: int = 0
    ledger: StageFile | None = None
    # A ledger extraction the summariser model writes: the input envelope of its route,
    # in tokens, which bounds the request (``folds.ledger_model.source_chars``).
    summariser_envelope: int | None = None
    # The campaign's probe mode offers the history lookup (``lookup-allowed-v1``).
    # False (recall-only, never encoded): the child publishes the checkpoint without
    # its store or tools, whatever the fold built (``folds.probe_modes.without_lookup``).
    offer_lookup: bool = False
    # A command's source tree (``folds.build_tree``): pinned with its fold, re-checked
    # by the child just before it builds. None (never encoded): none.
    build: str | None = None
    # A boundary case's fold regime (``folds.regime``): the child folds the trace in it.
    # None (never encoded): the plain regime, one fold of the whole trace.
    regime: Regime | None = None


class StageFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A file an earlier prep of the same checkpoint left, as the controller verified and
    journaled it: its path and digest (a durable session's, ``corpus.trace_digest``; a
    ledger's, the sha256 of its bytes)."""

    path: str
    sha256: Digest


# The durable session a restart arm's first prep leaves in its slot directory.
SESSION_FILE = "session.jsonl"


class JudgeTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The optional judge (a campaign's ``[judge]``): asked once after the reader's
    answer, on its own route, with the probe's expected values (``worker.judge``)."""

    route: Route
    rubric: list[str]
    pass_threshold: int
    expected: list[str]


class ProbeTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True,
                tag="probe", tag_field="task"):
    question: str
    instructions: str
    route: Route  # the reader's
    judge: JudgeTask | None = None  # None (omitted): no judge


class BoundaryTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True,
                   tag="boundary", tag_field="task"):
    """Continue a boundary case after the fold (``worker.boundary_body``): the case
    directory (reader-safe only in part: the child reads its sidecar for the
    continuation, the tools, the action limit and, on the faux route only, the faux
    agent's script; never its oracles' verdicts, which the controller decides) and the
    tree digest it must have, checked before anything of it is used."""

    case_dir: str
    case_sha256: Digest
    route: Route  # the agent's: the campaign's reader route


Task = PrepTask | ProbeTask | BoundaryTask
