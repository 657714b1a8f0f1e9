"""What a child is asked to do, beyond the protocol: the task inside its ``Assignment``.

Content rule: a probe task carries the probe *question* (what the reader is asked) and
nothing evaluator-only (no expected values, categories or secrets). A prep task names a
trace file in the run directory and the digest it must have, and the fold to build with
its pin.
"""

from __future__ import annotations

import msgspec

from efold.ipc.messages import Digest


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


class ProbeTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="probe", tag_field="task"):
    question: str
    instructions: str
    provider: str
    model: str
    api: str
    base_url: str
    effort: str


Task = PrepTask | ProbeTask
