"""Subsets: a registration narrowed to some roles, traces, probes or the schedule's first
slots, without writing a new campaign file (``register``/``pilot`` ``--roles``,
``--traces``, ``--probes``, ``--limit``).

A subset is part of the registration it makes (``Registration.subset``): the record of
what was kept, so a subset has its own sha256 while its ``campaign_sha256`` stays the
source campaign's. What a subset narrows, and where:

- ``roles``: the registration's ``campaign.roles`` (so every later command, the plan,
  the smoke, the fold pins and the ``reader`` digest see only the kept roles);
- ``traces``, ``probes``, ``limit``: the registration's ``selection`` (the campaign's
  own ``traces`` and ``probe_limit`` apply first; the plan is derived from the
  selection, so ``plan.json`` holds exactly the kept slots).

``limit`` keeps the first N (trace, probe) blocks of the schedule's first repeat, after
the other filters. Every role is asked every block, so each role gets the same N slots
per repeat, which keeps the roles comparable, and the kept slots of repeat 1 are the
first N x roles slots of the unlimited plan.

Invariants:
- A registration without a subset encodes no ``subset`` key: registrations made before
  subsets existed keep their bytes and their sha256.
- A subset record is normalized (roles in the campaign's order, traces in the
  selection's order, probes sorted, each once), so the same flags in any order make the
  same registration.
- Narrowing is idempotent: narrowing an already narrowed campaign by its own record
  changes nothing. That is what lets ``load_registration`` re-derive a subset
  registration from the campaign it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from efold.controller.campaigns.campaign import Campaign
from efold.controller.errors import CampaignError
from efold.errors import Code

# How many ids a refusal lists before it says how many more there are.
_LISTED = 8


class Subset(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """What a subset registration kept. Empty (or None): that dimension is not narrowed."""

    roles: list[str] = []  # in the campaign's order
    traces: list[str] = []  # in the selection's (the suite's) order
    probes: list[str] = []  # probe ids, sorted
    limit: int | None = None  # the schedule's first `limit` (trace, probe) blocks; >= 1


def requested(roles: Sequence[str] = (), traces: Sequence[str] = (),
              probes: Sequence[str] = (), limit: int | None = None) -> Subset | None:
    """The subset some flags ask for, or None when they ask for none (not yet
    normalized: that needs the campaign, see ``narrow_campaign``/``narrow_selection``)."""
    if not (roles or traces or probes or limit is not None):
        return None
    return Subset(roles=list(roles), traces=list(traces), probes=list(probes), limit=limit)


def describe(subset: Subset) -> str:
    """One line for an operator: ``roles=native,store traces=... limit=5``."""
    parts = [f"{name}={','.join(values)}" for name, values in
             (("roles", subset.roles), ("traces", subset.traces), ("probes", subset.probes))
             if values]
    if subset.limit is not None:
        parts.append(f"limit={subset.limit}")
    return " ".join(parts)


def _listing(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:_LISTED])
    return shown if len(ids) <= _LISTED else f"{shown}, ... ({len(ids)} in all)"


def _unknown(kind: str, unknown: Sequence[str], where: str, known: Sequence[str]) -> CampaignError:
    return CampaignError(Code.SUBSET_UNKNOWN,
                         f"{kind} {', '.join(unknown)} not in {where} (its {kind}: "
                         f"{_listing(known)})")


def narrow_campaign(campaign: Campaign, subset: Subset) -> tuple[Campaign, Subset]:
    """The campaign with only the subset's roles (in its own order), and the subset with
    its roles normalized. A role the campaign does not have refuses with
    ``subset_unknown``, listing the campaign's roles."""
    if not subset.roles:
        return campaign, subset
    names = [r.name for r in campaign.roles]
    unknown = [r for r in dict.fromkeys(subset.roles) if r not in names]
    if unknown:
        raise _unknown("roles", unknown, f"campaign {campaign.name!r}", names)
    kept = [r for r in campaign.roles if r.name in subset.roles]
    # A declared comparison stays only with both its roles.
    design = [d for d in campaign.design if set(d.roles) <= set(subset.roles)]
    return (msgspec.structs.replace(campaign, roles=kept, design=design),
            msgspec.structs.replace(subset, roles=[r.name for r in kept]))


