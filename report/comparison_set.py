"""A comparison dataset: the paired runs of two arms, the input of ``analyze``.

The analyzer (``report.analyze``) compares a **reference** arm with a **candidate** arm
over the same tasks. Its input is one JSON object in this format
(``efold-comparison-v1``), written by ``efold-controller analyze --run RUN --arms A,B
--write FILE`` from a run's receipts (``report.comparison_export``) or by any other
collector:

```json
{"schema": "efold-comparison-v1",
 "arms": ["native", "compaction"],
 "representative_task_set": false,
 "minimum_tasks": 20,
 "provenance": {"source": "efold-run", "efold_version": "0.1.0", "models": ["faux/x"],
                "registration_sha256": "...", "faux": true},
 "runs": [{"task": "B01-explicit-api-constraint", "repeat": 1, "arm": "native",
           "accepted": true, "checks_passed": 3, "checks_total": 3,
           "missed_constraints": 0, "unsupported_claims": null,
           "tokens": 33206, "cost_usd": "0.0021", "latency_ms": 4210}, ...]}
```

It is content-free by construction and decoded **closed** (``decode_comparison``):

* at most ``MAX_BYTES`` (8 MiB) and ``MAX_RUNS`` (10,000) runs, checked before anything
  is aggregated (``comparison_too_large``);
* an unknown key anywhere (a raw prompt, an output, a credential, free prose) refuses,
  as does a wrong type, a string that is not a bounded identifier, a negative count, a
  cost that is not a plain non-negative decimal, or ``checks_passed > checks_total``
  (``comparison_invalid``, naming the run);
* exactly two distinct arms, and every (task, repeat) has exactly one run of each: no
  other arm, no duplicate, no half pair;
* ``minimum_tasks`` (the evidence gate, paired tasks) is at least ``MIN_TASKS`` (20):
  it can be raised, never lowered;
* ``representative_task_set`` is the operator's attestation, never inferred.

``null`` is "not measured", never zero: a run whose usage was not reported has
``tokens`` and ``cost_usd`` null, and the analyzer counts such pairs apart.

``efold-comparison-v2`` is v1 plus the **research-protocol fields** of a run (the
reference benchmark's comparison record), each optional and null when unmeasured:
``request_context_tokens`` and ``parent_context_tokens`` (counts); ``checklist_count``
(5 to 9); ``first_mutation_boundary``, ``planning_pruned`` and ``executor_verified``
(the protocol's compliance booleans: the first mutation came after the plan, the
planning instructions were pruned before execution, the executor verified its work);
``plan_quality`` (0 to 1, a decimal string of at most 6 places) with ``plan_quality_rubric``, the bounded
identifier of the evaluator and rubric that produced it (one without the other
refuses). The reader accepts both versions; a v1 set carrying any of these refuses, as
v1 never had them. ``analyze --write`` writes v1 (an efold run measures none of them).
"""

from __future__ import annotations

import decimal
import re
from collections import Counter
from typing import Annotated, Final, Literal

import msgspec

from efold.errors import Code
from efold.report.errors import ReportError

SCHEMA: Final = "efold-comparison-v1"
SCHEMA_V2: Final = "efold-comparison-v2"
MAX_BYTES: Final = 8 * 1024 * 1024
MAX_RUNS: Final = 10_000
MIN_TASKS: Final = 20  # the minimum evidence gate: paired tasks, never lower

_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/-]{0,159}")
_ARM: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
_DECIMAL: Final = re.compile(r"(0|[1-9][0-9]{0,11})(\.[0-9]{1,12})?")

Count = Annotated[int, msgspec.Meta(ge=0, le=1_000_000_000_000)]
Bounded = Annotated[str, msgspec.Meta(max_length=160)]


