"""``fold check``: build one fold once, exactly as a run would, and say what it kept.

The fold runs only where every fold runs: in a contained prep child
(``python -I -m efold.worker prep``), launched, journaled, watched and contained by the
preflight machinery (``controller.pilot.preflight``) in a private temporary root that is
removed afterwards. What the check reports is computed here from the snapshot the
controller verified and dry-restored, read as data, the way ``pilot`` computes it:
feasibility (``controller.campaigns.feasibility``, through ``preparation``), the receipt's
boundary and the exclusion it implies, and the model-free availability of every probe
of the trace (``controller.pilot.evidence``). Expected values never leave the evaluator side:
an absent probe is shown by its id and category only.

The target is a one-role, one-trace campaign: the role of ``--campaign`` named FOLD
(any kind of role, through the campaign's own ``Role`` and ``preparation.prep_task``),
or, without a campaign, the built-in arm or installed entry point FOLD on the bundled
``default`` campaign (the original suite, the faux reader). When a prep child fails,
its fold's own code (``prep_launch.PrepCause``) is shown beside the controller's code:
a claim for the author, never a decision.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import msgspec

from efold.controller.campaigns.campaign import (
    ARMS,
    BUNDLED,
    DEFAULT_INSTRUCTIONS,
    Campaign,
    Role,
    bundled_campaign,
    load_campaign,
    suite_items,
)
from efold.controller.campaigns.registration import compute_registration
from efold.controller.errors import CampaignError
from efold.controller.pilot.evidence import checkpoint_evidence
from efold.controller.pilot.preflight import run_preflight
from efold.controller.pilot.prep_launch import PrepCause
from efold.corpus import estimate_tokens
from efold.corpus.model import Availability, SuiteItem
from efold.errors import Code
from efold.folds.errors import FoldError, PluginError
from efold.folds.probe_modes import LOOKUP_ALLOWED, LOOKUP_ONLY_ARMS
from efold.folds.proxy import LOG_NAME
from efold.folds.registry import calls_summariser, plugin_arms
from efold.folds.snapshot import RestoredCheckpoint
from efold.isolation import Isolation
from efold.worker.prep import PROXY_DATA_DIR

FoldKind = Literal["builtin", "entry_point", "command", "proxy"]
KIND_NAMES: Final[dict[str, str]] = {
    "builtin": "built-in arm", "entry_point": "installed entry point",
    "command": "external command", "proxy": "proxy fold",
}
# A role name (campaign.py's rule): the fold's own name when it is one, else "fold".
_ROLE_NAME: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
_NO_CAMPAIGN: Final = "original"  # the bundled campaign a bare FOLD is checked on


@dataclass(frozen=True)
class Target:
    """What to build: a campaign of exactly one role and one trace, and that trace."""

    campaign: Campaign
    role: Role
    item: SuiteItem


class TraceSize(msgspec.Struct, frozen=True):
    id: str
    suite: str
    events: int
    tokens_estimate: int  # chars/4 over the whole trace (corpus.estimate_tokens)


class Kept(msgspec.Struct, frozen=True):
    """The checkpoint as the controller read it. Sizes are counted here from its
    messages, as ``build_receipt`` counts them (a plugin's own receipt counts are not
    checked); the boundary is the receipt's, the evidence ``pilot`` reads."""

    messages: int
    visible_bytes: int
    tokens_estimate: int
    tools: list[str]
    store_records: int | None  # None: no store
    omitted_credential: int | None
    boundary_kind: str
    boundary_verified: bool  # false: every slot of the checkpoint is excluded
    excluded: str | None  # the exclusion every slot would carry (pilot's evidence)


class AbsentProbe(msgspec.Struct, frozen=True):
    probe: str
    category: str


