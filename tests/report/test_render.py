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
    RunStatus,
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
    # Built without the run's journal: the status banner says so, then the run's
    # identity in one line, then the faux note.
    assert lines[2] == "**Status unknown: these results were built without the run's journal**"
    assert lines[4] == ("campaign: synthetic \u00b7 reader: faux extractive \u00b7 faux: yes "
                        "(faux units, no money spent) \u00b7 registration: "
                        f"{results.registration_sha256[:12]}")
    # What ran when: no journal, so no times; no registration, so no reader model.
    assert lines[6] == (f"efold: {results.run.efold_version} \u00b7 started: \u2014 \u00b7 "  # type: ignore[union-attr]
                        "ended: \u2014 \u00b7 duration: \u2014 \u00b7 reader model: \u2014")
    assert lines[8] == f"> {FAUX_NOTE}"
    for title in ("Execution", "Accuracy and availability", "Flip rate across repeats",
                  "Paired contrasts", "Outcome classes", "Excluded", "Fixed codes",
                  "Spend (faux units, no money spent)"):
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

    VOID = frozenset({"meta", "br", "hr", "img", "input", "link", "rect", "path", "line",
                      "wbr"})

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
    # The first screen's scatters (size; cost where a cost per correct answer exists)
    # and the delta chart; the per-category accuracy is the heatmap, a table.
    assert 2 <= audit.tags.count("svg") <= 3 and 'class="heatmap"' in page
    assert f'<p class="faux">{FAUX_NOTE}</p>' in page
    # The banner is the body's first element; the title follows it.
    assert page.split("<body>", 1)[1].startswith('<div class="status status-unknown" id="status">')


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
    # Every section in both runs, so B's reports hold all the fixed wording: A and B each
    # have a lookup arm (pack, store) and an arm named native (B's under another role
    # name), so both show tool use and every role against native.
    plan_b = msgspec.structs.replace(plan_b, slots=[
        msgspec.structs.replace(s, arm="native") if s.role == "ceiling" else s
        for s in plan_b.slots])
    receipts_b = [msgspec.structs.replace(r, arm="native") if r.role == "ceiling" else r
                  for r in receipts_b]
    text_a = _rendered_text(render_reports(build_results(plan_a, receipts_a, faux=True)))
    text_b = _rendered_text(render_reports(build_results(plan_b, receipts_b, faux=True)))

    def ids(plan: Plan) -> set[str]:
        words: set[str] = {plan.campaign}
        for slot in plan.slots:
            for value in (slot.slot, slot.role, slot.arm, slot.trace_id, slot.probe_id,
                          slot.checkpoint):
                words.update(_WORD.findall(value))
        return words

    for text in (text_a, text_b):  # the sections that depend on the run: in both
        assert "## Tool use" in text and "## Delta versus " in text
        assert "## Accuracy per repeat" in text and "## Latency" in text
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


# -- readability: banner, terms, numbers, layout hooks ---------------------------------

def _stop_codes_in_source() -> set[str]:
    """Every code the controller can record as a run's stop, derived from the source:
    the guard codes a child may claim as a stop, the channel's integrity codes, and every
    literal ``Code.X`` handed to a stop (``take_stop``, ``record_stop``, ``survivor_stop``,
    the ledger's ``_violation``), plus the reasons admission ends without a broken rule."""
    from pathlib import Path

    from efold.controller.rundirs import run_context
    from efold.guard.permits import CHILD_REPORTABLE_CODES, CONTINUABLE_CODES

    codes = {c.value for c in CHILD_REPORTABLE_CODES - CONTINUABLE_CODES}
    codes |= {c.value for c in run_context._INTEGRITY_IPC}
    root = Path(run_context.__file__).resolve().parents[1]
    handed = re.compile(r"(?:take_stop|record_stop|\.stop|_violation|PermitIntegrityError)\("
                        r"\s*(?:code=)?Code\.([A-Z_]+)|survivor_stop=Code\.([A-Z_]+)|"
                        r"stops\.append\(Code\.([A-Z_]+)")
    for folder in ("controller", "guard"):
        for source in (root / folder).rglob("*.py"):
            for match in handed.finditer(source.read_text()):
                name = next(group for group in match.groups() if group)
                codes.add(Code[name].value)
    # Not literal at the call site: the stop policy's rules, admission's end, a digest
    # change under the run.
    codes |= {Code.LOOKUP_REPEATED_LOSS.value, Code.INVALID_SLOT_RATE.value,
              Code.NOT_ADMITTED_CAP.value, Code.RUN_DEADLINE.value,
              Code.WORKER_DIGEST_MISMATCH.value}
    return codes


