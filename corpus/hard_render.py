"""Sizes and text of the hard suite's tool records, and the hard-distractors swap.

``assign_sizes`` picks every record's byte size so that the chars/4 estimate of the
whole trace lands inside its suite's band (hard: 212k-232k tokens, ordinary records
8-16 KiB; medium: 46k-56k, ordinary records 1-3 KiB; ``shapes.RECORD_SIZES``) while
the two or three oversized ones (the long document, the booking pack, optionally a
long web page) exceed 16 KiB. ``render_record`` then writes each record to exactly its
size. A record is a list of pieces; the filler paragraphs among them are the only
pieces ``distract`` may replace, each by a hypothetical line padded to the *same*
length, so sizes and every fact's offset are unchanged.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from efold.corpus import forms
from efold.corpus.filler import Vocabulary, paragraph, same_length
from efold.corpus.forms import HYPOTHETICAL_PREFIX as HYP
from efold.corpus.hard_layout import RecordPlan, TurnPlan, record_layout
from efold.corpus.hard_values import HANDOVER_LABEL, SURVEY_LABEL, TraceValues
from efold.corpus.prng import SeededRandom
from efold.corpus.shapes import RecordSizes

_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")


@dataclass
class RenderedRecord:
    """A record's text as pieces; ``replaceable`` indexes the filler paragraphs."""

    pieces: list[str]
    replaceable: list[int]
    blocks: int = 0  # filler blocks so far (numbers sections across the fact block)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def conversation_chars(turns: list[TurnPlan]) -> int:
    """Chars of everything but record contents (FORMS.md §1 estimate)."""
    chars = 0
    for turn in turns:
        chars += len(turn.owner) + len(turn.reply)
        for record in turn.records:
            chars += record.call_chars
            if record.steer is not None:
                chars += len(forms.STEER_PREFIX) + len(record.steer)
    return chars


