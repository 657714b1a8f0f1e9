"""The failures you can drill into: every slot that did not score exact, filterable by
role, category and kind, each row opening the slot's details (its receipt's fields, the
availability verdict for its probe: was the answer visible in the checkpoint?).

No script: the filters are radio buttons, and the rows they hide are hidden by CSS
``:has()`` rules generated here, one per choice, so the page keeps its rule of running
nothing, requesting nothing. A row's drill-down is a ``<details>`` element. The page
stays content-free: a row shows ids, codes, verdicts and counts, never an answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from html import escape

from efold.report.html_parts import breakable
from efold.report.numbers import count
from efold.report.schema import Results, SlotRow
from efold.report.terms import AVAILABILITY_TERMS, OUTCOME_TERMS

__all__ = ["failure_kind", "failures_css", "failures_html"]

_AVAILABILITY = dict(AVAILABILITY_TERMS)
_OUTCOMES = dict(OUTCOME_TERMS)
# A failed slot's kind, the last filter: what stood between it and an exact score.
KINDS = ("wrong", "excluded", "not completed", "skipped", "no receipt")


def failure_kind(slot: SlotRow) -> str | None:
    """None for a slot that scored exact; else why it did not."""
    if slot.correct is True and slot.excluded is None:
        return None
    if slot.excluded is not None:
        return "excluded"
    if slot.status == "completed":
        return "wrong"
    if slot.status == "skipped" or slot.status == "unvisited":
        return "skipped"
    if slot.status in ("missing", "receipt_missing"):
        return "no receipt"
    return "not completed"


def _key(text: str) -> str:
    """A value as it appears in ids, data attributes and CSS selectors: its UTF-8 in
    hex, so any id a suite allows is safe there and no two values share a key."""
    return text.encode().hex()


def _radio(group: str, value: str, label: str, checked: bool = False) -> str:
    ident = f"ff-{group}-{_key(value)}"
    mark = " checked" if checked else ""
    return (f'<span class="choice"><input type="radio" name="ff-{group}" id="{ident}"'
            f'{mark}><label for="{ident}">{escape(label)}</label></span>')


def _choices(group: str, counts: Counter[str], order: Iterable[str]) -> str:
    """``all`` and every value that some failed slot has, with its count (a value
    without one is not offered: it could only show an empty table)."""
    radios = [_radio(group, "*", f"all ({count(sum(counts.values()))})", checked=True)]
    radios += [_radio(group, value, f"{value.replace('_', ' ')} ({count(counts[value])})")
               for value in order if counts[value]]
    return f'<fieldset><legend>{group}</legend>{"".join(radios)}</fieldset>'


def _groups(results: Results, failed: list[tuple[SlotRow, str]]
            ) -> list[tuple[str, Counter[str], Iterable[str]]]:
    """The filters: (group, failed slots per value, the values in their report order)."""
    return [("role", Counter(s.role for s, _ in failed), results.roles),
            ("category", Counter(s.category for s, _ in failed), results.categories),
            ("kind", Counter(kind for _, kind in failed), KINDS)]


def failures_css(results: Results) -> str:
    """One rule per filter choice: with it checked, rows of any other value are hidden."""
    rules = []
    for group, counts, order in _groups(results, _failed(results)):
        for value in order:
            if counts[value]:
                rules.append(f"#failures:has(#ff-{group}-{_key(value)}:checked) "
                             f'tr[data-{group}]:not([data-{group}="{_key(value)}"]) '
                             "{ display: none; }")
    return "\n".join(rules)


def _detail(slot: SlotRow) -> str:
    fields = [("slot", breakable(slot.slot)), ("status", escape(slot.status)),
              ("outcome", escape(slot.outcome or "")), ("code", escape(slot.code or "")),
              ("excluded", escape(slot.excluded or "")), ("repeat", str(slot.repeat)),
              ("checkpoint sha256", escape(slot.checkpoint_sha256 or "")),
              ("http", "" if slot.http_status is None
               else escape(f"{slot.http_status} {slot.http_kind or ''}".strip()))]
    items = [f'<dt>{name}</dt><dd><code class="wrap">{value}</code></dd>'
             for name, value in fields if value]
    if slot.outcome in _OUTCOMES:
        items.append(f"<dt>which means</dt><dd>{escape(_OUTCOMES[slot.outcome])}</dd>")
    verdict = slot.availability or "unknown"
    items.append(f"<dt>answer in the checkpoint</dt><dd><code>{escape(verdict)}</code>: "
                 f"{escape(_AVAILABILITY.get(verdict, ''))}</dd>")
    return f'<dl class="identity">{"".join(items)}</dl>'


def _tokens(slot: SlotRow) -> str:
    if slot.input_tokens is None or slot.output_tokens is None:
        return "\u2014"
    return f"{count(slot.input_tokens)} / {count(slot.output_tokens)}"


def _row(slot: SlotRow, kind: str) -> str:
    reason = slot.code or slot.excluded or slot.outcome or slot.status
    return (f'<tr data-role="{_key(slot.role)}" data-category="{_key(slot.category)}" '
            f'data-kind="{_key(kind)}"><td><details><summary>{breakable(slot.probe_id)}'
            f"</summary>{_detail(slot)}</details></td><td>{breakable(slot.role)}</td>"
            f"<td>{breakable(slot.trace_id)}</td><td>{breakable(slot.category)}</td>"
            f"<td>{kind}</td>"
            f"<td><code>{escape(reason)}</code></td>"
            f'<td class="r">{_tokens(slot)}</td></tr>')


def _failed(results: Results) -> list[tuple[SlotRow, str]]:
    """Every slot that did not score exact with its kind, by role (plan order), then in
    schedule order."""
    order = {role: n for n, role in enumerate(results.roles)}
    failed = [(slot, kind) for slot in results.slots
              if (kind := failure_kind(slot)) is not None]
    return sorted(failed, key=lambda pair: order.get(pair[0].role, len(order)))


def failures_html(results: Results) -> str:
    """The section, or a one-line note when every slot scored exact."""
    failed = _failed(results)
    if not failed:
        return ('<section id="failures"><h2>Slots that did not score exact</h2>'
                "<p>None: every planned slot scored exact.</p></section>")
    filters = "".join(_choices(group, counts, order)
                      for group, counts, order in _groups(results, failed))
    rows = "".join(_row(slot, kind) for slot, kind in failed)
    return (
        f'<section id="failures"><h2>Slots that did not score exact</h2>'
        f'<span class="count">{count(len(failed))} of {count(len(results.slots))} slots'
        "</span>"
        '<p class="caption">Pick a role, a category or a kind to narrow the table (each '
        "choice says how many slots it holds; two choices together may hold none); open a "
        "slot for its receipt's fields and whether its answer was in the checkpoint "
        "(availability: model-free, from the checkpoint). No answer text is shown.</p>"
        f'<div class="filters">{filters}</div>'
        '<div class="scroll"><table class="failures"><thead><tr><th>probe (open for the '
        "slot)</th><th>role</th><th>trace</th><th>category</th><th>kind</th><th>reason</th>"
        f'<th>tokens in / out</th></tr></thead><tbody>{rows}</tbody></table></div>'
        "</section>"
    )