def test_every_stop_code_has_a_meaning() -> None:
    from efold.report.terms import STOP_MEANINGS, stop_meaning

    stops = _stop_codes_in_source()
    assert len(stops) > 40  # the derivation found the guard's codes, not just a few
    assert stops - set(STOP_MEANINGS) == set()
    assert set(STOP_MEANINGS) <= {code.value for code in Code}
    assert stop_meaning("not_admitted_cap") == "the cap could not admit the next request"
    assert stop_meaning(None) is None and stop_meaning("report_input_invalid") is None
    for meaning in STOP_MEANINGS.values():  # content-free sentences
        assert meaning and re.search(r"/[A-Za-z~._]", meaning) is None and "?" not in meaning


def test_terms_cover_every_class_the_tables_show() -> None:
    from efold.corpus.model import Availability, Outcome
    from efold.protocol.records import Exclusion, SlotStatus
    from efold.report.terms import (
        ACCURACY_TERMS,
        AVAILABILITY_TERMS,
        EXCLUSION_TERMS,
        EXECUTION_TERMS,
        OUTCOME_TERMS,
    )

    assert {a.value for a in Availability} <= dict(AVAILABILITY_TERMS).keys()
    assert {o.value for o in Outcome} == dict(OUTCOME_TERMS).keys()
    assert {e.value for e in Exclusion} == dict(EXCLUSION_TERMS).keys()
    assert {s.value for s in SlotStatus} <= dict(EXECUTION_TERMS).keys()
    assert {"exact", "exactWithFailures"} <= dict(ACCURACY_TERMS).keys()


def test_numbers_group_counts_and_keep_money_exact() -> None:
    from efold.report import money
    from efold.report.numbers import FAUX_MONEY, count, money_text, usd

    assert [count(n) for n in (0, 999, 1000, 1234567)] == ["0", "999", "1,000", "1,234,567"]
    assert usd("999.00000000") == "999.00000000"
    assert usd("1000.00000000") == "1,000.00000000"
    assert usd("1234567.12345678") == "1,234,567.12345678"
    assert usd("12") == "12" and usd("not money") == "not money"
    amount = money(24_690_000_001)  # 1,234.50000005 USD: every digit survives
    assert money_text(amount, faux=False) == "1,234.50000005 USD (24,690,000,001 units)"
    # Faux money is never dollars: its exact amount without trailing zeros, in faux units.
    assert money_text(amount, faux=True) == "1,234.50000005 faux units (no money spent)"
    assert FAUX_MONEY == "faux units, no money spent"
    assert usd(amount.usd).replace(",", "") == amount.usd


def _big_usage_run(plan_factory: Callable[..., Plan],
                   receipt_factory: Callable[..., Receipt]) -> tuple[Plan, list[Receipt]]:
    from efold.corpus.model import Outcome
    from efold.protocol.records import SlotSpend, SlotStatus, TokenCounts

    plan = plan_factory(["native", "pack"], ["t1"], probes=3, repeats=1,
                        cap_units=2_000_000_000_000)
    spend = SlotSpend(requests=1, admitted=1, settled_units=12_345_678_901,
                      usage=TokenCounts(input=1_234_567, output=7_654))
    return plan, [receipt_factory(s, SlotStatus.COMPLETED, outcome=Outcome.CORRECT, spend=spend)
                  for s in plan.slots]


def test_counts_tokens_and_money_get_separators_and_faux_money_is_labelled(
        plan_factory: Callable[..., Plan], receipt_factory: Callable[..., Receipt]) -> None:
    plan, receipts = _big_usage_run(plan_factory, receipt_factory)
    faux = build_results(plan, receipts, faux=True)
    real = build_results(plan, receipts, faux=False)
    for text in (render_markdown(faux), render_html(faux)):
        assert "3,703,701" in text and "7,407,402" in text  # a role's and the run's input
        assert "100,000.00" in text  # the cap, exact, grouped (faux: no trailing zeros)
        assert "100,000.00000000" not in text
        assert "3,703.7036703" in text  # 6 x 12,345,678,901 units settled
        assert "74,074,073,406" in text
        assert "7407402" not in text and "100000.0" not in text and "3703.7" not in text
        assert "faux units, no money spent" in text
    md = render_markdown(faux)
    assert "USD" not in md and "$" not in md  # faux money is never dollars
    real_page = render_html(real)
    for text in (render_markdown(real), real_page.split("</style>", 1)[1]):
        assert "faux units" not in text and "faux USD" not in text
        assert "faux: no (real money)" in text or "<dt>faux</dt><dd>no (real money)</dd>" in text
        assert "7,407,402" in text and "3,703.70367030 USD" in text


