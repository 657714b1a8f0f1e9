"""A chain of runs: a run and its continuations, read as one (``pilot --continue``).

A continuation is a new run, never the old one reopened. Its ``plan.json`` carries a
``ChainLink`` to the run it continues (``previous``: that run's absolute path; its link
``index``, the first run being link 1), and its journal records the same link (meta
``continues``). The run it continues names it back: meta ``continued_by`` in that run's
journal, written under that run's lease before the continuation launches anything
(``mark_continued``). A journal refuses a second value for a meta key, so a run is
continued at most once and a chain has no branches.

Reading a chain (``chain_links``) starts at any link, walks back along ``previous`` and
forward along ``continued_by``, and refuses (``chain_invalid``) unless every pair of
neighbours names each other, every link holds the same registration bytes and the
indices count up from 1. ``read_chain`` then reads every link (``aggregate.read_run``)
and merges them into one view of the registration's whole plan:

* each slot's receipt is its one terminal receipt (``continuation.TERMINAL``) in the
  chain, else the latest link's; a slot with terminal receipts in two links refuses
  (``receipt_duplicate``): it was paid for twice;
* the money is every link's journal money summed (a lost request's hold stays retained);
* how the chain ended is its last link's (its lease, stops and containment), every link's
  launches and containment episodes kept (link k's ids offset by k x ``LINK_ID_STRIDE``),
  and each link's own verdict listed (``ChainFacts``): "3 links: interrupted, crashed,
  complete". Slots no link has a terminal receipt for are the chain's ``to_run``: what
  ``pilot --continue`` on its last link would run.

Nothing here writes except ``mark_continued``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from efold.controller.campaigns.plan import plan_for
from efold.controller.campaigns.registration import REGISTRATION_NAME
from efold.controller.rundirs.aggregate import (
    AggregateError,
    RunView,
    build_run_results,
    fold_isolation_of,
    read_run,
    registered_view,
    run_records,
)
from efold.errors import Code, EfoldError
from efold.identity import current_identity
from efold.protocol.records import Plan, Receipt, SlotSpend, SlotStatus, TokenCounts
from efold.registry.journal import JournalReader, JournalWriter
from efold.registry.lease import Lease
from efold.report import EpisodeFact, LaunchFact, MoneyFact, RunFacts
from efold.report.schema import ChainFacts, FoldIsolation, LinkState, Verdict

__all__ = ["CONTINUED_BY", "LINKS_DIR", "LINK_ID_STRIDE", "TERMINAL", "chain_links",
           "continued_by", "is_chained", "mark_continued", "read_chain", "read_linked"]

# A slot with one of these receipts is done: a continuation never runs it again.
TERMINAL: Final = frozenset({SlotStatus.COMPLETED, SlotStatus.INVALID, SlotStatus.SKIPPED})
CONTINUED_BY: Final = "continued_by"  # meta of the continued run: its continuation's path
CONTINUES: Final = "continues"  # meta of a continuation: its ``ChainLink``, as JSON
# Launch and containment ids of link k are offset by k x this in a chain's report.
LINK_ID_STRIDE: Final = 1_000_000
LINKS_DIR: Final = "links"  # a damaged file of link k is named ``links/<k>/<name>``
MAX_LINKS: Final = 999  # a longer walk is a loop in the records, never a chain


def _refuse(detail: str) -> AggregateError:
    return AggregateError(Code.CHAIN_INVALID, detail)


def continued_by(run: Path) -> Path | None:
    """The run that continues ``run``, as its journal names it (``located`` beside
    ``run``), or None."""
    with JournalReader(run) as journal:
        value = journal.meta(CONTINUED_BY)
    return None if value is None else located(value, run)


def located(recorded: str, beside: Path) -> Path:
    """A link's run as another link recorded it (an absolute path): the run of that name
    beside ``beside`` when there is one (a chain moved or copied together keeps reading
    as itself, never as the runs it was copied from), else the recorded path."""
    sibling = beside.parent / os.path.basename(recorded)
    return sibling if (sibling / REGISTRATION_NAME).is_file() else Path(recorded)


def is_chained(run: Path) -> bool:
    """Whether ``run`` is a link of a chain: it continues a run, is continued, or runs a
    chosen part of its schedule (a chain of one, still to be continued)."""
    plan, _ = run_records(run)
    return plan.link is not None or plan.part is not None or continued_by(run) is not None


def mark_continued(previous: Path, lease: Lease, continuation: Path) -> None:
    """Under ``previous``'s lease (``lease``): a new epoch of its journal, then its
    ``continued_by`` meta naming ``continuation``: one committed row. A run already
    continued refuses (``run_already_continued``), naming its continuation."""
    journal = JournalWriter(previous, lease)
    try:
        already = journal.meta(CONTINUED_BY)
        if already is not None:
            raise AggregateError(Code.RUN_ALREADY_CONTINUED,
                                 f"{previous} is already continued by {already}: continue "
                                 "the chain's last link")
        lease.set_epoch(journal.record_epoch(current_identity()))
        journal.record_meta({CONTINUED_BY: str(continuation)})
    finally:
        journal.close()


def chain_links(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Every link of the chain ``run_dir`` belongs to, first to last (a run that is no
    link: itself alone). Refuses ``chain_invalid`` as the module docstring says."""
    run = Path(os.path.abspath(run_dir))
    plan, _ = run_records(run)
    reg_bytes = _registration(run)
    links = [run]
    here = plan
    while here.link is not None:
        previous = located(here.link.previous, links[0])
        if len(links) > MAX_LINKS:
            raise _refuse(f"{run}: more than {MAX_LINKS} links back: a loop")
        try:
            prev_plan, _ = run_records(previous)
            named = continued_by(previous)
        except (AggregateError, OSError) as exc:
            raise _refuse(f"{links[0]} continues {previous}, which is not readable: "
                          f"{exc}") from None
        if named != links[0]:
            raise _refuse(f"{links[0]} continues {previous}, which names "
                          f"{named or 'no run'} as its continuation: a continuation refused "
                          "before it linked (it ran nothing), or links moved apart")
        _check_pair(previous, prev_plan, links[0], here, reg_bytes)
        links.insert(0, previous)
        here = prev_plan
    last, last_plan = run, plan
    while (after := continued_by(last)) is not None:
        if len(links) > MAX_LINKS:
            raise _refuse(f"{run}: more than {MAX_LINKS} links on: a loop")
        try:
            next_plan, _ = run_records(after)
        except (AggregateError, OSError):
            # Named before its plan was published? Never: the link is written after.
            raise _refuse(f"{last} names {after} as its continuation, which holds no "
                          "readable run") from None
        if next_plan.link is None or located(next_plan.link.previous, after) != last:
            raise _refuse(f"{last} names {after} as its continuation, which continues "
                          "another run")
        _check_pair(last, last_plan, after, next_plan, reg_bytes)
        links.append(after)
        last, last_plan = after, next_plan
    return links


