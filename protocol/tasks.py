"""What a child is asked to do, beyond the protocol: the task inside its ``Assignment``.

Content rule: a probe task carries the probe *question* (what the reader is asked) and
nothing evaluator-only (no expected values, categories or secrets). A prep task names a
trace file in the run directory and the digest it must have, and the fold to build with
its pin.
"""

from __future__ import annotations

import msgspec

from efold.ipc.messages import Digest


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


class PrepTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True,
               tag="prep", tag_field="task"):
    """Build ``arm``'s checkpoint of a trace. ``command`` set: the fold is that external
    command (named ``arm``, limited to ``timeout_seconds``). ``fold_sha256`` set: the
    fold's pin (``efold.folds.pinning``), recomputed by the child just before it builds;
    any difference refuses. Built by ``efold.controller.preparation.prep_task``."""

    arm: str
    trace_file: str  # path of the trace JSONL (reader-safe: no probes)
    trace_sha256: Digest
    command: list[str] | None = None
    timeout_seconds: float | None = None
    fold_sha256: Digest | None = None
    summariser: Route | None = None  # set: the arm's summaries are written by this model


class ProbeTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="probe", tag_field="task"):
    question: str
    instructions: str
    route: Route  # the reader's


Task = PrepTask | ProbeTask