def test_tables_carry_their_legends(synthetic_run: tuple[Plan, list[Receipt]]) -> None:
    results = build_results(*synthetic_run, faux=True)
    md = render_markdown(results)
    for word in ("present", "superseded_present", "recoverable", "absent", "stale",
                 "fabricated", "boundary_unverified", "exact", "exactWithFailures"):
        assert f"\n- `{word}`: " in md, word
    # A legend follows the table that uses it.
    assert md.index("## Accuracy and availability") < md.index("- `superseded_present`: ") \
        < md.index("## Paired contrasts")
    page = render_html(results)
    assert page.count('<dl class="terms">') >= 5
    assert "<dt><code>recoverable</code></dt><dd>not in the checkpoint" in page
    assert '<th><abbr title="the expected value is in the checkpoint the reader sees">' \
           "present</abbr></th>" in page
    assert "superseded_<wbr>present" in page  # long words wrap after their separators


def test_the_per_slot_table_is_folded_with_counts(
        synthetic_run: tuple[Plan, list[Receipt]]) -> None:
    results = build_results(*synthetic_run, faux=True)
    page = render_html(results)
    slots = page.split('<details class="table"><summary><h2>Slots</h2>', 1)[1]
    summary = slots.split("</summary>", 1)[0]
    completed = sum(row.status == "completed" for row in results.slots)
    assert f"{len(results.slots)} slots, {completed} completed" in summary
    assert slots.count("<tr>") == len(results.slots) + 1  # every slot and the header
    assert "## Slots" not in render_markdown(results)  # the summary stays short
    # Every other table is collapsible but open: thirteen, with two repeats, a native
    # role and a lookup role (paired contrasts overall and by category).
    assert page.count('<details class="table" open>') == 13


def test_each_verdict_has_its_own_word_and_colour(
        synthetic_run: tuple[Plan, list[Receipt]]) -> None:
    from efold.report.status import VERDICTS

    base = build_results(*synthetic_run, faux=True)
    styles: dict[str, tuple[str, str]] = {}
    for verdict in VERDICTS:
        status = msgspec.structs.replace(_status(), verdict=verdict)
        page = render_html(msgspec.structs.replace(base, status=status))
        banner = page.split("<body>", 1)[1].split("</div>", 1)[0]
        word = re.search(r'<p class="word">.*?</span> ([A-Z ]+)</p>', banner)
        assert banner.startswith(f'<div class="status status-{verdict}" id="status">')
        assert word is not None and word.group(1) == verdict.upper()
        colour = re.search(rf"\.status-{verdict} {{ border-color: (#[0-9a-f]+); "
                           r"background: (#[0-9a-f]+); }", page)
        assert colour is not None
        styles[verdict] = (colour.group(1), colour.group(2))
    assert len(set(styles.values())) == len(VERDICTS)


def _status(**changes: object) -> RunStatus:
    status = RunStatus(verdict="complete", stop=None, interrupted=False, crashed=False,
                       unreconciled=False, controller="released", containments=[],
                       unexited_launches=[], missing_slots=0, missing_slot_ids=[],
                       in_flight=[])
    return msgspec.structs.replace(status, **changes)


def test_a_stopped_banner_says_what_the_stop_code_means(
        synthetic_run: tuple[Plan, list[Receipt]]) -> None:
    base = build_results(*synthetic_run, faux=False)
    stopped = msgspec.structs.replace(
        base, status=_status(verdict="stopped", stop="not_admitted_cap"))
    headline = "Stopped: not_admitted_cap (the cap could not admit the next request)"
    assert render_markdown(stopped).splitlines()[2] == f"**{headline}**"
    assert f'<p class="verdict">{headline}</p>' in render_html(stopped)
    # Another verdict with a stop code: the meaning on its own line under the headline.
    crashed = msgspec.structs.replace(
        base, status=_status(verdict="crashed", crashed=True, stop="lookup_worker_lost"))
    md = render_markdown(crashed).splitlines()
    assert md[4].startswith("Stop code `lookup_worker_lost`: a child ended without")
    assert '<p class="stop">Stop code <code>lookup_worker_lost</code>: ' in render_html(crashed)
    assert "faux: no (real money)" in md[6]
    # A complete run folds its status details; any other verdict shows them open.
    complete = render_html(msgspec.structs.replace(base, status=_status()))
    assert "<details><summary>Status details (11 lines)</summary>" in complete
    assert "<details open><summary>Status details" in render_html(crashed)