def assign_sizes(rng: SeededRandom, turns: list[TurnPlan], bands: RecordSizes) -> None:
    records = [r for t in turns for r in t.records]
    regular = [r for r in records if not r.oversized]
    big = {r.role: r for r in records if r.oversized}
    big["booking"].size = rng.between(*bands.booking)
    big["mid"].size = rng.between(*bands.mid)
    if "big3" in big:
        big["big3"].size = rng.between(*bands.big3)
    fixed = conversation_chars(turns) + sum(r.size for r in big.values())
    target = 4 * rng.between(*bands.target_tokens)
    low, high = bands.regular
    # Keep the average ordinary record inside its band by moving the target (never
    # above max_tokens); the validator re-checks the final estimate.
    target = max(target, fixed + len(regular) * (low + 200))
    target = min(target, fixed + len(regular) * (high - 200), 4 * bands.max_tokens)
    budget = target - fixed
    sizes = [
        min(max(budget * rng.between(80, 120) // (100 * len(regular)), low), high)
        for _ in regular
    ]
    # Spread the rounding/clamping difference so the sum meets the budget exactly.
    for _ in range(8):
        gap = budget - sum(sizes)
        if gap == 0:
            break
        step = gap // len(sizes) or (1 if gap > 0 else -1)
        for i in range(len(sizes)):
            if gap == 0:
                break
            new = min(max(sizes[i] + step, low), high)
            gap -= new - sizes[i]
            sizes[i] = new
    for record, size in zip(regular, sizes, strict=True):
        record.size = size


class RecordRenderer:
    """Writes one record's pieces to its exact size."""

    def __init__(self, rng: SeededRandom, values: TraceValues) -> None:
        self.rng = rng
        self.values = values
        self.vocab = Vocabulary(values.family.items, values.people)

    def _prefix(self, tool: str, number: int) -> str:
        rng, v = self.rng, self.values
        clock = f"{rng.between(8, 17):02d}:{rng.between(0, 59):02d}"
        layout = record_layout(tool)
        if layout == "email":
            return (f"Message from {rng.choice(v.people)} at {rng.choice(v.vendors)}, "
                    f"{rng.choice(_WEEKDAYS)}\n")
        if layout == "search":
            return f"{number}. {rng.choice(v.vendors)} | {rng.choice(v.family.items)}\n"
        if layout == "web":
            return f"Section {number}\n"
        if layout == "chat":
            return f"[{clock}] {rng.choice(v.people)}\n"
        if layout == "calendar":
            return f"{rng.choice(_WEEKDAYS)} {clock} | {rng.choice(v.family.items)} slot\n"
        if layout == "parcel":
            return f"{rng.choice(_WEEKDAYS)} {clock} | depot scan\n"
        return f"Part {number}. {rng.choice(('Handling', 'Storage', 'Terms', 'Site'))} notes\n"

    def _filler(self, out: RenderedRecord, tool: str, total: int) -> None:
        """Append blocks (prefix + paragraph, ``\\n\\n`` apart) of exactly ``total`` chars."""
        remaining, first = total, True
        while remaining > 0:
            if not first:
                out.pieces.append("\n\n")
                remaining -= 2
            first = False
            out.blocks += 1
            prefix = self._prefix(tool, out.blocks)
            size = self.rng.between(420, 1000)
            if remaining - size < 350:  # never leave a stub block: take the rest
                size = remaining
            out.pieces.append(prefix)
            out.replaceable.append(len(out.pieces))
            out.pieces.append(paragraph(self.rng, self.vocab, size - len(prefix)))
            remaining -= size

    def render(self, record: RecordPlan) -> RenderedRecord:
        out = RenderedRecord(pieces=[record.header], replaceable=[])
        body = record.size - len(record.header)
        if not record.facts:
            self._filler(out, record.tool, body)
            return out
        facts = "\n".join(record.facts)
        if record.placement == "head":
            before = 0
        elif record.placement == "mid":
            before = record.size * self.rng.between(45, 55) // 100 - len(record.header) - 2
        else:  # at most half the filler, so a small (medium-suite) record has some after
            room = body - len(facts) - 4
            before = min(self.rng.between(400, 1800), room // 2)
        if before:
            self._filler(out, record.tool, before)
            out.pieces.append("\n\n")
        out.pieces.append(facts)
        out.pieces.append("\n\n")
        self._filler(out, record.tool, body - before - (2 if before else 0) - len(facts) - 2)
        return out


class _Decoys:
    """Labelled hypothetical lines whose values are never a real value of the trace."""

    def __init__(self, rng: SeededRandom, values: TraceValues) -> None:
        self.rng, self.v = rng, values
        self.real_ids = {values.account_ref, values.mid_ref, values.booking_ref,
                         values.booking_decoy}
        self.real_dates = {*values.dates, values.next_old_deadline, values.next_new_deadline}

    def _id(self, prefix: str) -> str:
        while True:
            code = "".join(self.rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(4))
            value = f"{prefix}-{code}-{self.rng.between(100, 999)}"
            if value not in self.real_ids:
                return value

    def _date(self) -> str:
        while True:
            day = self.v.dates[2] + dt.timedelta(days=self.rng.between(-40, 40))
            if day not in self.real_dates:
                return self.v.date_text(day)

    def line(self) -> str:
        v, f = self.v, self.v.family
        kind = self.rng.below(10)
        if kind == 0:
            return f"{HYP}Booking ref: {self._id('BK')} would apply only if the order were split."
        if kind == 1:
            return f"{HYP}Account reference: {self._id('ACC')} would be used for a second account."
        if kind == 2:
            label = forms.fact_line(f.mid_label, self._id(f.mid_prefix))
            return f"{HYP}{label} belonged to an earlier numbering scheme."
        if kind == 3:
            return HYP + forms.correction_line(f.date_label, v.date_text(v.dates[2]), self._date())
        if kind == 4:
            cents = v.amounts[1] + self.rng.choice((-1, 1)) * self.rng.between(2, 40) * 500
            cents = cents if cents not in v.amounts and cents > 0 else v.amounts[1] * 2
            amount = forms.fact_line(f.amount_label, v.amount_text(cents))
            return f"{HYP}{amount} if the larger option were chosen."
        if kind == 5:
            return f"{HYP}{forms.status_line(f.artifact, 'ARCHIVED')} once the project closes."
        if kind == 7:  # the rejected alternative, as if it had won
            d = v.field
            return HYP + forms.decision_line(d.subject, d.rejected, d.rejected_reason[0])
        if kind == 8:  # the owner's tasks in another order
            tasks = list(v.field.tasks)
            return HYP + forms.priority_line(tasks[::-1]) + " if the vendor had its way."
        if kind == 9:  # another lag for the dependency
            lag = v.field.lag + self.rng.choice((-1, 1)) * self.rng.between(2, 4)
            return HYP + forms.dependency_line(HANDOVER_LABEL, lag, SURVEY_LABEL)
        task = f"review the {self.rng.choice(f.items)} order"
        return HYP + forms.next_line(task, self._date())


def distract(rng: SeededRandom, values: TraceValues, records: list[RenderedRecord]) -> None:
    """Replace about one filler paragraph in five by a same-length hypothetical decoy."""
    decoys = _Decoys(rng, values)
    vocab = Vocabulary(values.family.items, values.people)
    for record in records:
        for index in record.replaceable:
            if rng.below(5):
                continue
            line = decoys.line()
            length = len(record.pieces[index])
            if len(line) + 4 <= length:
                record.pieces[index] = same_length(rng, vocab, line, length)