class FoldCheck(msgspec.Struct, frozen=True):
    fold: str
    kind: FoldKind
    role: str
    trace: TraceSize
    ok: bool  # built, prepared and usable: exit 0
    code: str | None  # the controller's code when the prep failed
    cause: PrepCause | None = None  # the fold's own code and detail, as its child claims
    checkpoint: Kept | None = None
    # The first request of every probe fits the input envelope; None: not built.
    feasible: bool | None = None
    availability: dict[str, int] | None = None  # per Availability value, every probe
    absent: list[AbsentProbe] = []  # ids and categories only, never expected values
    unusable: list[str] = []  # why a built checkpoint is unusable (each excludes all)
    # The fold asks the summariser: fold check sends no model request, so the stand-in
    # (efold's deterministic summariser) answered; ``summariser_skipped``: the campaign
    # names a summariser model, which a run would use instead.
    stand_in: bool = False
    summariser_skipped: bool = False
    interrupted: int | None = None
    proxy_log: list[str] = []  # a proxy's last lines of output (it is the user's own)
    # How the fold ran (network, writes), as its prep child reported; None: not reported
    # (the child failed before ``Prepared``).
    isolation: Isolation | None = None
    # The campaign's probe mode, which decides whether the checkpoint keeps the lookup
    # tools its fold asked for (recall-only: never).
    probe_mode: str | None = None


def fold_kind(role: Role) -> FoldKind:
    if role.proxy is not None:
        return "proxy"
    if role.command is not None:
        return "command"
    return "builtin" if role.arm in ARMS else "entry_point"


def _campaign(path: str) -> Campaign:
    if path in BUNDLED:
        return bundled_campaign(path)[0]
    try:
        return load_campaign(path)[0]
    except OSError as exc:
        raise CampaignError(Code.CAMPAIGN_INVALID,
                            f"cannot read campaign {path!r}: {exc.strerror}") from exc


def _bare_role(fold: str) -> Role:
    """The role a bare FOLD stands for: a built-in arm or an installed entry point."""
    if fold not in ARMS:
        names, rejected = plugin_arms()
        if fold in {r.name for r in rejected}:
            raise PluginError(Code.FOLD_PLUGIN_INVALID, f"plugin {fold!r} is rejected (it "
                              "claims a built-in name or is registered twice)")
        if fold not in names:
            raise FoldError(Code.FOLD_UNKNOWN, f"no fold named {fold!r} (built-in arms: "
                            f"{', '.join(ARMS)}; installed entry points: "
                            f"{', '.join(names) or 'none'}; --campaign for a role)")
    name = fold if _ROLE_NAME.fullmatch(fold) else "fold"
    return Role(name=name, arm=fold, instructions=DEFAULT_INSTRUCTIONS)


def resolve(fold: str, campaign_file: str | None, trace: str | None) -> Target:
    """The target of ``fold check FOLD [--campaign FILE] [--trace T]``. Refuses with
    ``fold_unknown`` (no such fold or role), ``fold_plugin_invalid`` (a rejected entry
    point) or ``campaign_invalid`` (an unreadable or invalid campaign, an unknown
    trace)."""
    if campaign_file is None:
        campaign = bundled_campaign(_NO_CAMPAIGN)[0]
        role = _bare_role(fold)
        if role.command is None and role.arm in LOOKUP_ONLY_ARMS:
            # An arm that is only a lookup offer is checked as it would run: offered it.
            campaign = msgspec.structs.replace(campaign, probe_mode=LOOKUP_ALLOWED)
    else:
        campaign = _campaign(campaign_file)
        roles = {r.name: r for r in campaign.roles}
        if fold not in roles:
            raise FoldError(Code.FOLD_UNKNOWN, f"campaign {campaign.name!r} has no role "
                            f"{fold!r} (its roles: {', '.join(roles)})")
        role = roles[fold]
    items = {i.trace.header.trace_id: i for i in suite_items(campaign)}
    trace_id = trace or (campaign.traces or list(items))[0]
    if trace_id not in items:
        raise CampaignError(Code.CAMPAIGN_INVALID, f"trace {trace_id!r} is not in suite "
                            f"{campaign.suite!r} (its traces: {', '.join(items)})")
    item = items[trace_id]
    seed = item.trace.header.seed
    narrowed = msgspec.structs.replace(
        campaign, roles=[role], traces=[trace_id], repeats=1, probe_limit=None,
        seeds=[seed] if campaign.seeds and seed is not None else campaign.seeds)
    return Target(narrowed, role, item)


@dataclass(frozen=True)
class _Seen:
    """What the controller read from the dry-restored snapshot."""

    kept: Kept
    availability: dict[str, int]
    absent: list[AbsentProbe]


