"""The surface-form contract of FORMS.md holds in every suite: the only lines shaped
like `Label: value` are the documented facts, so an extractive reader that trusts
them is never misled by filler or chatter."""

from __future__ import annotations

import pytest

from efold.corpus import SuiteItem, forms

# Documented labels besides the probes' own (FORMS.md §2).
GENERAL = {"rule", "next", "steer", "correction", "temporary password", "portal user name",
           "estimated delivery", "delivery report", "priority order", "dependency"}
# Labels that open a form of their own (FORMS.md §2): each line must be that form whole.
PREFIXED = (("status of the ", forms.STATUS_LINE), ("decision on the ", forms.DECISION_LINE),
            ("rejected for the ", forms.REJECTED_LINE))


@pytest.fixture(params=["original_items", "hard_items", "distractor_items"])
def items(request: pytest.FixtureRequest) -> list[SuiteItem]:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def test_fact_lines_are_only_documented_forms(items: list[SuiteItem]) -> None:
    for item in items:
        premises = [m.group("label").lower() for p in item.probes.probes for premise in p.premises
                    if (m := forms.FACT_LINE.match(premise))]
        allowed = GENERAL | {p.label.lower() for p in item.probes.probes if p.label} | set(premises)
        for event in item.trace.events:
            for match in forms.FACT_LINE.finditer(event.content):
                label = match.group("label").lower()
                form = next((f for prefix, f in PREFIXED if label.startswith(prefix)), None)
                if form is not None:
                    assert form.fullmatch(match.group(0)), match.group(0)
                else:
                    assert label in allowed, (event.id, match.group(0)[:80])
                if label == "priority order":
                    assert event.role == "user" and forms.PRIORITY_LINE.fullmatch(match.group(0))
                if label == "dependency":
                    assert forms.DEPENDENCY_LINE.fullmatch(match.group(0)), match.group(0)


def test_steers_and_next_lines_use_their_forms(items: list[SuiteItem]) -> None:
    for item in items:
        for event in item.trace.events:
            if event.steer:
                assert event.content.startswith(forms.STEER_PREFIX)
            for line in event.content.splitlines():
                if line.startswith("Next: "):
                    assert event.role == "user" and forms.NEXT_LINE.fullmatch(line)
                if line.startswith("Correction: "):
                    assert forms.CORRECTION_LINE.fullmatch(line)
                if line.startswith("Rule: "):
                    assert event.role == "user" and forms.RULE_LINE.fullmatch(line)


def test_every_question_names_its_label(items: list[SuiteItem]) -> None:
    for item in items:
        for probe in item.probes.probes:
            assert probe.question.startswith(forms.PROBE_PREAMBLE)
            if probe.label and probe.mode is None and probe.label != "next":
                named = probe.label.lower().removeprefix("decision on the ")
                assert named in probe.question.lower()
