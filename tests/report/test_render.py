"""Renderers: canonical JSON, Markdown tables, a self-contained HTML page, and no content
of any kind in any of them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from html.parser import HTMLParser

import msgspec
import pytest

from efold.errors import Code
from efold.protocol.records import Plan, Receipt
from efold.report import (
    FAUX_NOTE,
    REPORT_FILES,
    ReportError,
    build_results,
    decode_results,
    render_html,
    render_json,
    render_markdown,
    render_reports,
)

RunFactory = Callable[..., tuple[Plan, list[Receipt]]]


def test_json_is_canonical_and_round_trips(synthetic_run: tuple[Plan, list[Receipt]]) -> None:
    results = build_results(*synthetic_run, faux=True)
    data = render_json(results)
    parsed = json.loads(data)
    assert data == json.dumps(parsed, sort_keys=True, separators=(",", ":"),
                              ensure_ascii=False).encode()
    assert parsed["schema"] == "results-v1"
    assert decode_results(data) == results
    # Same inputs, same bytes (receipts in another order too).
    plan, receipts = synthetic_run
    again = build_results(plan, list(reversed(receipts)), faux=True)
    assert render_reports(again) == render_reports(results)
    assert tuple(render_reports(results)) == REPORT_FILES


def test_decode_is_strict(synthetic_run: tuple[Plan, list[Receipt]]) -> None:
    parsed = json.loads(render_json(build_results(*synthetic_run, faux=True)))
    for change in ({"schema": "results-v2"}, {"surprise": 1}, {"repeats": "2"}):
        with pytest.raises(ReportError) as refused:
            decode_results(json.dumps({**parsed, **change}).encode())
        assert refused.value.code is Code.REPORT_INPUT_INVALID


def test_markdown_tables(synthetic_run: tuple[Plan, list[Receipt]]) -> None:
    results = build_results(*synthetic_run, faux=True)
    text = render_markdown(results)
    lines = text.splitlines()
    assert lines[0] == "# efold results: synthetic"
    # Built without the run's journal: the status banner says so, then the faux note.
    assert lines[2] == "**Status unknown: these results were built without the run's journal**"
    assert lines[4] == f"> {FAUX_NOTE}"
    for title in ("Execution", "Accuracy and availability", "Flip rate across repeats",
                  "Paired contrasts", "Outcome classes", "Excluded", "Fixed codes", "Spend"):
        assert f"## {title}" in lines
    # Every table row has as many cells as its header.
    width = None
    for line in lines:
        if line.startswith("| "):
            cells = line.count(" | ") + 1
            if width is None:
                width = cells
            assert cells == width, line
        else:
            width = None
    native = next(r for r in results.results if r.role == "native").overall
    assert (f"| native | all | {native.exact.successes}/{native.exact.trials} = "
            in text)
    assert "| cold-rebuild \u2212 native | all | " in text
    assert "\u2265" in text and "unknown in " in text  # unknown usage is a lower bound
    honest = render_markdown(build_results(*synthetic_run, faux=False))
    assert FAUX_NOTE not in honest and "> " not in honest


def test_single_repeat_markdown_has_no_flip_table(run_factory: RunFactory) -> None:
    text = render_markdown(build_results(*run_factory(3, repeats=1), faux=True))
    assert "## Flip rate across repeats" not in text


class _Audit(HTMLParser):
    """Collect tags and attributes, and check that non-void elements nest properly."""

    VOID = frozenset({"meta", "br", "hr", "img", "input", "link", "rect", "path", "line"})

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str | None]] = []
        self.stack: list[str] = []
        self.text: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += attrs
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += attrs

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(tag)

    def handle_data(self, data: str) -> None:
        if self.stack and self.stack[-1] != "style":
            self.text.append(data)


def test_html_is_self_contained(synthetic_run: tuple[Plan, list[Receipt]]) -> None:
    results = build_results(*synthetic_run, faux=True)
    page = render_html(results)
    audit = _Audit()
    audit.feed(page)
    audit.close()
    assert audit.errors == [] and audit.stack == []
    forbidden_tags = {"script", "link", "img", "iframe", "object", "embed", "image", "use",
                      "audio", "video", "source", "base", "form", "foreignobject"}
    assert forbidden_tags.isdisjoint(audit.tags)
    names = {name for name, _ in audit.attributes}
    assert names.isdisjoint({"src", "href", "xlink:href", "xmlns", "srcset", "action"})
    assert not any(name.startswith("on") for name in names)
    for marker in ("://", "url(", "@import", "@font-face", "javascript:", "data:"):
        assert marker not in page.lower()
    # One accuracy panel per category plus all, and the delta chart.
    assert audit.tags.count("svg") == len(results.categories) + 2
    assert f'<p class="faux">{FAUX_NOTE}</p>' in page


def _rendered_text(results_bytes: dict[str, bytes]) -> str:
    audit = _Audit()
    audit.feed(results_bytes["report.html"].decode())
    return "\n".join([results_bytes["summary.md"].decode(), results_bytes["results.json"]
                      .decode(), *audit.text])


_WORD = re.compile(r"[A-Za-z][A-Za-z_]+")


def test_reports_are_content_free(tmp_path: object, run_factory: RunFactory) -> None:
    """Everything rendered is the fixed wording, an input id, a code, a hash or a number.

    Two runs with disjoint ids are rendered; a word in run A's reports must be one of A's
    ids or also appear in run B's reports (the fixed wording). Then the usual suspects:
    no path, no URL, no question, no answer hash, no e-mail-like token."""
    plan_a, receipts_a = run_factory(11, roles=("native", "cold-rebuild", "pack"),
                                     traces=("kiln", "harbor"))
    plan_b, receipts_b = run_factory(12, roles=("compaction", "store", "ceiling"),
                                     traces=("orchard", "ferry"))
    text_a = _rendered_text(render_reports(build_results(plan_a, receipts_a, faux=True)))
    text_b = _rendered_text(render_reports(build_results(plan_b, receipts_b, faux=True)))

    def ids(plan: Plan) -> set[str]:
        words: set[str] = {plan.campaign}
        for slot in plan.slots:
            for value in (slot.slot, slot.role, slot.arm, slot.trace_id, slot.probe_id,
                          slot.checkpoint):
                words.update(_WORD.findall(value))
        return words

    ids_a, ids_b = ids(plan_a), ids(plan_b)
    fixed = set(_WORD.findall(text_b)) - ids_b
    hex_runs = re.compile(r"[0-9a-f]{64}")
    stray = set(_WORD.findall(hex_runs.sub(" ", text_a))) - ids_a - fixed
    assert stray == set()
    assert not (set(_WORD.findall(text_a)) & (ids_b - ids_a - fixed))

    for text in (text_a, text_b):
        assert str(tmp_path) not in text
        assert re.search(r"/[A-Za-z~._]", text) is None  # no path (k/n counts are digits)
        assert "://" not in text and "?" not in text and "@" not in text
        assert "\\n" not in text
    for receipt in receipts_a:
        if receipt.answer_sha256 is not None:
            assert receipt.answer_sha256 not in text_a  # guessable for short answers
    # The hashes that do appear are the run's bindings and checkpoint digests.
    allowed = {plan_a.registration_sha256, plan_a.schedule_sha256} | {
        r.checkpoint_sha256 for r in receipts_a}
    assert set(hex_runs.findall(text_a)) <= allowed


def test_results_json_projects_slots_without_answers(
        synthetic_run: tuple[Plan, list[Receipt]]) -> None:
    parsed = msgspec.json.decode(render_json(build_results(*synthetic_run, faux=True)))
    plan, receipts = synthetic_run
    assert [row["slot"] for row in parsed["slots"]] == [s.slot for s in plan.slots]
    assert all("answer_sha256" not in row for row in parsed["slots"])
    assert len(receipts) == sum(row["status"] not in ("missing", "unvisited")
                                for row in parsed["slots"])
