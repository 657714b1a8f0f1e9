"""The ``results-v1`` schema: what a finished (or partial) run reports.

Everything here is content-free by construction: opaque ids (roles, arms, categories,
traces, probes, slots), content hashes, fixed codes, enum values and numbers. No field
can hold a prompt, an answer, a path or free-form error text; ``report._inputs`` refuses
ids that could smuggle one in.

Schema evolution follows the msgspec habit: a new field gets a default, and a change
that breaks readers gets a new ``schema`` value.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from efold.boundary.incidents import CompressionIncident
from efold.protocol.records import LedgerRecord

RESULTS_SCHEMA: Literal["results-v1"] = "results-v1"

# The run status's closed sets (``report.status``).
Verdict = Literal["unreconciled", "interrupted", "running", "crashed", "damaged", "stopped",
                  "partial", "complete"]
ControllerState = Literal["live", "released", "holder_dead", "absent"]  # the run lease
EpisodeOutcome = Literal["contained", "unreconciled"]
LaunchKind = Literal["prep", "probe"]


class Interval(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A closed interval, lower <= upper, in the unit of the field that holds it:
    proportions in [0, 1] for a Wilson interval (``wilson95``), percentage points in
    [-100, 100] for a paired delta's interval (``delta_pp95``)."""

    lower: float
    upper: float


