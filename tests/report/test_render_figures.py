"""The figures beside the counts, as both reports print them: run metadata under the
banner, paired deltas with their Newcombe intervals, every role against native, the
per-repeat spread, tool use and latency.

One hand-built run (the run of ``test_figures.py``, whose numbers are worked out there)
rendered to Markdown and HTML; every expected line is the exact text a reader sees."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from report_figures_kit import (
    RIGHT,
    C,
    Run,
    U,
    figures_run,
    run_facts,
)

from efold.errors import Code
from efold.folds.registry import BUILTIN_ARMS
from efold.protocol.records import Plan, Receipt
from efold.report import (
    build_results,
    newcombe_paired_interval,
    render_html,
    render_markdown,
)
from efold.report.numbers import duration_text, milliseconds_text, signed, utc_text
from efold.report.schema import Results
from efold.report.terms import (
    LATENCY_TERMS,
    PAIR_TERMS,
    PAIRED_INTERVAL,
    REPEAT_TERMS,
    TOOL_TERMS,
    VERSUS_TERMS,
)

DOT = " \u00b7 "


@pytest.fixture
def run(plan_factory: Callable[..., Plan], receipt_factory: Callable[..., Receipt]) -> Run:
    return figures_run(plan_factory, receipt_factory)


def _build(run: Run, **options: Any) -> Results:
    kwargs: dict[str, Any] = {
        "faux": True, "efold_version": "0.1.0", "run_facts": run_facts(),
        "reader": "faux/faux-extractive-v1", "summarisers": {"cold-rebuild": "openai/gpt-5-mini"},
    }
    return build_results(*run, **{**kwargs, **options})


def _section(md: str, title: str) -> list[str]:
    """The lines of one Markdown section, from its title to the next."""
    lines = md.splitlines()
    start = lines.index(f"## {title}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
               len(lines))
    return lines[start:end]


def _html_section(page: str, title: str) -> str:
    start = page.index(f"<h2>{title}</h2>")
    end = page.find("<h2>", start + 1)
    return page[start:] if end < 0 else page[start:end]


# -- run metadata ------------------------------------------------------------------------

RUN_LINE = DOT.join([
    "efold: 0.1.0", "started: 2023-11-14 22:13:20 UTC", "ended: 2023-11-14 22:14:25 UTC",
    "duration: 1 min 5 s", "reader model: faux/faux-extractive-v1",
    "summariser: openai/gpt-5-mini (cold-rebuild)",
])


def test_run_metadata_sits_under_the_banner(run: Run) -> None:
    results = _build(run)
    lines = render_markdown(results).splitlines()
    # title, headline, the identity line, then what ran when, before the status details.
    assert lines[2].startswith("**Crashed: ")  # native's r1 p03 was never visited
    assert lines[4].startswith("campaign: synthetic" + DOT + "reader: faux extractive")
    assert lines[6] == RUN_LINE
    assert lines[8].startswith("- Stop code: ")
    page = render_html(results)
    banner = page.split("<body>", 1)[1].split("<h1>", 1)[0]
    assert banner.startswith('<div class="status status-crashed" id="status">')
    assert ('<dl class="facts run"><div><dt>efold</dt><dd>0.1.0</dd></div>'
            "<div><dt>started</dt><dd>2023-11-14 22:13:20 UTC</dd></div>"
            "<div><dt>ended</dt><dd>2023-11-14 22:14:25 UTC</dd></div>"
            "<div><dt>duration</dt><dd>1 min 5 s</dd></div>"
            "<div><dt>reader model</dt><dd>faux/faux-extractive-v1</dd></div>"
            "<div><dt>summariser</dt><dd>openai/gpt-5-mini (cold-rebuild)</dd></div></dl>"
            ) in banner
    # No host name, no path: the only slashes are the model ids' and k/n counts'.
    for text in (render_markdown(results), page):
        assert socket.gethostname() not in text
        slashed = set(re.findall(r"[\w.-]+/[\w./-]+", text.split("</style>")[-1]))
        assert {s for s in slashed if not re.fullmatch(r"[\d,]+/[\d,]+", s)} <= {
            "faux/faux-extractive-v1", "openai/gpt-5-mini"}, slashed


def test_run_metadata_groups_summarisers_and_says_so_far_while_running(run: Run) -> None:
    results = _build(run, summarisers={"cold-rebuild": "openai/gpt-5-mini",
                                       "store": "openai/gpt-5-mini",
                                       "native": "local/tiny"})
    assert results.status is not None
    running = msgspec.structs.replace(
        results, status=msgspec.structs.replace(results.status, verdict="running"))
    line = render_markdown(running).splitlines()[6]
    assert line.endswith(DOT.join(["duration: 1 min 5 s so far",
                                   "reader model: faux/faux-extractive-v1",
                                   "summariser: openai/gpt-5-mini (store, cold-rebuild)",
                                   "summariser: local/tiny (native)"]))


def test_run_metadata_without_journal_times_or_a_run_block(run: Run) -> None:
    bare = build_results(*run, faux=True, efold_version="0.1.0")
    assert render_markdown(bare).splitlines()[6] == DOT.join([
        "efold: 0.1.0", "started: \u2014", "ended: \u2014", "duration: \u2014",
        "reader model: \u2014"])
    old = msgspec.structs.replace(bare, run=None)  # a document written before run existed
    md = render_markdown(old).splitlines()
    assert not any(line.startswith("efold: ") for line in md)
    assert 'class="facts run"' not in render_html(old)


def test_durations_times_and_signed_figures_read_like_people_write_them() -> None:
    assert [duration_text(s) for s in (None, 0.25, 4.2, 42.4, 59.6, 65.432, 252, 7205.2,
                                       360_000)] == [
        "\u2014", "0.2 s", "4.2 s", "42 s", "1 min 0 s", "1 min 5 s", "4 min 12 s",
        "2 h 0 min 5 s", "100 h 0 min 0 s"]
    assert duration_text(3_600_000) == "1,000 h 0 min 0 s"
    assert [milliseconds_text(ms) for ms in (None, 0, 42, 9_999, 10_000, 12_345,
                                             1_234_567)] == [
        "\u2014", "0 ms", "42 ms", "9,999 ms", "10.0 s", "12.3 s", "1,234.6 s"]
    assert utc_text("2031-03-14T09:26:53.589Z") == "2031-03-14 09:26:53 UTC"
    assert utc_text(None) == "\u2014" and utc_text("yesterday") == "yesterday"
    assert [signed(v) for v in (12.5, -3.14, 0.0, -0.04, 1234.5)] == [
        "+12.5", "\u22123.1", "+0.0", "+0.0", "+1,234.5"]


# -- paired contrasts ---------------------------------------------------------------------

def test_paired_contrasts_print_each_delta_with_its_interval(run: Run) -> None:
    results = _build(run)
    # native - store over completed pairs: 6 pairs, 3 both right, b = 1, c = 0.
    counts = results.contrasts[0].overall.completed
    assert (results.contrasts[0].role_a, results.contrasts[0].role_b) == ("store", "native")
    ci = newcombe_paired_interval(3, 0, 1, 2)
    assert ci is not None
    assert (f"{100 * ci.lower:.1f}", f"{100 * ci.upper:.1f}", f"{counts.delta_pp:.1f}") == (
        "-48.5", "22.2", "-16.7")
    table = _section(render_markdown(results), "Paired contrasts")
    assert ("| native \u2212 store | all | 8 | 8 | 6 | 3 | 1 | 0 | 2 | "
            "\u221216.7 pp (95% CI \u221248.5 to +22.2) | 7 | 3 | 1 | 1 | 2 | "
            "+0.0 pp (95% CI \u221239.3 to +39.3) |") in table
    # No completed pair in commitment_status (store's are unscored): no delta, no interval.
    assert ("| native \u2212 store | commitment_status |" not in "\n".join(table))
    by_category = _section(render_markdown(results), "Paired contrasts by category")
    assert ("| native \u2212 store | commitment_status | 2 | 2 | 0 | 0 | 0 | 0 | 0 | "
            "\u2014 (no pairs) | 1 | 0 | 0 | 1 | 0 | "
            "+100.0 pp (95% CI \u221212.2 to +100.0) |") in by_category
    caption = table[4]
    assert caption.endswith(
        "The 95% CI of a delta is Newcombe's hybrid score interval for a difference of "
        "paired proportions (Newcombe 1998, method 10): it is descriptive, not a "
        "significance claim.")
    assert "- `95% CI`: the delta's paired 95% interval, in percentage points: Newcombe's " \
           "hybrid score interval (method 10); descriptive, not a significance claim" in table
    assert "- `no pairs`: no pair was observed, so there is no delta and no interval" in table
    html = _html_section(render_html(results), "Paired contrasts")
    assert ('<td class="r">\u221216.7 pp<br><span class="sub">(95% CI \u221248.5 to +22.2)'
            "</span></td>") in html
    by_category_html = _html_section(render_html(results), "Paired contrasts by category")
    assert '<td class="r">\u2014<br><span class="sub">(no pairs)</span></td>' in by_category_html
    assert PAIRED_INTERVAL.replace("'", "&#x27;") in html


def test_the_delta_chart_titles_carry_the_interval(run: Run) -> None:
    page = render_html(_build(run))
    assert ("<title>native \u2212 store: \u221216.7 pp over 6 pairs, 95% CI \u221248.5 to "
            "+22.2</title>") in page


# -- versus native --------------------------------------------------------------------------

def test_every_role_against_native_per_category(run: Run) -> None:
    results = _build(run)
    md = render_markdown(results)
    table = _section(md, "Delta versus native")
    assert table[2] == "_2 roles, 4 categories_"
    header = table.index("| role | all | tool_identifier | active_constraint | "
                         "superseded_current | commitment_status |")
    assert table[header + 1] == "| --- | ---: | ---: | ---: | ---: | ---: |"
    assert table[header + 2:header + 4] == [
        "| store | +16.7 pp (95% CI \u221222.2 to +48.5) | +0.0 pp (95% CI \u221265.8 to "
        "+65.8) | +50.0 pp (95% CI \u221227.3 to +90.5) | +0.0 pp (95% CI \u221257.3 to "
        "+57.3) | \u2014 (no pairs) |",
        "| cold-rebuild | \u221214.3 pp (95% CI \u221242.4 to +19.1) | \u221250.0 pp (95% CI "
        "\u221290.5 to +27.3) | +0.0 pp (95% CI \u221265.8 to +65.8) | +0.0 pp (95% CI "
        "\u221257.3 to +57.3) | +0.0 pp (95% CI \u221279.3 to +79.3) |",
    ]
    # Turned around: store - native is the negation of native - store, bounds swapped.
    assert md.index("## Delta versus native") < md.index("## Paired contrasts")
    html = _html_section(render_html(results), "Delta versus native")
    assert ('<tr><td>store</td><td class="r">+16.7 pp<br><span class="sub">(95% CI '
            "\u221222.2 to +48.5)</span></td>") in html
    assert '<dt><code>delta</code></dt><dd>accuracy of the row&#x27;s role minus' in html


def test_no_native_role_no_versus_native_table(plan_factory: Callable[..., Plan],
                                              receipt_factory: Callable[..., Receipt]) -> None:
    plan = plan_factory(["store", "pack"], ["t1"], probes=1, repeats=1)
    results = build_results(plan, [receipt_factory(s, C, outcome=RIGHT) for s in plan.slots],
                            faux=True)
    assert "Delta versus" not in render_markdown(results)
    assert "Delta versus" not in render_html(results)


# -- per repeat ---------------------------------------------------------------------------

def test_accuracy_per_repeat_with_its_spread(run: Run) -> None:
    table = _section(render_markdown(_build(run)), "Accuracy per repeat")
    assert table[2] == "_3 roles, 2 repeats_"
    header = table.index("| role | mean \u00b1 sd | repeat 0 | repeat 1 |")
    assert table[header + 2:header + 5] == [
        "| store | 66.7% \u00b1 0.0 (sd over 2 repeats) | 66.7% (2/3) | 66.7% (2/3) |",
        "| native | 54.2% \u00b1 29.5 (sd over 2 repeats) | 75.0% (3/4) | 33.3% (1/3) |",
        "| cold-rebuild | 37.5% \u00b1 17.7 (sd over 2 repeats) | 50.0% (2/4) | 25.0% (1/4) |",
    ]
    assert any(line.startswith("- `mean \u00b1 sd`: the unweighted mean") for line in table)


def test_a_repeat_without_a_scored_slot_has_no_rate_and_no_spread(
        plan_factory: Callable[..., Plan], receipt_factory: Callable[..., Receipt]) -> None:
    plan = plan_factory(["native"], ["t1"], probes=2, repeats=3)
    receipts = [receipt_factory(s, C, outcome=RIGHT) if s.repeat == 0 else
                receipt_factory(s, U, code=Code.NOT_ADMITTED_CAP) for s in plan.slots]
    table = _section(render_markdown(build_results(plan, receipts, faux=True)),
                     "Accuracy per repeat")
    assert "| native | \u2014 | 100.0% (2/2) | \u2014 | \u2014 |" in table


def test_a_single_repeat_has_no_per_repeat_table(plan_factory: Callable[..., Plan],
                                                 receipt_factory: Callable[..., Receipt]
                                                 ) -> None:
    plan = plan_factory(["native"], ["t1"], probes=2, repeats=1)
    results = build_results(plan, [receipt_factory(s, C, outcome=RIGHT) for s in plan.slots],
                            faux=True)
    assert "Accuracy per repeat" not in render_markdown(results)
    assert "Accuracy per repeat" not in render_html(results)


# -- tool use -----------------------------------------------------------------------------

TOOL_HEADER = ("| role | scored | with lookup | lookup rate | exact with lookup | "
               "exact without lookup | lookup calls | bytes read | median bytes | "
               "recoverable | recoveries witnessed | meter exhausted | "
               "meter_calls_exhausted | meter_bytes_exhausted |")


def test_tool_use_of_the_lookup_roles(run: Run) -> None:
    results = _build(run)
    table = _section(render_markdown(results), "Tool use (history lookups)")
    assert table[2] == "_1 role, 4 lookup calls_"
    header = table.index(TOOL_HEADER)
    # Only store: native and cold-rebuild offer no lookup and made no call.
    assert table[header + 2:header + 4] == [
        "| store | 6 | 3 | 50.0% | 2/3 = 66.7% | 2/3 = 66.7% | 4 | 6,000 | 2,000 | 3 | 2 | "
        "2 | 1 | 1 |", ""]
    assert ("- `recoveries witnessed`: of those, slots that looked history up and answered "
            "right: the value was absent from the checkpoint, recoverable through lookup, "
            "looked up and answered correctly") in table
    html = _html_section(render_html(results), "Tool use (history lookups)")
    assert ('<tr><td>store</td><td class="r">6</td><td class="r">3</td><td class="r">50.0%'
            "</td>") in html
    assert "<dt><code>recoveries witnessed</code></dt>" in html


def test_tool_use_counts_get_separators(plan_factory: Callable[..., Plan],
                                        receipt_factory: Callable[..., Receipt]) -> None:
    plan = plan_factory(["my-fold", "pack"], ["t1"], probes=2, repeats=1)
    receipts = [receipt_factory(s, C, outcome=RIGHT, lookup_calls=1_234,
                                lookup_bytes=1_234_567) for s in plan.slots]
    results = build_results(plan, receipts, faux=True)
    md = render_markdown(results)
    assert ("| my-fold | 2 | 2 | 100.0% | 2/2 = 100.0% | 0/0 = \u2014 | 2,468 | 2,469,134 | "
            "1,234,567 | 0 | 0 | 0 | 0 | 0 |") in md
    assert "_2 roles, 2,468 lookup calls_" not in md  # the sum is over both roles
    assert "_2 roles, 4,936 lookup calls_" in md


def test_no_tool_use_no_table(plan_factory: Callable[..., Plan],
                              receipt_factory: Callable[..., Receipt]) -> None:
    plan = plan_factory(["native", "cold-rebuild"], ["t1"], probes=2, repeats=1)
    results = build_results(plan, [receipt_factory(s, C, outcome=RIGHT) for s in plan.slots],
                            faux=True)
    assert "Tool use" not in render_markdown(results)
    assert "Tool use" not in render_html(results)


# -- latency ------------------------------------------------------------------------------

def test_latency_per_role_and_overall(run: Run) -> None:
    results = _build(run)
    table = _section(render_markdown(results), "Latency")
    assert table[2] == "_median 30 ms, p95 400 ms_"
    header = table.index("| role | slots | median | p95 |")
    assert table[header + 2:header + 6] == [
        "| store | 7 | 200 ms | 900 ms |", "| native | 7 | 40 ms | 70 ms |",
        "| cold-rebuild | 8 | 5 ms | 5 ms |", "| all roles | 22 | 30 ms | 400 ms |"]
    html = _html_section(render_html(results), "Latency")
    assert ('<tr class="all"><td>all roles</td><td class="r">22</td><td class="r">30 ms</td>'
            '<td class="r">400 ms</td></tr>') in html


def test_long_latencies_are_seconds_and_old_documents_have_no_table(run: Run) -> None:
    plan, receipts = run
    slow = [msgspec.structs.replace(r, elapsed_ms=r.elapsed_ms * 1_000 + 9)
            if r.role == "store" else r for r in receipts]
    table = _section(render_markdown(_build((plan, slow))), "Latency")
    assert "| store | 7 | 200.0 s | 900.0 s |" in table
    results = _build(run)
    old = msgspec.structs.replace(
        results, latency=None,
        results=[msgspec.structs.replace(r, latency=None) for r in results.results])
    assert "## Latency" not in render_markdown(old)


# -- legends ------------------------------------------------------------------------------

def test_new_legends_name_no_role() -> None:
    """A legend's prose never names a role (or a built-in arm): a reader could take it
    for one of the run's roles."""
    names = set(BUILTIN_ARMS) | {"native", "store", "pack", "compaction", "ceiling"}
    words = re.compile(r"[a-z][a-z_-]+")
    for terms in (PAIR_TERMS, VERSUS_TERMS, REPEAT_TERMS, TOOL_TERMS, LATENCY_TERMS):
        for word, meaning in terms:
            assert not set(words.findall(meaning.lower())) & names, (word, meaning)
    assert not set(words.findall(PAIRED_INTERVAL.lower())) & names
