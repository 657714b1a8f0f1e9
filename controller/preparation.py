"""Preparing a plan's checkpoints: one contained prep child each, then feasibility.

The one place checkpoints are built, for ``pilot`` (in the run), ``preflight`` and
``plan`` (in a private temporary root). Every fold, built-in or plugin, runs only in a
prep child under the launcher, journal, watchdog and containment (``controller.slots``
``run_prep``); the controller reads the verified snapshot as data to decide whether the
checkpoint's first request can ever be admitted (``controller.feasibility``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from efold.controller.campaign import prep_task
from efold.controller.feasibility import first_request_fits
from efold.controller.registration import Registration
from efold.controller.runroot import private_subdir
from efold.controller.slots import PrepResult, RunContext, run_prep
from efold.corpus.model import SuiteItem
from efold.folds.snapshot import RestoredCheckpoint
from efold.protocol.records import Plan, PlannedSlot

Progress = Callable[[str, int, int], None]  # (phase, done, total)
# Called once per feasible checkpoint with its verified snapshot (evidence, while it is
# in memory: the decoded snapshot is not kept, so a run holds one at a time).
OnPrepared = Callable[[str, PlannedSlot, RestoredCheckpoint], None]


@dataclass(frozen=True)
class Preparation:
    result: PrepResult  # its ``restored`` is always None here (see ``OnPrepared``)
    # Whether round 1 of every probe asked of it fits the input envelope; None when the
    # checkpoint could not be prepared (its slots are refused with the prep's code).
    feasible: bool | None


def checkpoints_of(plan: Plan, *, eligible_only: bool) -> dict[str, PlannedSlot]:
    """The first planned slot of every checkpoint, in schedule order."""
    firsts: dict[str, PlannedSlot] = {}
    for s in plan.slots:
        if (s.eligible or not eligible_only) and s.checkpoint not in firsts:
            firsts[s.checkpoint] = s
    return firsts


def _longest_questions(plan: Plan, items: dict[str, SuiteItem]) -> dict[str, str]:
    questions = {(t, p.id): p.question for t, i in items.items() for p in i.probes.probes}
    longest: dict[str, str] = {}
    for s in plan.slots:
        q = questions[(s.trace_id, s.probe_id)]
        if len(q) > len(longest.get(s.checkpoint, "")):
            longest[s.checkpoint] = q
    return longest


def _publish_traces(run: Path, items: dict[str, SuiteItem],
                    trace_ids: set[str]) -> dict[str, tuple[str, str]]:
    """Reader-safe trace files (no probes) for the prep children: path and digest."""
    from efold.corpus import dump_trace, trace_digest
    from efold.registry import publish_exclusive

    traces = private_subdir(run, "traces")
    out: dict[str, tuple[str, str]] = {}
    for trace_id in sorted(trace_ids):
        trace = items[trace_id].trace
        publish_exclusive(traces, f"{trace_id}.jsonl", dump_trace(trace))
        out[trace_id] = (str(traces / f"{trace_id}.jsonl"), trace_digest(trace))
    return out


async def prepare_checkpoints(ctx: RunContext, plan: Plan, items: dict[str, SuiteItem],
                              reg: Registration, *, eligible_only: bool,
                              tick: Progress | None = None,
                              on_prepared: OnPrepared | None = None
                              ) -> dict[str, Preparation]:
    """Prepare the plan's checkpoints in schedule order (only those an eligible slot uses
    when ``eligible_only``). Stops launching once admission closes (a sticky stop or an
    interruption): later checkpoints are absent from the result."""
    campaign = reg.campaign
    roles = {r.name: r for r in campaign.roles}
    firsts = checkpoints_of(plan, eligible_only=eligible_only)
    traces = _publish_traces(ctx.run_dir, items, {s.trace_id for s in firsts.values()})
    questions = _longest_questions(plan, items)
    private_subdir(ctx.run_dir, "checkpoints")
    out: dict[str, Preparation] = {}
    for n, (key, first) in enumerate(firsts.items()):
        if tick is not None:
            tick("prep", n, len(firsts))
        if ctx.policy.stopped:
            break
        path, digest = traces[first.trace_id]
        # The role's fold, pinned: the registered fold digests are re-derived first and
        # the child re-checks its own fold's pin just before building.
        task = prep_task(roles[first.role], trace_file=path, trace_sha256=digest,
                         registration=reg)
        result = await run_prep(
            ctx, key=key, slot_dir=private_subdir(ctx.run_dir, "checkpoints", key), task=task)
        feasible = None
        if result.restored is not None:
            feasible = first_request_fits(result.restored.checkpoint, campaign, first.role,
                                          questions[key])
            if feasible and on_prepared is not None:
                on_prepared(key, first, result.restored)
        out[key] = Preparation(replace(result, restored=None), feasible)
    if tick is not None:
        tick("prep", len(firsts), len(firsts))
    return out
