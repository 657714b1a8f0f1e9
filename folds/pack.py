"""The deterministic continuity pack (``pack`` arm): a bounded index of what matters.

Built from the *retained* store (so the privacy rule applies: nothing from a result that
held a credential), using the surface forms of ``corpus/FORMS.md``. Every entry cites
its source record as ``[record <id>]``. Sections, in order:

* **Owner rules**: every ``Rule: never ...`` line of an owner turn, verbatim;
* **Corrections**: every ``Correction: the <label> changes from <old> to <new>.`` line;
* **Identifiers**: for every ``<Label>: <ID>`` line of a tool result, the label and the
  record that holds it: a *pointer*, not the value. Identifier values are third-party
  tool content; the pack says where they are and the reader fetches them with
  ``history_get`` (the reference's "packed record ID" path). This is why an identifier
  the cold boundary dropped is *recoverable*, not *present*, in this arm;
* **Commitments and artifacts**: the latest ``Status of the <thing>: <TOKEN>`` line per
  thing;
* **Open items**: every ``Next: <task> by <deadline>.`` line of an owner turn.

The pack is at most ``PACK_BUDGET_TOKENS`` (8,000, chars/4). Over budget, whole entries
are omitted (counted), oldest first, open items before identifiers before commitments
before corrections; owner rules go last.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from efold.corpus.forms import (
    CORRECTION_LINE,
    FACT_LINE,
    IDENTIFIER,
    NEXT_LINE,
    RULE_LINE,
    STATUS_LINE,
    chars_to_tokens,
)
from efold.folds.checkpoint import CITATION_PATTERN, PackStats, RetainedStore, cite

PACK_BUDGET_TOKENS = 8_000
PACK_HEADER = (
    "Continuity pack (deterministic; each entry cites its source record; identifier "
    "values are kept in the history store: read a cited record with history_get)"
)
# Where no lookup is offered (recall-only), the pack does not name a tool the reader
# does not have: it says plainly that the cited records are not part of what it holds.
PACK_HEADER_WITHOUT_LOOKUP = (
    "Continuity pack (deterministic; each entry cites its source record; identifier "
    "values are in the cited records, which are not part of this context)"
)
_SECTIONS = (
    ("rules", "Owner rules:"),
    ("corrections", "Corrections:"),
    ("identifiers", "Identifiers (values in the cited records):"),
    ("commitments", "Commitments and artifacts (latest status):"),
    ("open_items", "Open items:"),
)
_NO_ENTRY = "- (none)"
# Omission order under budget pressure: lower goes first.
_OMISSION_RANK = {"open_items": 0, "identifiers": 1, "commitments": 2, "corrections": 3, "rules": 4}


@dataclass(frozen=True)
class PackEntry:
    section: str
    text: str
    seq: int


@dataclass(frozen=True)
class Pack:
    text: str
    stats: PackStats
    cited_ids: tuple[str, ...]


def _lines(pattern: re.Pattern[str], text: str) -> list[re.Match[str]]:
    return list(pattern.finditer(text))


def extract_entries(retained: RetainedStore, *, values: bool = False) -> list[PackEntry]:
    """Every candidate entry, in record order (before the budget). ``values``: an
    identifier's entry is its whole line, value included (the ledger's, which offers
    no lookup), not a pointer to its record (the pack's)."""
    entries: list[PackEntry] = []
    latest_status: dict[str, PackEntry] = {}
    for record in retained.records:
        text = record.text
        where = cite(record.id)
        if record.role == "user":
            for m in _lines(RULE_LINE, text):
                entries.append(PackEntry("rules", f"- {m.group(0)} {where}", record.seq))
            for m in _lines(NEXT_LINE, text):
                entries.append(PackEntry("open_items", f"- {m.group(0)} {where}", record.seq))
        for m in _lines(CORRECTION_LINE, text):
            entries.append(PackEntry("corrections", f"- {m.group(0)} {where}", record.seq))
        for m in _lines(STATUS_LINE, text):
            latest_status[m.group("thing").lower()] = PackEntry(
                "commitments", f"- {m.group(0)} {where}", record.seq
            )
        if record.role == "tool":
            labels: list[str] = []
            for m in _lines(FACT_LINE, text):
                label = m.group("label")
                if IDENTIFIER.search(m.group("value")) and label not in labels:
                    labels.append(label)
            if values:
                entries.extend(PackEntry("identifiers", f"- {m.group(0)} {where}", record.seq)
                               for m in _lines(FACT_LINE, text)
                               if IDENTIFIER.search(m.group("value")))
                continue
            for label in labels:
                entries.append(
                    PackEntry(
                        "identifiers",
                        f'- Identifier "{label}" is in {where} ({record.kind}, day {record.day})',
                        record.seq,
                    )
                )
    entries.extend(latest_status.values())
    return entries


def build_pack(retained: RetainedStore, *, lookup: bool = True) -> Pack:
    """The bounded pack for a retained store (see the module docstring); ``lookup``:
    whether the reader is offered the lookup tools its header names."""
    header = PACK_HEADER if lookup else PACK_HEADER_WITHOUT_LOOKUP
    return render_entries(extract_entries(retained), header)


def render_entries(entries: list[PackEntry], header: str, *,
                   titles: dict[str, str] | None = None) -> Pack:
    """``entries`` rendered under ``header``, section by section in record order, within
    ``PACK_BUDGET_TOKENS`` (whole entries omitted as the module docstring says).
    ``titles``: section titles that differ from the pack's."""
    budget_chars = PACK_BUDGET_TOKENS * 4
    named = {**dict(_SECTIONS), **(titles or {})}

    def rendered(kept: list[PackEntry]) -> str:
        parts = [header]
        for section, _ in _SECTIONS:
            lines = [e.text for e in sorted(kept, key=lambda e: e.seq) if e.section == section]
            parts.append("\n".join([named[section], *(lines or [_NO_ENTRY])]))
        return "\n\n".join(parts)

    # The rendered length, kept up to date as entries are omitted (rendering again after
    # each omission made a long ledger quadratic): the header, and per section "\n\n",
    # its title and a "\n" before each line, "- (none)" standing in for no line.
    kept = list(entries)
    in_section = {section: 0 for section, _ in _SECTIONS}
    for entry in kept:
        in_section[entry.section] += 1
    length = (len(header) + sum(2 + len(named[s]) for s, _ in _SECTIONS)
              + sum(1 + len(e.text) for e in kept)
              + sum(1 + len(_NO_ENTRY) for s, n in in_section.items() if n == 0))
    omitted: set[int] = set()
    order = sorted(range(len(kept)), key=lambda i: (_OMISSION_RANK[kept[i].section], kept[i].seq))
    for index in order:
        if length <= budget_chars:
            break
        entry = kept[index]
        omitted.add(index)
        in_section[entry.section] -= 1
        length -= 1 + len(entry.text)
        if in_section[entry.section] == 0:
            length += 1 + len(_NO_ENTRY)
    kept = [e for i, e in enumerate(kept) if i not in omitted]
    text = rendered(kept)
    counts = {section: sum(1 for e in kept if e.section == section) for section, _ in _SECTIONS}
    stats = PackStats(
        rules=counts["rules"],
        corrections=counts["corrections"],
        identifiers=counts["identifiers"],
        commitments=counts["commitments"],
        open_items=counts["open_items"],
        omitted_for_budget=len(omitted),
        tokens_estimate=chars_to_tokens(len(text)),
        budget_tokens=PACK_BUDGET_TOKENS,
    )
    cited = tuple(sorted({m.group(1) for m in CITATION_PATTERN.finditer(text)}))
    return Pack(text=text, stats=stats, cited_ids=cited)
