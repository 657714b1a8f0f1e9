"""The run status: verdict precedence from journal facts, the banner every report opens
with, strict facts, and slot eligibility that learns infeasibility from skipped receipts."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from efold.corpus.model import Outcome
from efold.errors import Code
from efold.protocol.records import Plan, Receipt, SlotStatus
from efold.report import (
    EpisodeFact,
    LaunchFact,
    MoneyFact,
    ReportError,
    RunFacts,
    StopFact,
    build_results,
    decode_results,
    render_html,
    render_json,
    render_markdown,
    status_banner,
)
from efold.report.schema import RunStatus

PlanFactory = Callable[..., Plan]
ReceiptFactory = Callable[..., Receipt]


@pytest.fixture
def run(plan_factory: PlanFactory,
        receipt_factory: ReceiptFactory) -> tuple[Plan, list[Receipt]]:
    """Two roles, one trace, three probes: six slots, every one completed."""
    plan = plan_factory(["native", "store"], ["t1"], probes=3, repeats=1)
    return plan, [receipt_factory(s, SlotStatus.COMPLETED, outcome=Outcome.CORRECT)
                  for s in plan.slots]


def _facts(**changes: Any) -> RunFacts:
    base = RunFacts(sticky_stop=None, stops=[], launches=[], containments=[], in_flight=[],
                    controller="released")
    return msgspec.structs.replace(base, **changes)


def _probe(launch_id: int, slot: str, *, exited: bool = True) -> LaunchFact:
    return LaunchFact(launch_id=launch_id, slot=slot, kind="probe", exited=exited)


def _status(run: tuple[Plan, list[Receipt]], facts: RunFacts,
            receipts: list[Receipt] | None = None) -> RunStatus:
    plan, all_receipts = run
    results = build_results(plan, all_receipts if receipts is None else receipts, faux=True,
                            run_facts=facts)
    assert results.status is not None
    return results.status


def test_a_clean_run_is_complete(run: tuple[Plan, list[Receipt]]) -> None:
    plan, _ = run
    launches = [_probe(i + 1, s.slot) for i, s in enumerate(plan.slots)]
    status = _status(run, _facts(launches=launches))
    assert status.verdict == "complete" and status.stop is None
    assert not (status.crashed or status.unreconciled or status.interrupted)
    assert status.missing_slots == 0 and status.in_flight == []


def test_stop_codes_sticky_first_then_non_sticky(run: tuple[Plan, list[Receipt]]) -> None:
    cap = _status(run, _facts(stops=[StopFact(Code.NOT_ADMITTED_CAP.value, False)]))
    assert (cap.verdict, cap.stop) == ("stopped", "not_admitted_cap")
    sticky = _status(run, _facts(
        sticky_stop=Code.LOOKUP_REPEATED_LOSS.value,
        stops=[StopFact(Code.NOT_ADMITTED_CAP.value, False),
               StopFact(Code.LOOKUP_REPEATED_LOSS.value, True)]))
    assert (sticky.verdict, sticky.stop) == ("stopped", "lookup_repeated_loss")


def test_containment_episodes_and_supersession(run: tuple[Plan, list[Receipt]]) -> None:
    plan, _ = run
    slot = plan.slots[0].slot
    launch = [_probe(1, slot, exited=False)]
    contained = EpisodeFact(1, 1, Code.LOOKUP_WORKER_LOST.value, True, "contained")
    status = _status(run, _facts(launches=launch, containments=[contained]))
    assert status.verdict == "complete" and not status.unreconciled
    (episode,) = status.containments
    assert (episode.launch_id, episode.slot, episode.kind, episode.cause, episode.outcome,
            episode.finished) == (1, slot, "probe", "lookup_worker_lost", "contained", True)
    # An episode that ended unreconciled: processes may be alive, whatever else holds.
    bad = EpisodeFact(1, 1, Code.LOOKUP_WORKER_LOST.value, True, "unreconciled")
    status = _status(run, _facts(launches=launch, containments=[bad], controller="live",
                                 sticky_stop=Code.UNRECONCILED_CONTAINMENT.value,
                                 stops=[StopFact(Code.UNRECONCILED_CONTAINMENT.value, True)]))
    assert status.verdict == "unreconciled" and status.unreconciled
    assert status.stop == "unreconciled_containment"
    # An unfinished episode reads as unreconciled (nobody proved it contained).
    open_episode = EpisodeFact(1, 1, Code.WORKER_TIMEOUT.value, False, None)
    status = _status(run, _facts(launches=launch, containments=[open_episode]))
    assert status.unreconciled and status.crashed
    assert (status.containments[0].outcome, status.containments[0].finished) == (
        "unreconciled", False)
    # A later finished contained episode of the same launch (reap's) settles both.
    reaped = EpisodeFact(2, 1, Code.RUN_UNRECONCILED.value, True, "contained")
    for earlier in (bad, open_episode):
        status = _status(run, _facts(launches=launch, containments=[earlier, reaped]))
        assert not status.unreconciled and len(status.containments) == 2


def test_a_launch_never_seen_to_end_is_unreconciled(run: tuple[Plan, list[Receipt]]) -> None:
    plan, receipts = run
    last = plan.slots[-1].slot
    launches = [_probe(i + 1, s.slot, exited=s.slot != last) for i, s in enumerate(plan.slots)]
    status = _status(run, _facts(launches=launches, in_flight=[last],
                                 controller="holder_dead"), receipts[:-1])
    assert status.verdict == "unreconciled" and status.unexited_launches == [len(launches)]
    assert status.crashed and status.in_flight == [last]
    # While a controller holds the lease, an open launch is its own: the run is running.
    live = _status(run, _facts(launches=launches, in_flight=[last], controller="live"),
                   receipts[:-1])
    assert (live.verdict, live.unreconciled, live.crashed) == ("running", False, False)


def test_crashes_and_interruptions(run: tuple[Plan, list[Receipt]]) -> None:
    plan, receipts = run
    # The controller died after the last receipt: crashed, nothing missing.
    died = _status(run, _facts(controller="holder_dead"))
    assert (died.verdict, died.crashed, died.missing_slots) == ("crashed", True, 0)
    # Ended without visiting every slot (an exception released the lease).
    short = _status(run, _facts(), receipts[:3])
    assert (short.verdict, short.crashed) == ("crashed", True)
    assert short.missing_slot_ids == [s.slot for s in plan.slots[3:]]
    # The same gap after an operator interruption is an interruption, not a crash.
    interrupted = _facts(sticky_stop=Code.INTERRUPTED.value,
                         stops=[StopFact(Code.INTERRUPTED.value, True)])
    stopped = _status(run, interrupted, receipts[:3])
    assert (stopped.verdict, stopped.stop, stopped.interrupted, stopped.crashed) == (
        "interrupted", "interrupted", True, False)
    assert stopped.missing_slots == 3


def test_banner_leads_every_rendering(run: tuple[Plan, list[Receipt]]) -> None:
    plan, receipts = run
    slot = plan.slots[0].slot
    facts = _facts(
        sticky_stop=Code.LOOKUP_REPEATED_LOSS.value,
        stops=[StopFact(Code.LOOKUP_REPEATED_LOSS.value, True)],
        launches=[_probe(7, slot)],
        containments=[EpisodeFact(3, 7, Code.LOOKUP_WORKER_LOST.value, True, "contained")],
    )
    results = build_results(plan, receipts, faux=True, run_facts=facts)
    md = render_markdown(results).splitlines()
    assert md[2] == ("**Stopped: lookup_repeated_loss (two consecutive admitted slots lost a "
                     "request on the provider side)**")
    assert "- Stop code: `lookup_repeated_loss`" in md
    assert (f"- Containment 3: launch 7 (probe {slot}), cause `lookup_worker_lost`, contained"
            in md)
    assert md.index("- Containment episodes: 1") < md.index(
        "> The reader is the faux extractive reader: its accuracy measures what the fold "
        "kept, not model quality.")
    page = render_html(results)
    body = page.split("<body>", 1)[1]
    assert body.startswith('<div class="status status-stopped" id="status">')
    assert ('<p class="verdict">Stopped: lookup_repeated_loss (two consecutive admitted '
            "slots lost a request on the provider side)</p>") in body
    assert body.index("</dl>") < body.index("<h1>efold results: synthetic</h1>")
    assert "cause <code>lookup_worker_lost</code>, contained" in page
    # results.json carries the status and decodes strictly.
    parsed = json.loads(render_json(results))
    assert parsed["status"]["verdict"] == "stopped"
    assert parsed["status"]["containments"][0]["outcome"] == "contained"
    assert decode_results(render_json(results)) == results
    bad = {**parsed, "status": {**parsed["status"], "verdict": "fine"}}
    with pytest.raises(ReportError):
        decode_results(json.dumps(bad).encode())
    # A results-v1 document written before the status still decodes (status null).
    del parsed["status"]
    assert decode_results(json.dumps(parsed).encode()).status is None


def test_unreconciled_banner_names_the_commands(run: tuple[Plan, list[Receipt]]) -> None:
    plan, receipts = run
    facts = _facts(launches=[_probe(1, plan.slots[0].slot, exited=False)])
    results = build_results(plan, receipts, faux=False, run_facts=facts)
    headline = ("UNRECONCILED: processes of this run may be alive \u2014 run "
                "`efold-controller recover RUN` then `efold-controller reap RUN`")
    assert render_markdown(results).splitlines()[2] == f"**{headline}**"
    page = render_html(results)
    assert ('<p class="verdict">UNRECONCILED: processes of this run may be alive \u2014 run '
            "<code>efold-controller recover RUN</code> then "
            "<code>efold-controller reap RUN</code></p>") in page
    assert 'class="status status-unreconciled"' in page
    # Fixed sentences, codes, ids and counts: no path, URL or question in the banner.
    banner = page.split('<div class="status', 1)[1].split("<h1>", 1)[0]
    md_banner = render_markdown(results).split("\n- schema:", 1)[0]
    for text in (md_banner, re.sub(r"<[^>]*>", " ", banner)):
        assert "Launches with no exit record and no finished containment: 1" in text
        assert re.search(r"/[A-Za-z~._]", text) is None
        assert "://" not in text and "?" not in text


@pytest.mark.parametrize("change", [
    {"sticky_stop": "the run fell over"},
    {"stops": [StopFact("not a code", True)]},
    {"controller": "maybe"},
    {"launches": [LaunchFact(1, "../etc/passwd", "probe", True)]},
    {"launches": [LaunchFact(1, "s0000", "shell", True)]},
    {"containments": [EpisodeFact(1, 9, "lookup_worker_lost", True, "contained")]},
    {"launches": [LaunchFact(1, "s0000", "probe", True)],
     "containments": [EpisodeFact(1, 1, "lookup_worker_lost", True, "probably fine")]},
    {"in_flight": ["s9999"]},
])
def test_facts_are_checked_like_receipts(run: tuple[Plan, list[Receipt]],
                                         change: dict[str, Any]) -> None:
    with pytest.raises(ReportError) as refused:
        _status(run, _facts(**change))
    assert refused.value.code is Code.REPORT_INPUT_INVALID


def test_a_damaged_file_is_never_complete_and_is_named(
        run: tuple[Plan, list[Receipt]]) -> None:
    plan, _ = run
    launches = [_probe(i + 1, s.slot) for i, s in enumerate(plan.slots)]
    assert _status(run, _facts(launches=launches, damaged_files=[])).verdict == "complete"
    one = _status(run, _facts(launches=launches, damaged_files=["receipts/s0001.json"]))
    assert (one.verdict, one.damaged_files) == ("damaged", ["receipts/s0001.json"])
    headline, details = status_banner(one)
    assert headline == ("Damaged: 1 file gone or unreadable (receipts/s0001.json); the "
                        "figures count only what could be read")
    assert "Damaged files (gone or unreadable): 1 (receipts/s0001.json)" in details
    # damaged outranks a stop; a crash outranks damage, which its headline still names
    stopped = _status(run, _facts(launches=launches, damaged_files=["results.json"],
                                  stops=[StopFact(Code.NOT_ADMITTED_CAP.value, False)]))
    assert (stopped.verdict, stopped.stop) == ("damaged", "not_admitted_cap")
    crashed = _status(run, _facts(launches=launches, controller="holder_dead",
                                  damaged_files=["receipts/b.json", "receipts/a.json"]))
    assert crashed.verdict == "crashed" and crashed.damaged_files == [
        "receipts/a.json", "receipts/b.json"]
    assert status_banner(crashed)[0].endswith("; DAMAGED: 2 files")
    assert status_banner(_status(run, _facts(launches=launches)))[1][-1] == \
        "Damaged files (gone or unreadable): 0"


@pytest.mark.parametrize("name", ["../etc/passwd", "/tmp/x.json", "receipts/a b.json",
                                  "receipts/x.txt", "journal.sqlite", "shards/x/results.json",
                                  "receipts/.hidden.json"])
def test_a_damaged_file_is_named_only_as_a_run_file(run: tuple[Plan, list[Receipt]],
                                                    name: str) -> None:
    with pytest.raises(ReportError) as refused:
        _status(run, _facts(damaged_files=[name]))
    assert refused.value.code is Code.REPORT_INPUT_INVALID


@pytest.mark.parametrize("name", ["results.json", "receipts/r1.native.t1.p00.json",
                                  "receipts/(unnamed).json", "shards/2/receipts/s1.json",
                                  "shards/12/results.json"])
def test_run_file_names_are_accepted(run: tuple[Plan, list[Receipt]], name: str) -> None:
    assert _status(run, _facts(damaged_files=[name])).damaged_files == [name]


def test_the_journal_money_reaches_the_results_unit_for_unit(
        run: tuple[Plan, list[Receipt]]) -> None:
    plan, receipts = run
    facts = _facts(money=MoneyFact(settled_units=7, retained_units=0, open_units=1))
    results = build_results(plan, receipts, faux=True, run_facts=facts)
    assert results.money is not None
    assert (results.money.settled.units, results.money.retained.units,
            results.money.open.units, results.money.charged.units) == (7, 0, 1, 8)
    assert results.money.settled.usd == "0.00000035"
    assert build_results(plan, receipts, faux=True, run_facts=_facts()).money is None
    with pytest.raises(ReportError):
        build_results(plan, receipts, faux=True, run_facts=_facts(
            money=MoneyFact(settled_units=0, retained_units=-1, open_units=0)))


def test_a_skipped_receipt_leaves_the_eligible_inventory(
        plan_factory: PlanFactory, receipt_factory: ReceiptFactory) -> None:
    """Infeasibility learned after the plan (a planned-eligible slot visited as skipped)
    counts like infeasibility the plan knew: out of eligible, missing and the pairs."""
    plan = plan_factory(["native", "store"], ["t1"], probes=2, repeats=1)
    skipped = {s.slot for s in plan.slots if s.role == "native"}
    receipts = [
        receipt_factory(s, SlotStatus.SKIPPED, code=Code.INVENTORY_INFEASIBLE,
                        availability=None) if s.slot in skipped
        else receipt_factory(s, SlotStatus.COMPLETED, outcome=Outcome.CORRECT)
        for s in plan.slots
    ]
    results = build_results(plan, receipts, faux=True)
    assert (results.execution.planned, results.execution.eligible) == (4, 2)
    assert (results.execution.skipped, results.execution.missing) == (2, 0)
    native = next(r for r in results.results if r.role == "native").overall
    assert native.execution.eligible == 0 and native.exact.trials == 0
    assert sum(native.availability.values()) == 0
    assert results.contrasts[0].overall.eligible_pairs == 0
    rows = {row.slot: row for row in results.slots}
    assert all(rows[s].eligible is False and rows[s].status == "skipped" for s in skipped)
    # The same run as the plan knows it today (ineligible and skipped): identical counts.
    known = plan_factory(["native", "store"], ["t1"], probes=2, repeats=1,
                         ineligible=lambda role, trace: role == "native")
    again = build_results(known, receipts, faux=True)
    assert again.execution == results.execution and again.results == results.results
    assert again.contrasts == results.contrasts and again.slots == results.slots
