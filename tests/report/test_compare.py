"""``report.compare`` on hand-built results: pairing by slot id, the scored-in-both rule,
flips both ways, status changes, slots in one run only, what changed, the refusal, and
the two renderings."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import msgspec
import pytest

from efold.errors import Code
from efold.protocol.records import Plan
from efold.report import Results, build_results
from efold.report.compare import (
    TEXT_WIDTH,
    RegistrationFacts,
    compare_results,
    render_comparison_json,
    render_comparison_text,
)
from efold.report.errors import ReportError
from efold.report.results import money
from efold.report.schema import RunMoney, SlotRow

DIGESTS = {name: f"{name}-digest" for name in
           ("corpus", "build", "catalog", "policy", "reader", "selection", "folds")}


def row(slot: str, status: str = "completed", correct: bool | None = True, *,
        role: str = "native", category: str = "tool_identifier",
        excluded: str | None = None, eligible: bool = True) -> SlotRow:
    if status != "completed":
        correct = None
    return SlotRow(slot=slot, role=role, trace_id="t1", probe_id=slot, category=category,
                   repeat=1, eligible=eligible, status=status, correct=correct,
                   excluded=excluded)


@pytest.fixture
def results(plan_factory: Callable[..., Plan]) -> Callable[..., Results]:
    base = build_results(plan_factory(["native", "store"], ["t1"], 1, 1), [], faux=True,
                         reader="faux/extractive")

    def make(rows: Sequence[SlotRow], **changes: object) -> Results:
        roles = list(dict.fromkeys(r.role for r in rows))
        return msgspec.structs.replace(base, slots=list(rows), roles=roles, **changes)

    return make


def facts(run: str, **digests: str) -> RegistrationFacts:
    return RegistrationFacts(run=run, digests={**DIGESTS, **digests})


def test_pairs_flips_status_changes_and_one_sided_slots(
        results: Callable[..., Results]) -> None:
    a = results([
        row("both-right"), row("flip-down"), row("flip-up", correct=False),
        row("both-wrong", correct=False), row("lost", "completed"),
        row("excluded-in-b"), row("only-a"),
        row("store-1", role="store", category="next_action"),
    ])
    b = results([
        row("store-1", role="store", category="next_action", correct=False),
        row("both-right"), row("flip-down", correct=False), row("flip-up"),
        row("both-wrong", correct=False), row("lost", "incomplete"),
        row("excluded-in-b", excluded="store_degraded"), row("only-b-1"), row("only-b-2"),
    ])
    c = compare_results(a, b, facts("A"), facts("B"))
    assert (c.slots.common, c.slots.only_a, c.slots.only_b) == (7, 1, 2)
    assert [s.slot for s in c.a_right_b_wrong] == ["flip-down", "store-1"]  # A's order
    assert [s.slot for s in c.a_wrong_b_right] == ["flip-up"]
    changed = {s.slot: (s.status_a, s.status_b, s.excluded_b) for s in c.status_changed}
    assert changed == {"lost": ("completed", "incomplete", None),
                       "excluded-in-b": ("completed", "completed", "store_degraded")}
    native, store = c.roles
    assert native.role == "native" and store.role == "store"
    # Scored in both: both-right, flip-down, flip-up, both-wrong (not lost, not excluded).
    p = native.overall.paired
    assert (native.overall.common, p.pairs, p.both_correct, p.b, p.c, p.both_wrong) \
        == (6, 4, 1, 1, 1, 1)
    assert (native.overall.accuracy_a.successes, native.overall.accuracy_a.trials) == (2, 4)
    assert (native.overall.accuracy_b.successes, native.overall.accuracy_b.trials) == (2, 4)
    assert p.delta_pp == 0.0
    s = store.overall
    assert (s.accuracy_a.successes, s.accuracy_b.successes, s.paired.delta_pp) == (1, 0, -100.0)
    assert [t.category for t in store.categories] == ["next_action"]
    assert not c.changed.registration and not c.changed.build and c.changed.digests == []


def test_ineligible_or_unscored_slots_are_never_pairs(results: Callable[..., Results]) -> None:
    a = results([row("x", eligible=False), row("y"), row("z", excluded="failed")])
    b = results([row("x", eligible=False, correct=False), row("y", correct=False),
                 row("z", excluded="failed", correct=False)])
    c = compare_results(a, b, facts("A"), facts("B"))
    [native] = c.roles
    assert native.overall.paired.pairs == 1
    assert [s.slot for s in c.a_right_b_wrong] == ["y"]
    assert c.status_changed == []


def test_what_changed_reads_every_fact(results: Callable[..., Results]) -> None:
    a = results([row("x")])
    b = results([row("x")], campaign="other", registration_sha256="f" * 64,
                schedule_sha256="e" * 64, reader="openai/gpt-x", reader_faux=False,
                repeats=3, money=RunMoney(settled=money(1_234_567_890_123),
                                          retained=money(20), open=money(0),
                                          charged=money(1_234_567_890_143)))
    c = compare_results(a, b, facts("A"), facts("B", build="new-build", corpus="new-corpus"))
    ch = c.changed
    assert (ch.registration, ch.build, ch.reader, ch.campaign, ch.schedule, ch.repeats) \
        == (True, True, True, True, True, True)
    assert not ch.roles and not ch.status
    assert ch.digests == ["build", "corpus"]
    text = render_comparison_text(c)
    assert "  build digest    differs  A build-digest  B new-build" in text
    assert any(line.startswith("  other digests   differ   corpus") for line in text)
    # A's results predate the journal's money: said so, never read from its receipts
    assert "  A  \u2014 (results written before the journal's money was reported)" in text
    assert ("  B  settled $61,728.39450615 + retained $0.00000100 of a "
            f"${b.cap.usd} cap") in text


def test_no_common_slot_refuses(results: Callable[..., Results]) -> None:
    with pytest.raises(ReportError) as caught:
        compare_results(results([row("x")]), results([row("y")]), facts("A"), facts("B"))
    assert caught.value.code is Code.COMPARE_NO_COMMON_SLOTS


def test_text_caps_lists_fits_the_width_and_json_has_everything(
        results: Callable[..., Results]) -> None:
    long_role = "r" * 40
    slots = [f"r1.{long_role}.some-long-trace-id.some-long-trace-id-p{i:03d}" for i in range(25)]
    a = results([row(s, role=long_role) for s in slots])
    b = results([row(s, role=long_role, correct=False) for s in slots[:23]]
                + [row(s, "incomplete", role=long_role) for s in slots[23:]])
    c = compare_results(a, b, facts("A"), facts("B"))
    text = render_comparison_text(c)
    assert all(len(line) <= TEXT_WIDTH and line == line.rstrip() for line in text)
    assert "  other digests   same" in text
    start = text.index("flipped, A right -> B wrong: 23")
    assert text[start + 1:start + 21] == [f"  {s}" for s in slots[:20]]
    assert text[start + 21] == "  ... and 3 more"
    assert "status changed: 2" in text
    at = text.index(f"  {slots[23]}")  # too long for one line with its change
    assert text[at + 1] == "      completed -> incomplete"
    short = compare_results(results([row("x")]), results([row("x", "incomplete")]),
                            facts("A"), facts("B"))
    assert "  x  completed -> incomplete" in render_comparison_text(short)
    document = render_comparison_json(c)
    assert document == render_comparison_json(c)  # canonical
    decoded = json.loads(document)
    assert decoded["schema"] == "comparison-v1" and list(decoded) == sorted(decoded)
    assert [s["slot"] for s in decoded["a_right_b_wrong"]] == slots[:23]
    assert len(decoded["status_changed"]) == 2


def test_text_gives_each_role_its_paired_interval_on_a_continuation_line(
        results: Callable[..., Results]) -> None:
    from efold.report.stats import newcombe_paired_interval

    # native: 4 scored pairs, A right in 3, B right in 1 (b = 2, c = 0); store: no pair.
    a = results([row("n1"), row("n2"), row("n3"), row("n4", correct=False),
                 row("s1", role="store", category="next_action")])
    b = results([row("n1"), row("n2", correct=False), row("n3", correct=False),
                 row("n4", correct=False),
                 row("s1", "incomplete", role="store", category="next_action")])
    c = compare_results(a, b, facts("A"), facts("B"))
    text = render_comparison_text(c)
    assert all(len(line) <= TEXT_WIDTH for line in text)
    ci = newcombe_paired_interval(1, 0, 2, 1)  # B's margin first: B - A
    assert ci is not None
    at = next(i for i, line in enumerate(text) if line.startswith("native "))
    assert text[at].split()[-5:] == ["-50.0", "1", "2", "0", "1"]
    assert text[at + 1] == (" " * 30 + f"B-A 95% CI {100 * ci.lower:.1f} to "
                            f"{100 * ci.upper:+.1f} pp")
    assert text[at + 1] == " " * 30 + "B-A 95% CI -78.9 to +13.5 pp"
    assert text[at + 2].startswith("  tool_identifier ")  # categories: no interval line
    store = text.index(next(line for line in text if line.startswith("store ")))
    assert text[store + 1] == " " * 30 + "B-A 95% CI - (no pairs)"
    legend = text.index("A only: A right and B wrong; B only: A wrong and B right "
                        "(paired counts)")
    assert text[legend + 1:legend + 3] == [
        "B-A 95% CI: Newcombe's hybrid score interval for paired proportions (method 10),",
        "  descriptive: not a significance claim"]