class Proportion(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``successes`` out of ``trials`` with its Wilson 95% interval.

    Invariant: ``rate`` and ``wilson95`` are null exactly when ``trials == 0`` (no
    observation is not a 0% observation).
    """

    successes: int
    trials: int
    rate: float | None
    wilson95: Interval | None


class Money(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Integer money units (1 unit = 5e-8 USD) and the same amount as an exact decimal
    USD string with eight decimals (no float ever touches money)."""

    units: int
    usd: str


class Tokens(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    input: int
    cache_read: int
    cache_write: int
    output: int
    reasoning: int


class Spend(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Spend over a set of receipts.

    Invariant: ``usage_known`` is false as soon as one receipt's usage went missing;
    ``tokens`` then sums only what was reported and is a lower bound, never a total
    (``usage_unknown_slots`` says how many slots it is missing). Unknown usage is never
    read as zero usage.
    """

    slots: int  # receipts counted
    requests: int
    admitted_requests: int
    tokens: Tokens
    usage_known: bool
    usage_unknown_slots: int
    settled: Money  # settled actual cost
    retained: Money  # holds kept (lost / aborted / integrity): an upper bound, not a cost
    total: Money  # settled + retained: what the cap was charged


class RunMoney(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The whole run's money as its journal holds it: every hold of every caller (the
    reader's probe requests, the summariser's, the judge's), never a sum of receipts.

    ``settled``: the settled actual cost. ``retained``: holds closed without a
    settlement (lost, own abort, integrity stop), each at its hold or its known partial
    cost if larger: an upper bound, not a cost. ``open``: holds not closed yet (a
    request in flight; after a crash, a request nobody settled), at their full amount.
    ``charged``: their sum, what the cap was charged (T).
    """

    settled: Money
    retained: Money
    open: Money
    charged: Money


class Execution(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Coverage counts.

    ``planned`` and ``eligible`` describe the whole inventory; a slot is eligible when
    the plan says so and it was not visited as ``skipped`` (infeasibility learned after
    the plan, ``report.join.Observation.eligible``). The status counts (``skipped`` ..
    ``invalid``) cover visited slots only (slots with a receipt), and
    ``admitted = completed + incomplete + invalid``. ``missing`` counts eligible slots
    never visited: coverage only, never a reader failure (the status banner's "missing
    slots", the same figure). ``receipt_copies_missing`` counts the other way a slot has
    no receipt: the journal records it as visited but its receipt file is gone (its
    status is unknown, so it is in no status count and not in ``missing``).
    """

    planned: int
    eligible: int
    visited: int
    skipped: int
    unadmitted: int
    admitted: int
    completed: int
    incomplete: int
    invalid: int
    missing: int
    receipt_copies_missing: int


class RepeatSplit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Exact accuracy of one repeat alone (the per-repeat split). ``rate`` is
    correct / completed, null when the repeat has no completed slot (a defaulted
    field: documents written before it decode with null)."""

    repeat: int
    correct: int
    completed: int
    rate: float | None = None


class RepeatSpread(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How the exact accuracy varies between repeats: over the ``repeats`` repeats that
    have a rate (at least one completed slot; at least two of them, or there is no
    spread), the unweighted ``mean`` of their rates and the sample standard deviation
    ``sd`` (n - 1 in the denominator), both as proportions in [0, 1]."""

    repeats: int
    mean: float
    sd: float


class Latency(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Wall time per slot (the receipt's ``elapsed_ms``) over ``slots`` admitted slots
    (completed, incomplete or invalid; a slot left in flight has no measured time and is
    not counted). Percentiles are nearest-rank (``report.stats.nearest_rank``): always
    an observed value. Both are null when ``slots`` is 0."""

    slots: int
    median_ms: int | None
    p95_ms: int | None


class FlipCount(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Across repeats: of the (trace, probe) groups with at least two scored repeats
    (``comparable``), how many changed pass/fail (``flipped``)."""

    comparable: int
    flipped: int
    rate: float | None  # null when nothing is comparable


class Tally(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One role over one category (``category`` null: all categories).

    ``exact`` = correct / completed eligible non-excluded slots.
    ``exact_with_failures`` additionally counts ``failed_feasible`` slots (eligible,
    non-excluded, admitted but incomplete or invalid) as wrong. Excluded slots are never
    scored as passes or failures; they are only counted in ``excluded``.
    """

    category: str | None
    execution: Execution
    exact: Proportion
    exact_with_failures: Proportion
    failed_feasible: int
    by_repeat: list[RepeatSplit]
    availability: dict[str, int]  # availability class -> eligible non-excluded visited slots
    availability_unknown: int  # of those, slots whose receipt carries no availability
    outcomes: dict[str, int]  # outcome class -> scored slots
    excluded: dict[str, int]  # exclusion reason -> visited slots
    flip: FlipCount | None  # null when the plan has a single repeat
    # Defaulted (older documents decode with null): the spread of the per-repeat exact
    # rates; null when the plan has a single repeat or fewer than two repeats have a rate.
    repeat_spread: RepeatSpread | None = None


class ToolUse(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """History lookups of one role whose arm offers the lookup tools.

    Over the role's scored slots (``completed``: completed, eligible, non-excluded, the
    base of ``exact``): ``with_lookup`` made at least one lookup call, ``lookup_rate`` =
    with_lookup / completed (null when nothing completed), ``exact_with_lookup`` and
    ``exact_without_lookup`` split ``exact`` by whether the slot looked anything up,
    ``lookup_calls`` and ``bytes_read`` sum the meter's dispatched calls and delivered
    bytes, ``bytes_median`` is the nearest-rank median of ``bytes_read`` per slot over the
    slots that made a lookup (null when none did), ``recoverable`` counts the slots whose
    expected value was absent from the checkpoint but in the store (availability
    ``recoverable``), and ``recoveries`` those of them that made a lookup and answered
    correctly.

    Over the role's admitted slots (a meter can run out in a slot that then fails):
    ``meter_exhausted`` counts slots whose lookup meter aborted, and
    ``meter_exhausted_by`` splits them by cause (``meter_calls_exhausted``,
    ``meter_bytes_exhausted``, both always present).
    """

    completed: int
    with_lookup: int
    lookup_rate: float | None
    exact_with_lookup: Proportion
    exact_without_lookup: Proportion
    lookup_calls: int
    bytes_read: int
    bytes_median: int | None
    recoverable: int
    recoveries: int
    meter_exhausted: int
    meter_exhausted_by: dict[str, int]


class SizeRatio(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Compression of a role's checkpoints against the full transcript at the boundary
    (``against`` ``transcript``), or, for receipts without its size, against the
    reference role's (the plan's first role whose arm is ``native``), paired by suite,
    trace and repeat.

    One pair's compression is ``1 - role / reference`` (0.986: the role's checkpoint is
    1.4% of the reference's; negative: larger than it). ``pairs``: the (suite, trace,
    repeat) where both recorded a size and the reference's is positive. ``*_median``:
    the nearest-rank median of the pairs' compressions; ``*_aggregate``:
    ``1 - sum(role) / sum(reference)`` over the same pairs. All four are null exactly
    when ``pairs`` is 0.
    """

    reference: str
    pairs: int
    tokens_median: float | None
    tokens_aggregate: float | None
    bytes_median: float | None
    bytes_aggregate: float | None
    # ``transcript``: the reference is the full transcript at the boundary, which the
    # receipts carry (``transcript_tokens``/``transcript_bytes``), for every role, the
    # native one included, and ``reference`` is ``transcript``; ``role``: the
    # reference is the role named in ``reference`` (receipts written before the
    # transcript size existed).
    against: Literal["role", "transcript"] = "role"


class Compression(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The reader-visible size of a role's checkpoints (chars/4 estimated tokens and
    UTF-8 bytes, ``controller.pilot.evidence``), each checkpoint (one per suite, trace and
    repeat) counted once, over the ``checkpoints`` whose receipts carry a size (at least
    one). Medians are nearest-rank (an observed size). ``versus_reference``: against the
    full transcript when every receipt carries its size; otherwise against the native
    role, and then null when the plan has none, and for the reference role itself."""

    checkpoints: int
    tokens_median: int
    tokens_sum: int
    bytes_median: int
    bytes_sum: int
    versus_reference: SizeRatio | None


class CostPerCorrect(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Settled money per correct answer of one role, in exact integer units.

    ``correct``: the role's exact successes. ``probe_settled``: the settled cost of its
    probe slots (its ``spend.settled``). ``summariser_settled``: the settled cost of the
    summariser requests its checkpoints' prep children made (zero for a role that asks
    none; the cost of the fold); null when the run's summariser spend was given without
    its checkpoints, so it cannot be split by role. ``settled``: their sum, null with it.
    ``per_correct``: ``floor(settled.units / correct)`` units; null when ``correct`` is
    0 or ``settled`` is null. Retained holds are not included: an upper bound, not a cost.
    """

    correct: int
    probe_settled: Money
    summariser_settled: Money | None
    settled: Money | None
    per_correct: Money | None


class JudgeAgreement(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The optional judge (19-C) beside the deterministic score of one role: never the
    headline, which stays ``overall.exact``.

    ``judged``: answered slots the judge scored; ``codes``: fixed code -> answered
    slots it scored nothing for (``judge_reply_invalid``, a refusal, a loss).
    ``mean_scores``: per rubric dimension, the mean 0-5 score over ``judged``.
    ``judge_pass`` / ``exact`` over the same ``both`` slots (scored by both: completed,
    eligible, non-excluded, with a judge score). ``counts``: ``both_pass``,
    ``both_fail``, ``judge_only`` (judge pass, deterministic wrong), ``exact_only``.
    ``kappa``: Cohen's kappa of judge pass/fail against deterministic correct over
    ``both``; null when undefined (no slot, or both raters gave one class throughout).
    ``disagreeing``: every slot id where the two differ, in schedule order."""

    judged: int
    codes: dict[str, int]
    mean_scores: dict[str, float]
    both: int
    judge_pass: Proportion
    exact: Proportion
    counts: dict[str, int]
    kappa: float | None
    disagreeing: list[str]


class HttpFailures(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Visited slots of a role that a provider's non-2xx answer ended, by status and
    kind (the receipt's ``http``: a value of the guard's closed ``HttpFailureKind``)."""

    status: int
    kind: str
    slots: int


class RoleResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    role: str
    arm: str
    overall: Tally
    categories: list[Tally]  # in category order
    codes: dict[str, int]  # fixed code -> visited slots that ended with it
    spend: Spend
    # Defaulted (older documents decode with null): the role's latency per slot, and
    # its lookups (null unless the role's arm offers the history lookup tools, or the
    # role made a lookup call).
    latency: Latency | None = None
    tool_use: ToolUse | None = None
    # Defaulted (19-B; older documents decode with null): the size of the role's
    # checkpoints and their compression against the native role (null when no receipt
    # of the role carries a size), and its settled cost per correct answer.
    compression: Compression | None = None
    cost_per_correct: CostPerCorrect | None = None
    # Defaulted (19-C): the judge beside the deterministic score; null without a judge.
    judge: JudgeAgreement | None = None
    # Defaulted (issue 35): the role's slots ended by a non-2xx answer, by status and
    # kind, ordered by status then kind; empty when none was.
    http_failures: list[HttpFailures] = []


class PairCounts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Paired observations of role a and role b on the same (trace, probe, repeat).

    ``b``: a correct and b wrong; ``c``: a wrong and b correct (McNemar's discordant
    cells). ``delta_pp`` = 100 * (c - b) / pairs: accuracy of b minus accuracy of a over
    the same pairs, in percentage points; null when there is no pair. Descriptive only:
    not a significance, power, model-quality or treatment-benefit claim.

    ``delta_pp95``: the 95% interval of ``delta_pp``, in percentage points, by Newcombe's
    hybrid score method for paired proportions (Newcombe 1998, method 10: built from the
    Wilson intervals of the two roles' accuracies over these pairs and the phi
    correlation of the paired table; ``report.stats.newcombe_paired_interval``); null
    exactly when ``delta_pp`` is. Defaulted: older documents decode with null.
    """

    pairs: int
    both_correct: int
    b: int
    c: int
    both_wrong: int
    delta_pp: float | None
    delta_pp95: Interval | None = None


class PairedTally(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    category: str | None
    planned_pairs: int
    eligible_pairs: int
    completed: PairCounts  # both completed, eligible, non-excluded
    with_failures: PairCounts  # failed feasible slots count as wrong


class Contrast(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``role_b - role_a`` (role_a comes first in the plan's role order)."""

    role_a: str
    role_b: str
    overall: PairedTally
    categories: list[PairedTally]


class SlotRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One planned slot as the report sees it. Without a receipt, ``status`` is
    ``receipt_missing`` when the journal recorded one, else ``missing`` for an eligible
    slot and ``unvisited`` for an ineligible one. ``eligible`` follows
    ``Observation.eligible`` (planned eligible and not skipped)."""

    slot: str
    role: str
    trace_id: str
    probe_id: str
    category: str
    repeat: int
    eligible: bool
    status: str
    code: str | None = None
    outcome: str | None = None
    correct: bool | None = None
    availability: str | None = None
    excluded: str | None = None
    checkpoint_sha256: str | None = None
    # Defaulted (issue 35): the receipt's ``http`` (status and kind of the non-2xx
    # answer that ended the slot); omitted when it has none.
    http_status: int | None = None
    http_kind: str | None = None
    # Defaulted (issue 38): the slot's input and output tokens as its receipt summed
    # them over its requests; omitted without a receipt, and when any request's usage
    # went missing (unknown usage is never a count).
    input_tokens: int | None = None
    output_tokens: int | None = None
    # Defaulted (issue 40): the receipt's input pressure, side by side: the estimate and
    # the provider's count of the first request's input (local and real routes).
    pressure_estimate_tokens: int | None = None
    pressure_measured_tokens: int | None = None
    # Defaulted (issue 40): a ledger arm's checkpoint as the receipt accounts it.
    ledger: LedgerRecord | None = None


ContainmentMode = Literal["cgroup", "process-group"]


class RunContainment(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What held the run's processes: ``cgroup`` (each launch in a cgroup of the run's;
    nothing it starts can leave it) or ``process-group`` (process groups, pidfds and the
    launch marker: a process that leaves its group and session and drops its marker is
    not seen once the controller is gone). ``operator_allowed``: a real run whose
    operator passed ``--process-group-containment`` to run without a cgroup."""

    mode: ContainmentMode
    operator_allowed: bool = False


class FoldIsolation(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How the run's prepared checkpoints ran their fold code, as their prep children
    said: counts only (the reasons stay in the journal and ``fold check``).
    ``checkpoints``: prepared and verified; ``isolated``: with no network (a
    loopback-only namespace) and writes only beneath their slot (Landlock);
    ``network_isolated`` / ``writes_isolated``: each alone; ``not_reported``: no word
    from the child (a journal from before isolation)."""

    checkpoints: int
    isolated: int
    network_isolated: int
    writes_isolated: int
    not_reported: int


class ContainmentEpisode(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One containment episode the journal holds (docs/architecture.md §9).

    ``outcome`` is ``contained`` (nothing tied to the launch was alive at its end) or
    ``unreconciled`` (something was alive that could not be proven or killed). An episode
    that never finished (the controller died inside it) reads as ``unreconciled`` with
    ``finished`` false: nobody proved its processes dead."""

    containment_id: int
    launch_id: int
    slot: str  # the launch's slot id (a checkpoint id for a prep launch)
    kind: LaunchKind
    cause: str  # fixed code
    outcome: EpisodeOutcome
    finished: bool


class RunStatus(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How the run ended, read from the journal and the run lease (``report.status``).

    ``verdict`` is the one line a reader must see first, by precedence:
    ``unreconciled`` > ``interrupted`` > ``running`` > ``crashed`` > ``damaged`` >
    ``stopped`` > ``complete``. The flags are independent facts:

    - ``stop``: the run's stop code (the first sticky stop, ``unreconciled_containment``
      outranking every other; else the first non-sticky stop such as
      ``not_admitted_cap``); null when nothing stopped the run.
    - ``interrupted``: the journal holds an ``interrupted`` stop (the operator).
    - ``unreconciled``: processes of the run may be alive: a launch whose latest
      containment episode ended unreconciled; or, with no controller holding the run
      lease, a launch whose latest episode never finished, or a launch with neither an
      exit record nor a finished episode (the controller died with it live).
    - ``crashed``: no controller holds the lease, the run was not interrupted, and the
      run has no clean end: the controller died without releasing the run lease, or a
      planned slot was never visited, a slot was left in flight, a launch was left
      without an exit record or a finished episode, or an episode never finished.
    - ``damaged_files``: files the run should hold that are gone or unreadable (a
      receipt the journal expects, a ``results.json`` that does not parse); a run with
      any is never ``complete``.
    - ``controller``: the run lease when aggregated: ``live`` (a controller holds it),
      ``released``, ``holder_dead`` (the holder died without releasing) or ``absent``.
    """

    verdict: Verdict
    stop: str | None
    interrupted: bool
    crashed: bool
    unreconciled: bool
    controller: ControllerState
    containments: list[ContainmentEpisode]  # every episode, in journal order
    unexited_launches: list[int]  # launch ids: no exit record and no finished episode
    missing_slots: int  # eligible slots the controller never visited (no receipt)
    missing_slot_ids: list[str]  # those slots, in schedule order
    in_flight: list[str]  # slots launched and never closed (no receipt written)
    # Files of the run that its journal expects or its readers need but that are gone or
    # unreadable, by their names inside the run directory (``receipts/s0003.json``,
    # ``results.json``), sorted. Non-empty: the run is damaged (verdict ``damaged``
    # unless a verdict above it holds). Defaulted: older documents decode with none.
    damaged_files: list[str] = []
    # A cluster run's shards, in index order (``efold-controller cluster``); null for a
    # run on one machine. Launch and containment ids above are then shard k's id plus
    # k x 1,000,000.
    shards: list[ShardState] | None = None
    # A chain's links (a run and its continuations); null for a run that is no link.
    # Launch and containment ids above are then link k's id plus k x 1,000,000, and the
    # verdict is the chain's: its last link's end, ``partial`` while slots are to run.
    chain: ChainFacts | None = None
    # What held the run's processes; null when the journal predates it (or a cluster
    # run's merged status).
    containment: RunContainment | None = None
    # How the prepared checkpoints' fold code ran isolated; null when not read (a
    # cluster run's merged status, a library caller without the journal).
    fold_isolation: FoldIsolation | None = None


class LinkState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One link of a chain (a run and its continuations, ``pilot --continue``), as it
    ended on its own: its verdict, its planned and visited slots, what held its
    processes, and the part of the schedule it was given (``slots A:B``, ``chunk K/N``)
    when one was chosen."""

    index: int  # from 1: the chain's first run
    verdict: Verdict
    planned: int
    visited: int
    finished: int  # its slots with a terminal receipt (completed, invalid, skipped)
    containment: ContainmentMode | None = None
    part: str | None = None


class ChainFacts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A chain read as one run: its links, first to last, and how many of the plan's
    slots no link has a terminal receipt for (completed, invalid or skipped): what
    ``pilot --continue`` on its last link would run."""

    links: list[LinkState]
    to_run: int


ShardOutcomeName = Literal["complete", "stopped", "interrupted", "refused", "failed", "lost",
                           "running"]


class ShardState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One shard of a cluster run: how it ended (``running``: no end yet while the
    cluster controller holds its lease; ``lost``: its node, actor or controller died
    and none of its records came back, so its slots are missing), its planned and
    visited slots, the Ray node it was bound to, and its controller's stop or refusal
    code when it printed one."""

    index: int
    node: str
    outcome: ShardOutcomeName
    planned: int
    visited: int | None  # None: unknown (none of its records reached this machine)
    code: str | None = None


# -- boundary cases (``report.boundary_results``) -----------------------------------------


class RunRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One case on one arm: each oracle's verdict, each action's family, how the run
    ended; the case's ``fold.repeat`` and the folds the arm's checkpoint records."""

    case: str
    arm: str
    passed: bool | None
    oracles: list[tuple[str, str]]  # (oracle type, verdict), in the case's order
    actions: list[str]  # each action's family, in call order
    duplicates: int
    ending: str
    tokens: int  # every token the agent spent after the fold (input + output estimates)
    repeat: int = 1
    folds: int | None = None


class ArmSummary(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    arm: str
    passed: Proportion  # cases passing every oracle / cases judged (pass or fail)
    not_applicable: int  # cases with a not_applicable verdict and no failure
    actions: int
    duplicates: int
    duplicate_rate: float | None  # duplicates / actions; null without an action
    recall_trigger: Proportion | None  # on required-recall cases; null without one
    # Tokens per task (every token the agent spent after the fold, re-sent context and
    # re-reads included): the nearest-rank median per run, and all of them over the
    # passes (null without a pass).
    tokens_per_task_median: int | None
    tokens_per_pass: int | None


class ArmContrast(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    reference: str
    arm: str
    counts: PairCounts  # b: reference passed and arm failed; c: the reverse


class ExcludedRun(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A case on an arm that ran and is not scored: why (an ``excluded`` value)."""

    case: str
    case_version: int
    arm: str
    excluded: str


class BoundaryResults(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    cases: list[str]  # "id@version", in order
    reference_arm: str
    runs: list[RunRow]  # case by case, arm by arm; never an excluded run
    arms: list[ArmSummary]
    contrasts: list[ArmContrast]
    incidents: list[CompressionIncident]
    # Runs not scored (``recall_answer_visible``: a required-recall case whose checkpoint
    # shows the answer): in no row, summary, contrast or incident.
    excluded: list[ExcludedRun] = []



class RunInfo(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What ran, and when (no host name, no path).

    ``efold_version``: the efold that built the results. ``started_at`` / ``ended_at``:
    UTC ISO-8601 with milliseconds (``2031-03-14T09:26:53.589Z``) from the journal's own
    clock: the first controller epoch's start, and the latest moment the journal
    recorded anything (a running run: so far); ``duration_seconds`` is their difference.
    The three are null when the results were built without those journal facts.
    ``reader`` is the registered reader ``provider/model``; ``summarisers`` maps each role
    whose fold asks the campaign's summariser model to that model's ``provider/model``
    (``efold/deterministic-summariser`` where no summariser model answered: the stand-in).
    Every model id's provider and model are each opaque ids (``report.join.check_model``),
    or the report refuses. ``route``: where the campaign's requests went, ``faux``
    (nothing sent), ``local`` (models on loopback without a credential: nothing billed)
    or ``real`` (a paid route); null when unknown (results built before it existed).
    ``probe_mode``: ``recall-only`` (no arm offered the history lookup) or
    ``lookup-allowed-v1``; null when unknown.
    """

    efold_version: str
    campaign: str
    started_at: str | None
    ended_at: str | None
    duration_seconds: float | None
    reader: str | None
    summarisers: dict[str, str]
    route: Literal["faux", "local", "real"] | None = None
    # The registration's probe mode (``folds.probe_modes``); null: results built before
    # modes existed.
    probe_mode: Literal["recall-only", "lookup-allowed-v1"] | None = None


class DesignPair(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One comparison of the registration's design: ``base`` and ``treatment`` roles,
    what ``differs`` (``build`` or ``guidance``), each side's digest (a build tree's
    manifest digest, or the guidance file's sha256), the build's ``changed`` files
    (empty for guidance), and ``contrast``: the paired counts, treatment minus base."""

    base: str
    treatment: str
    differs: Literal["build", "guidance"]
    base_sha256: str
    treatment_sha256: str
    changed: list[str]
    contrast: PairCounts


class Results(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["results-v1"]
    campaign: str
    registration_sha256: str
    schedule_sha256: str
    reader_faux: bool
    repeats: int
    roles: list[str]
    categories: list[str]
    cap: Money
    rmax: Money
    notes: list[str]  # fixed statements only (see report._notes)
    execution: Execution  # whole run
    spend: Spend  # whole run
    results: list[RoleResult]  # in the plan's role order
    contrasts: list[Contrast]  # every pair of roles
    slots: list[SlotRow]  # in schedule order
    # How the run ended; null when the results were built without the run's journal
    # (a library caller with only the plan and the receipts). A defaulted field, so
    # results-v1 documents written before it still decode.
    status: RunStatus | None = None
    # The registered reader, ``provider/model`` (null when built without the
    # registration), and the spend of the summariser model's requests (the prep
    # children of the compaction arms; null when none was made). Defaulted fields.
    reader: str | None = None
    summariser_spend: Spend | None = None
    # Defaulted fields (older documents decode with null or empty): the run's metadata;
    # latency over the whole run's admitted slots; and every other role against the
    # first role whose arm is ``native``, oriented role - native (``role_a`` is the
    # native role), in plan order: the entry of ``contrasts`` when the native role comes
    # first in the plan, else that pair computed with the roles swapped. Empty without
    # a native role.
    run: RunInfo | None = None
    latency: Latency | None = None
    versus_native: list[Contrast] = []
    # Defaulted (19-C): the judge's ``provider/model`` and its own spend line (its
    # requests, never in ``spend``'s probe figures); null without a judge.
    judge: str | None = None
    judge_spend: Spend | None = None
    # Defaulted (issue 15): the boundary cases' results (per case and role, per role,
    # the paired contrasts and the compression incidents); null when none ran.
    boundary: BoundaryResults | None = None
    # Defaulted (issue 35): the whole run's money from its journal (every caller, settled
    # and retained); null when built without the journal.
    money: RunMoney | None = None
    # Defaulted (issue 40): the registration's declared comparisons, each read as its
    # paired contrast; null without a design.
    design: list[DesignPair] | None = None