def _read(restored: RestoredCheckpoint, suite: str, item: SuiteItem) -> _Seen:
    """The checkpoint's facts and pilot's evidence for every probe of the trace."""
    cp = restored.checkpoint
    receipt = cp.receipt
    found = checkpoint_evidence(suite, restored, item.probes.probes)
    counts = Counter(e.availability for e in found.values() if e.availability is not None)
    texts = [m.content for m in cp.messages] + [
        c.function.name + c.function.arguments for m in cp.messages for c in m.tool_calls or ()]
    kept = Kept(
        messages=len(cp.messages), visible_bytes=sum(len(t.encode()) for t in texts),
        tokens_estimate=estimate_tokens(cp.messages), tools=list(cp.tools),
        store_records=None if cp.store is None else len(cp.store.records),
        omitted_credential=None if cp.store is None else cp.store.omitted_credential,
        boundary_kind=receipt.boundary.kind, boundary_verified=receipt.boundary.verified,
        excluded=next((e.excluded.value for e in found.values() if e.excluded is not None),
                      None),
    )
    return _Seen(kept, {a.value: counts.get(a, 0) for a in Availability},
                 [AbsentProbe(p.id, p.category.value) for p in item.probes.probes
                  if found[p.id].availability is Availability.ABSENT])


LOG_TAIL_LINES = 20
_LOG_TAIL_BYTES = 8192


def log_tail(path: Path) -> list[str]:
    """The last lines of a proxy's log (at most ``LOG_TAIL_LINES``, read from its last
    8 KiB; control characters shown as ``?``); empty when there is none."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - _LOG_TAIL_BYTES))
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()[-LOG_TAIL_LINES:]
    return ["".join(c if c.isprintable() else "?" for c in line) for line in lines]


def check_fold(target: Target, *, program: Sequence[str] | None = None) -> FoldCheck:
    """Build ``target``'s checkpoint in a contained prep child (preflight, in a private
    temporary root removed afterwards) and read what it kept."""
    campaign, role, item = target.campaign, target.role, target.item
    raw = msgspec.json.encode(campaign)
    reg = compute_registration(campaign, raw)
    seen: dict[str, _Seen] = {}

    def on_restored(key: str, restored: RestoredCheckpoint) -> None:
        seen[key] = _read(restored, campaign.suite, item)  # while it is in memory

    log: list[str] = []

    def on_prep_dir(key: str, slot_dir: Path) -> None:
        if role.proxy is not None:  # read before the temporary root goes
            log.extend(log_tail(slot_dir / PROXY_DATA_DIR / LOG_NAME))

    report = run_preflight(reg, raw, program=program, on_restored=on_restored,
                           on_prep_dir=on_prep_dir)
    trace = item.trace
    slot = report.slots[0] if report.slots else None
    check = FoldCheck(
        fold=role.arm, kind=fold_kind(role), role=role.name,
        trace=TraceSize(trace.header.trace_id, campaign.suite, len(trace.events),
                        estimate_tokens(trace.events)),
        ok=False, code=Code.LOOKUP_PREPARATION_INVALID.value,
        stand_in=calls_summariser(role),
        summariser_skipped=campaign.summariser is not None and calls_summariser(role),
        interrupted=report.interrupted, proxy_log=log,
        isolation=None if slot is None else slot.isolation,
        probe_mode=None if isinstance(reg.campaign.probe_mode, msgspec.UnsetType)
        else reg.campaign.probe_mode,
    )
    if slot is None or slot.code is not None or slot.checkpoint not in seen:
        # Not prepared: the controller's code, and what the prep child says its fold
        # failed with (a claim, shown as such).
        return msgspec.structs.replace(
            check, code=slot.code if slot and slot.code else check.code,
            cause=None if slot is None else slot.cause)
    got = seen[slot.checkpoint]
    feasible = slot.feasible is True
    unusable = _unusable(slot.eligible, feasible, got.kept)
    return msgspec.structs.replace(
        check, ok=not unusable and report.interrupted is None, code=None, checkpoint=got.kept,
        feasible=feasible, availability=got.availability, absent=got.absent,
        unusable=unusable)


def _unusable(eligible: bool, feasible: bool, kept: Kept) -> list[str]:
    """Why a built checkpoint cannot be used; each reason skips or excludes every slot."""
    reasons: list[str] = []
    if not eligible:
        reasons.append("arm_not_applicable")  # ``ceiling`` on the original suite
    if not feasible:
        reasons.append(Code.INVENTORY_INFEASIBLE.value)
    if kept.excluded is not None:
        reasons.append(kept.excluded)  # boundary_unverified, store_degraded, ...
    return reasons