def _registration(run: Path) -> bytes:
    try:
        return (run / REGISTRATION_NAME).read_bytes()
    except OSError as exc:
        raise AggregateError(Code.RUN_RECORDS_INVALID, f"{run}: registration unreadable") from exc


def _check_pair(previous: Path, prev_plan: Plan, run: Path, plan: Plan,
                reg_bytes: bytes) -> None:
    """``run`` continues ``previous``: the same registration, the next index."""
    assert plan.link is not None
    prev_index = 1 if prev_plan.link is None else prev_plan.link.index
    if plan.link.index != prev_index + 1:
        raise _refuse(f"{run} is link {plan.link.index}, after link {prev_index}")
    if _registration(previous) != reg_bytes:
        raise _refuse(f"{run} and {previous}: not the same registration")


def read_linked(run: Path, *, allow_damaged: bool = False, chain: bool = True) -> RunView:
    """``run`` read whole: with ``chain``, its chain when it is a link of one (``read_chain``),
    else the run alone (``aggregate.read_run``)."""
    if chain and is_chained(run):
        return read_chain(chain_links(run), allow_damaged=allow_damaged)
    return read_run(run, allow_damaged=allow_damaged)


def _read_link(k: int, link: Path, links: int, allow_damaged: bool) -> RunView:
    """One link's view; a refusal of a chain's link names which link and where."""
    try:
        return read_run(link, allow_damaged=allow_damaged)
    except EfoldError as exc:
        if links == 1:
            raise
        raise type(exc)(exc.code, f"link {k + 1} of {links} ({link}): {exc.detail}") from exc