class Provenance(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Where the runs came from, bounded: identifiers and digests, never content."""

    source: Bounded | None = None  # "efold-run", or the collector's name
    efold_version: Bounded | None = None
    models: Annotated[list[Bounded], msgspec.Meta(max_length=16)] = []
    registration_sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")] | None = None
    manifest_sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")] | None = None
    faux: bool | None = None  # True: the costs are faux units, not money
    # ``analyze --corpus``: the corpus whose tasks the set compares, and the sha256 of
    # its ``boundary.lock`` (every case's id, version and digest).
    corpus: Bounded | None = None
    corpus_sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")] | None = None


class ComparisonRun(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One task, one repeat, one arm: what the analyzer compares (module docstring)."""

    task: str
    repeat: Annotated[int, msgspec.Meta(ge=1, le=1000)]
    arm: str
    accepted: bool  # the task's full acceptance: every check passed
    checks_passed: Count
    checks_total: Count
    missed_constraints: Count | None
    unsupported_claims: Count | None
    tokens: Count | None
    cost_usd: str | None  # an exact non-negative decimal (never a float)
    latency_ms: Count | None
    # v2 only (module docstring): the research-protocol fields; null = not measured.
    request_context_tokens: Count | None = None
    parent_context_tokens: Count | None = None
    checklist_count: Annotated[int, msgspec.Meta(ge=5, le=9)] | None = None
    first_mutation_boundary: bool | None = None
    planning_pruned: bool | None = None
    executor_verified: bool | None = None
    plan_quality: str | None = None  # a decimal from 0 to 1
    plan_quality_rubric: str | None = None

    def research_fields(self) -> list[str]:
        """The research-protocol fields this run measured."""
        return [name for name in RESEARCH_FIELDS if getattr(self, name) is not None]


RESEARCH_FIELDS: Final = ("request_context_tokens", "parent_context_tokens", "checklist_count",
                          "first_mutation_boundary", "planning_pruned", "executor_verified",
                          "plan_quality", "plan_quality_rubric")
_QUALITY: Final = re.compile(r"(0(\.[0-9]{1,6})?|1(\.0{1,6})?)")


class ComparisonSet(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["efold-comparison-v1", "efold-comparison-v2"]
    arms: Annotated[list[str], msgspec.Meta(min_length=2, max_length=2)]  # reference, candidate
    representative_task_set: bool
    runs: list[ComparisonRun]
    minimum_tasks: int = MIN_TASKS
    provenance: Provenance = Provenance()

    @property
    def reference(self) -> str:
        return self.arms[0]

    @property
    def candidate(self) -> str:
        return self.arms[1]


def _invalid(detail: str) -> ReportError:
    return ReportError(Code.COMPARISON_INVALID, detail)


def cost_of(run: ComparisonRun) -> decimal.Decimal | None:
    return None if run.cost_usd is None else decimal.Decimal(run.cost_usd)


def check_comparison(data: ComparisonSet) -> ComparisonSet:
    """The rules a decoded set must also keep (module docstring); ``data`` itself."""
    if len(data.runs) > MAX_RUNS:
        raise ReportError(Code.COMPARISON_TOO_LARGE,
                          f"{len(data.runs)} runs: at most {MAX_RUNS} are analyzed")
    if data.minimum_tasks < MIN_TASKS:
        raise _invalid(f"minimum_tasks {data.minimum_tasks}: the evidence gate is never "
                       f"lower than {MIN_TASKS} paired tasks")
    if len(set(data.arms)) != 2 or not all(_ARM.fullmatch(a) for a in data.arms):
        raise _invalid(f"arms {data.arms!r}: two distinct arm names (lowercase letters, "
                       "digits, - and _)")
    p = data.provenance
    named = [p.source, p.efold_version, p.corpus, *p.models]
    if not all(_ID.fullmatch(n) for n in named if n is not None):
        raise _invalid("$.provenance: every name is a bounded identifier, never prose")
    for i, run in enumerate(data.runs):
        where = f"$.runs[{i}]"
        if not _ID.fullmatch(run.task):
            raise _invalid(f"{where}.task: not a bounded task identifier")
        if run.arm not in data.arms:
            raise _invalid(f"{where}.arm {run.arm!r}: not one of the set's arms {data.arms}")
        if run.checks_passed > run.checks_total:
            raise _invalid(f"{where}: checks_passed exceeds checks_total")
        if run.accepted and run.checks_passed != run.checks_total:
            raise _invalid(f"{where}: accepted with a check that did not pass")
        if run.cost_usd is not None and not _DECIMAL.fullmatch(run.cost_usd):
            raise _invalid(f"{where}.cost_usd: not a plain non-negative decimal")
        if data.schema == SCHEMA and (measured := run.research_fields()):
            raise _invalid(f"{where}.{measured[0]}: a research-protocol field needs "
                           f"{SCHEMA_V2}")
        if run.plan_quality is not None and not _QUALITY.fullmatch(run.plan_quality):
            raise _invalid(f"{where}.plan_quality: a decimal from 0 to 1")
        if (run.plan_quality is None) != (run.plan_quality_rubric is None):
            raise _invalid(f"{where}: plan_quality and plan_quality_rubric go together")
        if run.plan_quality_rubric is not None and not _ID.fullmatch(run.plan_quality_rubric):
            raise _invalid(f"{where}.plan_quality_rubric: not a bounded identifier")
    seen = Counter((r.task, r.repeat, r.arm) for r in data.runs)
    doubled = [key for key, n in seen.items() if n > 1]
    if doubled:
        task, repeat, arm = doubled[0]
        raise _invalid(f"task {task!r} repeat {repeat} has {seen[doubled[0]]} runs of {arm!r}")
    for task, repeat in {(r.task, r.repeat) for r in data.runs}:
        missing = [a for a in data.arms if (task, repeat, a) not in seen]
        if missing:
            raise _invalid(f"task {task!r} repeat {repeat} has no run of {missing[0]!r}: "
                           "every task and repeat needs one run of each arm")
    return data


def decode_comparison(raw: bytes) -> ComparisonSet:
    """The set in ``raw``, decoded closed and checked (module docstring)."""
    if len(raw) > MAX_BYTES:
        raise ReportError(Code.COMPARISON_TOO_LARGE,
                          f"{len(raw)} bytes: at most {MAX_BYTES} are read")
    try:
        data = msgspec.json.decode(raw, type=ComparisonSet)
    except msgspec.ValidationError as exc:
        raise _invalid(str(exc)) from exc
    except msgspec.DecodeError as exc:
        raise _invalid(f"not one JSON object: {exc}") from exc
    return check_comparison(data)


def encode_comparison(data: ComparisonSet) -> bytes:
    """The set's JSON, checked first: what ``decode_comparison`` reads back whole."""
    return msgspec.json.encode(check_comparison(data))