Selected = list[tuple[str, list[str]]]  # (trace_id, probe ids), in the selection's order


def narrow_selection(selected: Selected, subset: Subset, block_rank: Callable[[str, str], str],
                     campaign_name: str) -> tuple[Selected, Subset]:
    """The selection with only the subset's traces and probes, then its first ``limit``
    blocks by ``block_rank`` (the schedule's order of repeat 1); traces left without a
    probe are dropped. Returns it with the subset's traces and probes normalized.

    A trace that is not in the campaign's selection, or a probe that is not among the
    kept traces' selected probes, refuses with ``subset_unknown`` listing what there is;
    nothing left refuses with ``subset_empty``."""
    where = f"campaign {campaign_name!r}"
    trace_ids = [t for t, _ in selected]
    if subset.traces:
        unknown = [t for t in dict.fromkeys(subset.traces) if t not in trace_ids]
        if unknown:
            raise _unknown("traces", unknown, where, trace_ids)
        selected = [(t, p) for t, p in selected if t in subset.traces]
    if subset.probes:
        probe_ids = [pid for _, probes in selected for pid in probes]
        unknown = [p for p in dict.fromkeys(subset.probes) if p not in probe_ids]
        if unknown:
            kept = "the kept traces of " if subset.traces else ""
            raise _unknown("probes", unknown, kept + where, probe_ids)
        selected = [(t, [p for p in probes if p in subset.probes]) for t, probes in selected]
    if subset.limit is not None:
        if subset.limit < 1:
            raise CampaignError(Code.SUBSET_EMPTY, f"limit {subset.limit} keeps no slot")
        blocks = sorted(((t, p) for t, probes in selected for p in probes),
                        key=lambda b: block_rank(*b))
        first = set(blocks[: subset.limit])
        selected = [(t, [p for p in probes if (t, p) in first]) for t, probes in selected]
    selected = [(t, probes) for t, probes in selected if probes]
    if not selected:
        raise CampaignError(Code.SUBSET_EMPTY, f"the subset {describe(subset)} keeps no probe")
    normal = msgspec.structs.replace(
        subset,
        traces=[t for t in trace_ids if t in subset.traces],
        probes=sorted(set(subset.probes)),
    )
    return selected, normal


def merge(base: Subset | None, base_selection: Selected, more: Subset,
          campaign_name: str) -> Subset:
    """The one subset equal to narrowing a registration (made with ``base``, which kept
    ``base_selection``) further by ``more``: ``more``'s traces and probes must be in
    ``base_selection`` (else ``subset_unknown``; its roles are checked against the
    registration's campaign when the result is registered), what ``more`` gives replaces
    ``base``'s, and two limits keep the smaller. A limit cannot be followed by a trace
    or probe filter (filtering first would keep blocks past the first limit): that
    refuses with ``campaign_invalid``."""
    where = f"the registration of campaign {campaign_name!r}"
    trace_ids = [t for t, _ in base_selection]
    unknown = [t for t in dict.fromkeys(more.traces) if t not in trace_ids]
    if unknown:
        raise _unknown("traces", unknown, where, trace_ids)
    kept_traces = more.traces or (base.traces if base else [])
    kept = [pid for t, probes in base_selection if not more.traces or t in more.traces
            for pid in probes]
    unknown = [p for p in dict.fromkeys(more.probes) if p not in kept]
    if unknown:
        raise _unknown("probes", unknown, where, kept)
    if base is None:
        return more
    if base.limit is not None and (more.traces or more.probes):
        raise CampaignError(Code.CAMPAIGN_INVALID,
                            "this registration is already limited to the schedule's first "
                            f"{base.limit} blocks: --traces/--probes would not narrow it; "
                            "register the campaign again with every flag at once")
    probes = more.probes or [p for p in base.probes if p in kept]
    limits = [x for x in (base.limit, more.limit) if x is not None]
    return Subset(roles=more.roles or base.roles, traces=kept_traces, probes=probes,
                  limit=min(limits) if limits else None)