def read_chain(links: Sequence[Path], *, allow_damaged: bool = False) -> RunView:
    """The chain (``chain_links``'s, first to last) as one view of the registration's
    whole plan (module docstring). Refuses ``receipt_duplicate`` for a slot paid twice
    and ``chain_invalid`` for a link whose slots are not the plan's."""
    views = [_read_link(k, link, len(links), allow_damaged) for k, link in enumerate(links)]
    _, reg = run_records(links[0])
    if views[0].plan.shard is not None or views[0].plan.smoke:
        raise _refuse("a smoke or a cluster shard is never a link of a chain")
    plan = plan_for(reg)  # the whole plan: a chunk's first link holds only its part
    order = {s.slot: i for i, s in enumerate(plan.slots)}
    chosen: dict[str, tuple[int, Receipt]] = {}  # slot -> (link index from 0, receipt)
    for k, view in enumerate(views):
        if any(s.slot not in order for s in view.plan.slots):
            raise _refuse(f"{links[k]}: slots its registration's plan does not hold")
        for receipt in view.receipts:
            held = chosen.get(receipt.slot)
            if held is not None and held[1].status in TERMINAL:
                if receipt.status in TERMINAL:
                    raise AggregateError(Code.RECEIPT_DUPLICATE,
                                         f"{receipt.slot}: terminal in links {held[0] + 1} "
                                         f"and {k + 1}")
                continue  # a later non-terminal visit never hides a terminal receipt
            chosen[receipt.slot] = (k, receipt)
    receipts = sorted((r for _, r in chosen.values()), key=lambda r: order[r.slot])
    in_flight = sorted((slot for k, v in enumerate(views) for slot in v.in_flight
                        if chosen.get(slot, (-1,))[0] == k), key=order.__getitem__)
    missing = sorted({slot for v in views for slot in v.journaled_missing
                      if slot not in chosen}, key=lambda s: order.get(s, -1))
    spends: dict[str, SlotSpend] = {}
    for view in views:
        for key, spend in view.summariser_spends.items():
            spends[key] = _added(spends[key], spend) if key in spends else spend
    to_run = sum(1 for s in plan.slots
                 if s.slot not in chosen or chosen[s.slot][1].status not in TERMINAL)
    facts = _merged_facts(views, in_flight, to_run, _chain_isolation(links))
    return registered_view(reg, plan, receipts, missing, in_flight, spends, facts)


def _chain_isolation(links: Sequence[Path]) -> FoldIsolation:
    """How the chain's checkpoints were built, each once: a checkpoint a later link
    reused (``pilot.reuse``: the same key and snapshot digest) is its first build."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for link in links:
        with JournalReader(link) as journal:
            for row in journal.rows("assignments", "kind = 'checkpoint'"):
                rows.setdefault((row["slot"], row["snapshot_digest"]), row)
    return fold_isolation_of(list(rows.values()))


def _added(a: SlotSpend, b: SlotSpend) -> SlotSpend:
    """Two spends of one checkpoint (prepared in two links) as one."""
    return SlotSpend(
        requests=a.requests + b.requests, admitted=a.admitted + b.admitted,
        settled_units=a.settled_units + b.settled_units,
        retained_units=a.retained_units + b.retained_units,
        usage=TokenCounts(**{k: getattr(a.usage, k) + getattr(b.usage, k)
                             for k in TokenCounts.__struct_fields__}),
        usage_known=a.usage_known and b.usage_known)


def _merged_facts(views: Sequence[RunView], in_flight: list[str], to_run: int,
                  isolation: FoldIsolation) -> RunFacts:
    """How the chain went: its last link's end (lease, stops, containment mode), every
    link's launches and episodes (ids offset), the span from the first start to the
    last end, the money summed, and each link as it ended on its own."""
    last = views[-1].facts
    launches: list[LaunchFact] = []
    episodes: list[EpisodeFact] = []
    damaged: list[str] = []
    for k, view in enumerate(views, start=1):
        offset = k * LINK_ID_STRIDE
        launches += [msgspec.structs.replace(f, launch_id=f.launch_id + offset)
                     for f in view.facts.launches]
        episodes += [msgspec.structs.replace(e, containment_id=e.containment_id + offset,
                                             launch_id=e.launch_id + offset)
                     for e in view.facts.containments]
        damaged += [f"{LINKS_DIR}/{k}/{name}" for name in view.facts.damaged_files]
    starts = [v.facts.started_ns for v in views if v.facts.started_ns is not None]
    ends = [v.facts.ended_ns for v in views if v.facts.ended_ns is not None]
    moneys = [v.facts.money for v in views]
    money = None if any(m is None for m in moneys) else MoneyFact(
        settled_units=sum(m.settled_units for m in moneys if m),
        retained_units=sum(m.retained_units for m in moneys if m),
        open_units=sum(m.open_units for m in moneys if m))
    states = [LinkState(index=k, verdict=_verdict(view), planned=len(view.plan.slots),
                        visited=len(view.receipts),
                        finished=sum(r.status in TERMINAL for r in view.receipts),
                        containment=view.facts.containment.mode
                        if view.facts.containment is not None else None,
                        part=view.plan.part)
              for k, view in enumerate(views, start=1)]
    return RunFacts(
        sticky_stop=last.sticky_stop, stops=list(last.stops), launches=launches,
        containments=episodes, in_flight=in_flight,
        controller=last.controller,
        started_ns=min(starts) if starts else None, ended_ns=max(ends) if ends else None,
        money=money, damaged_files=sorted(damaged),
        template_unended=any(v.facts.template_unended for v in views),
        containment=last.containment, fold_isolation=isolation,
        chain=ChainFacts(links=states, to_run=to_run))


def _verdict(view: RunView) -> Verdict:
    status = build_run_results(view).status
    assert status is not None  # read from its journal
    return status.verdict
