"""Preparing a plan's checkpoints: one contained prep child each, then feasibility.

The one place checkpoints are built, for ``pilot`` (in the run), ``preflight`` and
``plan`` (in a private temporary root). Every fold, built-in or plugin, runs only in a
prep child under the launcher, journal, watchdog and containment
(``controller.pilot.prep_launch``), given the prep task ``prep_task`` builds (the role's fold,
pinned); the controller reads the verified snapshot as data to decide whether the
checkpoint's first request can ever be admitted (``controller.campaigns.feasibility``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
import anyio.lowlevel
import msgspec

from efold.boundary.case import Case
from efold.controller.campaigns.campaign import Campaign, ProxySpec, Role, command_timeout
from efold.controller.campaigns.feasibility import FirstRequest, first_request
from efold.controller.campaigns.profiles import Profile, profile_entry
from efold.controller.campaigns.registration import Registration, verify_fold_pins
from efold.controller.errors import CampaignError
from efold.controller.pilot.places import one_failure_task_group
from efold.controller.pilot.prep_launch import PrepResult, run_prep
from efold.controller.pilot.reuse import CHECKPOINTS_DIR, Built, reuse_checkpoint
from efold.controller.rundirs.run_context import RunContext
from efold.controller.rundirs.runroot import private_subdir
from efold.corpus import dump_trace, trace_digest
from efold.corpus.model import SuiteItem
from efold.errors import Code
from efold.folds.errors import FoldError
from efold.folds.external import DEFAULT_TIMEOUT_S
from efold.folds.ledger import LEDGER_EXTRACTIONS
from efold.folds.pinning import fold_sha256
from efold.folds.probe_modes import lookup_offered
from efold.folds.registry import calls_summariser, extracts_ledger, restarts
from efold.folds.snapshot import RestoredCheckpoint
from efold.guard import INPUT_ENVELOPE
from efold.protocol.records import Plan, PlannedSlot
from efold.protocol.tasks import PrepTask, ProxyTask, Route, StageFile
from efold.registry import publish_exclusive

# (checkpoints ended, checkpoints to prepare, the one that just ended): once with
# (0, total, None) before the first launch, then as each ends; once more with
# (total, total, None) when admission closed before every one was launched.
Progress = Callable[[int, int, "Preparation | None"], None]
# Called once per feasible checkpoint with its verified snapshot (evidence, while it is
# in memory: the decoded snapshot is not kept, so a run holds at most one per prep child
# in flight, ``concurrency``).
OnPrepared = Callable[[str, PlannedSlot, RestoredCheckpoint], None]


@dataclass(frozen=True)
class Preparation:
    result: PrepResult  # its ``restored`` is always None here (see ``OnPrepared``)
    # Whether round 1 of every probe asked of it fits the input envelope; None when the
    # checkpoint could not be prepared (its slots are refused with the prep's code).
    feasible: bool | None
    first_request: FirstRequest | None = None  # its figures, when it was prepared


def checkpoints_of(plan: Plan, *, eligible_only: bool) -> dict[str, PlannedSlot]:
    """The first planned slot of every checkpoint, in schedule order."""
    firsts: dict[str, PlannedSlot] = {}
    for s in plan.slots:
        if (s.eligible or not eligible_only) and s.checkpoint not in firsts:
            firsts[s.checkpoint] = s
    return firsts


def prep_task(role: Role, *, trace_file: str, trace_sha256: str,
              registration: Registration | None = None,
              summariser: Route | None = None, reader: Profile | None = None) -> PrepTask:
    """The prep task that builds ``role``'s checkpoint: its arm, its command and timeout
    (command roles), and its fold pin, which the prep child recomputes just before
    building and refuses (``worker_digest_mismatch``) if the fold changed.

    With ``registration`` the pins of every role are recomputed now and must still
    derive the registered ``folds`` digest (else ``registration_digest_mismatch``), so
    a fold changed after ``load_registration`` is refused here even before the child
    sees it; without it the pin is the fold as it is now. ``summariser``: the run's
    summariser route, given to the task only when the role's fold is a built-in arm
    that summarises or a proxy fold (``folds.registry.calls_summariser``): no other
    fold sends. ``reader``: the profile a proxy fold's capture endpoint presents as
    the model it fronts (default: the registration's reader, else the faux one)."""
    if registration is not None:
        if role not in registration.campaign.roles:
            raise CampaignError(Code.CAMPAIGN_INVALID,
                                f"role {role.name!r} is not a role of the registered campaign")
        verify_fold_pins(registration)
    try:
        pin = fold_sha256(role)
    except FoldError as exc:
        raise CampaignError(Code.CAMPAIGN_INVALID,
                            f"role {role.name!r}: cannot pin its fold: {exc.detail}") from exc
    timeout = None
    if role.command is not None:
        timeout = DEFAULT_TIMEOUT_S if role.timeout_seconds is None else role.timeout_seconds
        if registration is not None:
            timeout = command_timeout(registration.campaign, role)
    return PrepTask(
        arm=role.arm,
        trace_file=trace_file,
        trace_sha256=trace_sha256,
        command=None if role.command is None else list(role.command),
        timeout_seconds=timeout,
        fold_sha256=pin,
        summariser=summariser if calls_summariser(role) else None,
        settings=role.settings, cwd=role.cwd, env=role.env,
        proxy=None if role.proxy is None else proxy_task(
            role.proxy, reader or (registration.campaign.reader if registration else Profile())),
        isolation_required=(registration is not None
                            and registration.campaign.isolation == "required"),
        offer_lookup=(registration is not None
                      and lookup_offered(registration.campaign.probe_mode)),
        build=role.build,
    )


def proxy_task(spec: ProxySpec, reader: Profile) -> ProxyTask:
    """A proxy fold's wiring: the role's two variable names, and the model its capture
    endpoint presents (the reader's, with the context window its catalog gives, else
    the input envelope as estimated tokens, bytes / 4)."""
    window = profile_entry(reader).context_window or INPUT_ENVELOPE // 4
    return ProxyTask(upstream_env=spec.upstream_env, port_env=spec.port_env,
                     model=reader.model, context_window=window)


def _longest_questions(plan: Plan, items: dict[str, SuiteItem]) -> dict[str, str]:
    questions = {(t, p.id): p.question for t, i in items.items() for p in i.probes.probes}
    longest: dict[str, str] = {}
    for s in plan.slots:
        q = questions[(s.trace_id, s.probe_id)]
        if len(q) > len(longest.get(s.checkpoint, "")):
            longest[s.checkpoint] = q
    return longest


Traces = dict[str, tuple[str, str]]  # trace id -> its published file's path and digest


def publish_prep_inputs(run: Path, plan: Plan, items: dict[str, SuiteItem], *,
                        eligible_only: bool) -> Traces:
    """What every prep child of the run reads, published once before the first: the
    reader-safe trace files (no probes) of every checkpoint to prepare, and the
    ``checkpoints`` directory their slot directories go in."""
    firsts = checkpoints_of(plan, eligible_only=eligible_only)
    traces = _publish_traces(run, items, {s.trace_id for s in firsts.values()})
    private_subdir(run, "checkpoints")
    return traces


def _publish_traces(run: Path, items: dict[str, SuiteItem],
                    trace_ids: set[str]) -> Traces:
    """Reader-safe trace files (no probes) for the prep children: path and digest."""
    traces = private_subdir(run, "traces")
    out: dict[str, tuple[str, str]] = {}
    for trace_id in sorted(trace_ids):
        trace = items[trace_id].trace
        publish_exclusive(traces, f"{trace_id}.jsonl", dump_trace(trace))
        out[trace_id] = (str(traces / f"{trace_id}.jsonl"), trace_digest(trace))
    return out


async def prepare_checkpoints(ctx: RunContext, plan: Plan, items: dict[str, SuiteItem],
                              reg: Registration, *, eligible_only: bool,
                              only: AbstractSet[str] | None = None,
                              traces: Traces | None = None,
                              tick: Progress | None = None,
                              on_prepared: OnPrepared | None = None,
                              reuse: Mapping[str, Built] | None = None,
                              cases: Mapping[str, Case] | None = None,
                              ) -> dict[str, Preparation]:
    """Prepare the plan's checkpoints (only those an eligible slot uses when
    ``eligible_only``; only those in ``only`` when given), from the inputs
    ``publish_prep_inputs`` gave (``traces``; None: published here, for a run prepared
    in one call). Prep children are launched in schedule order, up to the campaign's
    ``concurrency`` in flight at once (the probe phase's bound: every summary request a
    prep child sends holds against the cap as a probe's does); a checkpoint's evidence
    is computed once its child has ended, while the next one builds. Stops launching
    once admission closes (a sticky stop or an interruption): later checkpoints are
    absent from the result, which is in schedule order. ``reuse``: a continuation's
    checkpoints an earlier link built (``pilot.reuse``), each copied and verified
    instead of built when it verifies. ``cases``: the run's boundary cases by their
    trace id; a case's checkpoints are built in its fold regime (``folds.regime``)."""
    roles = {r.name: r for r in reg.campaign.roles}
    firsts = {key: first for key, first in checkpoints_of(plan, eligible_only=eligible_only).items()
              if only is None or key in only}
    if traces is None:
        traces = publish_prep_inputs(ctx.run_dir, plan, items, eligible_only=eligible_only)
    questions = _longest_questions(plan, items)
    prepared: dict[str, Preparation] = {}  # as they end
    # Invariant: ``places`` has one token per prep child not in flight (at most
    # ``concurrency`` are); a checkpoint takes one before its launch, in schedule order.
    places = anyio.Semaphore(reg.campaign.concurrency)

    async def prepare(key: str, first: PlannedSlot, task: PrepTask) -> None:
        slot_dir = private_subdir(ctx.run_dir, CHECKPOINTS_DIR, key)
        built = (reuse or {}).get(key)
        result = None if built is None else reuse_checkpoint(ctx, key, slot_dir, built)
        if result is None:
            result = await _build(ctx, key, slot_dir, task)
        # Not on a refusal: the run ends with it, and no other checkpoint is launched.
        places.release()
        # The next checkpoint's launch goes first: its child builds while this one's
        # evidence (controller CPU, no await) is computed.
        await anyio.lowlevel.checkpoint()
        prepared[key] = _evaluated(result, reg.campaign, first, questions[key], on_prepared)
        if tick is not None:
            tick(len(prepared), len(firsts), prepared[key])

    if tick is not None:
        tick(0, len(firsts), None)
    async with one_failure_task_group() as in_flight:
        for key, first in firsts.items():
            await places.acquire()
            if ctx.policy.stopped:
                places.release()
                break
            in_flight.start_soon(prepare, key, first,
                                 _task_of(ctx, reg, roles[first.role], traces[first.trace_id],
                                          (cases or {}).get(first.trace_id)))
    if tick is not None and len(prepared) < len(firsts):
        tick(len(firsts), len(firsts), None)  # the phase ends with what was prepared
    return {key: prepared[key] for key in firsts if key in prepared}


def _task_of(ctx: RunContext, reg: Registration, role: Role, trace: tuple[str, str],
             case: Case | None) -> PrepTask:
    """The prep task of a checkpoint of ``role`` over the published ``trace`` (its path
    and digest); a boundary case's in the case's fold regime. The role's fold is pinned:
    the registered fold digests are re-derived first and the child re-checks its own
    fold's pin just before building."""
    path, digest = trace
    task = prep_task(role, trace_file=path, trace_sha256=digest, registration=reg,
                     summariser=ctx.summariser.route if ctx.summariser else None)
    if case is not None and not case.sidecar.fold.regime.plain:
        task = msgspec.structs.replace(task, regime=case.sidecar.fold.regime)
    return task


def _evaluated(result: PrepResult, campaign: Campaign, first: PlannedSlot, question: str,
               on_prepared: OnPrepared | None) -> Preparation:
    """A built checkpoint's feasibility: whether its longest question's first round fits
    (``on_prepared`` is given the verified snapshot of one that does)."""
    first_round = None
    if result.restored is not None:
        first_round = first_request(result.restored.checkpoint, campaign, first.role, question)
        if first_round.fits and on_prepared is not None:
            on_prepared(result.key, first, result.restored)
    return Preparation(replace(result, restored=None),
                       None if first_round is None else first_round.fits, first_round)


SESSIONS_DIR = "sessions"
LEDGERS_DIR = "ledgers"


async def _build(ctx: RunContext, key: str, slot_dir: Path, task: PrepTask) -> PrepResult:
    """Build checkpoint ``key`` in a prep child; a restart arm's and the ledger arm's in
    several, one after another, each a fresh process given only what the one before it
    left, as the controller verified and journaled it (``prep_launch._verified_stage``):

    * a restart arm (``folds.registry.restarts``): the first child replays the trace and
      leaves only the agent's durable session (``sessions/KEY``); the second builds the
      checkpoint from that session alone (its task's trace is the session file);
    * the ledger arm (``folds.registry.extracts_ledger``): one child per extraction
      (``ledgers/KEY/pN``), each given the ledger the one before committed (and the
      summariser route, when the run has one: its model writes the extraction, on the
      checkpoint key); then one builds the checkpoint, cold, with the final ledger.

    A stage that fails fails the checkpoint with its code; a stop between stages builds
    nothing more."""
    if restarts(task):
        session = await _stage(ctx, key, private_subdir(ctx.run_dir, SESSIONS_DIR, key),
                               msgspec.structs.replace(task, stage="session", summariser=None))
        if not isinstance(session, StageFile):
            return session
        final = msgspec.structs.replace(task, trace_file=session.path,
                                        trace_sha256=session.sha256)
    elif extracts_ledger(task):
        ledger: StageFile | None = None
        for number in range(1, LEDGER_EXTRACTIONS + 1):
            done = await _stage(ctx, key, private_subdir(ctx.run_dir, LEDGERS_DIR, key,
                                                         f"p{number}"),
                                msgspec.structs.replace(
                                    task, stage="ledger", extraction=number, ledger=ledger,
                                    summariser_envelope=None if task.summariser is None
                                    or ctx.summariser is None
                                    else ctx.summariser.terms.input_envelope))
            if not isinstance(done, StageFile):
                return done
            ledger = done
        # The extractions are the summariser's requests; the cold build sends none.
        final = msgspec.structs.replace(task, ledger=ledger, summariser=None)
    else:
        final = task
    return await run_prep(ctx, key=key, slot_dir=slot_dir, task=final)


async def _stage(ctx: RunContext, key: str, stage_dir: Path,
                 task: PrepTask) -> StageFile | PrepResult:
    """One earlier prep of checkpoint ``key``: the file it left, verified and journaled,
    or the failed result (its code; the run's stop code when the run stopped)."""
    result = await run_prep(ctx, key=key, slot_dir=stage_dir, task=task)
    if result.snapshot is None:
        return result
    if ctx.policy.stop_code is not None:
        return replace(result, snapshot=None, code=ctx.policy.stop_code)
    return StageFile(path=result.snapshot.path, sha256=result.snapshot.digest)
