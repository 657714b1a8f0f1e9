"""The progressive ledger of the ``ledger-cold`` arm: facts extracted in three stages.

A ledger is what an extractor wrote down about the conversation, in
``LEDGER_EXTRACTIONS`` (3) extractions per trace and repeat, never per probe. Extraction
``k`` reads only the ledger extraction ``k - 1`` committed and its own **selection**:
the ``k``-th third of the retained records (``retention.retain``, so the privacy rule
applies: nothing from a result that held a credential). It keeps every earlier entry as
it was and appends what it found. An extraction that finds nothing new still counts:
it is an analysis-only stage, one operation consumed, nothing added.

The controller runs each extraction in a prep child of its own, started after the
previous one ended, and checks every ledger it commits against the one before
(``check_extension``): the extraction's number, a selection of records no earlier
extraction read (empty only when the trace has fewer records than extractions), and
the earlier entries and extractions unchanged. The checkpoint is then built cold
from the committed final ledger (``arms.LedgerColdFold``).

Two extractors write a stage (``Extractor``). Offline, and wherever the campaign names
no summariser model, the deterministic one (``deterministic``: ``pack.extract_entries``,
with identifier values, since the ledger arm offers no lookup and a pointer would reach
nothing); its entries use the forms of ``corpus/FORMS.md``, so its figures measure what
it kept, not a model's extraction. With a summariser model, that model
(``ledger_model``): one request per extraction, its reply parsed and validated whole.

A model's stage that fails validation is **degraded**, never repaired or made up: it
adds nothing, the ledger stays the one the stage before committed, and the reason
(one of ``DEGRADATIONS``) is recorded with the extraction. Its operation still counts.
A request that did not settle is not a degradation: the prep child fails, and with it
the checkpoint (the money path decides, not the ledger).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import msgspec

from efold.errors import Code
from efold.folds.checkpoint import HistoryRecord, LedgerStats, RetainedStore
from efold.folds.errors import FoldError
from efold.folds.fold import TracePrefix
from efold.folds.pack import Pack, PackEntry, extract_entries, render_entries
from efold.folds.retention import retain
from efold.folds.transcript import session_transcript

LEDGER_EXTRACTIONS: Final = 3
LEDGER_FILE: Final = "ledger.json"
LEDGER_HEADER: Final = (
    f"Continuity ledger ({LEDGER_EXTRACTIONS} extractions; each entry cites its source "
    "record; a later entry about the same thing supersedes an earlier one)"
)
_TITLES: Final = {"identifiers": "Identifiers:",
                  "commitments": "Commitments and artifacts (a later status supersedes):"}


class LedgerEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    section: str  # a pack section: rules, corrections, identifiers, commitments, open_items
    text: str  # the entry's line, its citation included
    seq: int  # its source record's position in the trace


# Why a model's extraction added nothing (the reference's provider and validation
# reasons that apply to one settled reply):
#   empty_output: the reply had no text;
#   output_overrun: the reply was longer than ``ledger_model.MAX_REPLY_CHARS``;
#   provider_output: the reply is not JSON;
#   validation: JSON, but not the object asked for, or an entry out of the rules;
# and the one capacity reason, when nothing was sent:
#   input_budget: the stage had records to read and none fitted its request's bound.
DEGRADATIONS: Final = frozenset({"empty_output", "output_overrun", "provider_output",
                                 "validation", "input_budget"})
ExtractorName = Literal["deterministic", "model"]


class Extraction(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    number: int  # 1 .. LEDGER_EXTRACTIONS
    selection: list[str]  # the ids of the records it read, in order
    added: int  # entries it appended (0: an analysis-only stage, or a degraded one)
    operations: int = 1  # extraction operations it consumed: one, even when it adds nothing
    extractor: ExtractorName = "deterministic"
    # Set: a model's stage whose reply failed (one of ``DEGRADATIONS``); it added nothing.
    degraded: str | None = None
    # Records of ``selection`` its request had no room for (a model's source bound).
    unoffered: int = 0


@dataclass(frozen=True)
class Found:
    """What one extractor found in a selection: the entries to append, and for a model's
    stage the reason it degraded (then ``entries`` is empty) and what it could not send."""

    entries: list[LedgerEntry]
    extractor: ExtractorName = "deterministic"
    degraded: str | None = None
    unoffered: int = 0


# ``extractor(earlier, chosen)``: the entries to append after ``earlier``, found in the
# records ``chosen`` (extraction k's selection, in order).
Extractor = Callable[[Sequence[LedgerEntry], list[HistoryRecord]], Found]


class Ledger(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Invariant: ``entries`` is the concatenation of what each of ``extractions``
    added, in order, and no record id is in two selections."""

    trace_id: str
    entries: list[LedgerEntry]
    extractions: list[Extraction]
    version: int = 1


def selection(records: list[HistoryRecord], number: int) -> list[HistoryRecord]:
    """The records extraction ``number`` reads: its third of ``records``, by position."""
    n = len(records)
    return records[(number - 1) * n // LEDGER_EXTRACTIONS:number * n // LEDGER_EXTRACTIONS]


def deterministic(earlier: Sequence[LedgerEntry], chosen: list[HistoryRecord]) -> Found:
    """The deterministic extractor: the pack's candidate entries of ``chosen``, values
    included."""
    found = extract_entries(RetainedStore(chosen, 0), values=True)
    return Found([LedgerEntry(e.section, e.text, e.seq) for e in found])


def extract(previous: Ledger | None, prefix: TracePrefix, number: int,
            extractor: Extractor = deterministic) -> Ledger:
    """Extraction ``number`` of ``prefix``'s ledger, after ``previous`` (None for the
    first), by ``extractor``. Refuses (``fold_input_invalid``) an out-of-order
    extraction, or one whose extractor is not the one the earlier extractions used."""
    done = [] if previous is None else previous.extractions
    if not 1 <= number <= LEDGER_EXTRACTIONS or len(done) != number - 1:
        raise FoldError(Code.FOLD_INPUT_INVALID,
                        f"ledger extraction {number} after {len(done)} extractions")
    kept = [] if previous is None else previous.entries
    chosen = selection(retain(session_transcript(prefix.events)).records, number)
    found = extractor(kept, chosen)
    if done and done[0].extractor != found.extractor:
        raise FoldError(Code.FOLD_INPUT_INVALID,
                        f"ledger extraction {number} by the {found.extractor} extractor "
                        f"after the {done[0].extractor} one")
    return Ledger(
        trace_id=prefix.trace_id,
        entries=[*kept, *found.entries],
        extractions=[*done, Extraction(number, [r.id for r in chosen], len(found.entries),
                                       extractor=found.extractor, degraded=found.degraded,
                                       unoffered=found.unoffered)],
    )


def extract_all(prefix: TracePrefix) -> Ledger:
    """Every extraction in order, in this process (``fold check``, tests): the ledger the
    three prep children commit, without the proof that they ran apart."""
    ledger: Ledger | None = None
    for number in range(1, LEDGER_EXTRACTIONS + 1):
        ledger = extract(ledger, prefix, number)
    assert ledger is not None
    return ledger


def check_extension(previous: Ledger | None, ledger: Ledger, number: int) -> str | None:
    """Why ``ledger`` is not extraction ``number`` after ``previous``, or None."""
    earlier = [] if previous is None else previous.extractions
    if len(ledger.extractions) != number or ledger.extractions[:-1] != earlier:
        return f"extraction {number} does not follow the {len(earlier)} committed before it"
    last = ledger.extractions[-1]
    if last.number != number or last.operations != 1:
        return f"extraction {number} is numbered {last.number} with {last.operations} operations"
    kept = [] if previous is None else previous.entries
    if ledger.entries[:len(kept)] != kept:
        return f"extraction {number} changed an earlier entry"
    if len(ledger.entries) - len(kept) != last.added:
        return f"extraction {number} added {len(ledger.entries) - len(kept)}, not {last.added}"
    if last.degraded is not None and (last.degraded not in DEGRADATIONS or last.added
                                      or last.extractor != "model"):
        return f"extraction {number} is degraded ({last.degraded}) yet not an empty model stage"
    if earlier and earlier[0].extractor != last.extractor:
        return f"extraction {number} is by another extractor than the ones before it"
    if previous is not None and previous.trace_id != ledger.trace_id:
        return f"extraction {number} is of another trace"
    read = {record for e in earlier for record in e.selection}
    if read & set(last.selection):
        return f"extraction {number} reads a record an earlier extraction read"
    return None


def encode_ledger(ledger: Ledger) -> bytes:
    return msgspec.json.encode(ledger)


def decode_ledger(data: bytes) -> Ledger:
    """A ledger's bytes, decoded (``fold_input_invalid`` when they are not one)."""
    try:
        return msgspec.json.decode(data, type=Ledger)
    except msgspec.DecodeError as exc:
        raise FoldError(Code.FOLD_INPUT_INVALID, f"not a ledger: {exc}") from exc


def render_ledger(ledger: Ledger) -> tuple[Pack, LedgerStats]:
    """The ledger as the reader sees it (the pack's sections and budget), and its
    account: the extractions, what each added, what the budget left out."""
    pack = render_entries([PackEntry(e.section, e.text, e.seq) for e in ledger.entries],
                          LEDGER_HEADER, titles=_TITLES)
    stats = LedgerStats(
        extractions=len(ledger.extractions),
        added=[e.added for e in ledger.extractions],
        operations=sum(e.operations for e in ledger.extractions),
        entries=len(ledger.entries),
        omitted_for_budget=pack.stats.omitted_for_budget,
        tokens_estimate=pack.stats.tokens_estimate,
        extractor=ledger.extractions[0].extractor if ledger.extractions else "deterministic",
        degraded=[f"p{e.number}: {e.degraded}" for e in ledger.extractions if e.degraded],
        unoffered=sum(e.unoffered for e in ledger.extractions),
        selected=sum(len(e.selection) for e in ledger.extractions),
    )
    return pack, stats


def treated(ledger: Ledger) -> bool:
    """Whether ``ledger`` is a treatment: every extraction committed and at least one not
    degraded (three degraded stages are a ledger no extractor wrote, not a sample of
    the arm: its slots are excluded, never scored as misses)."""
    return (len(ledger.extractions) == LEDGER_EXTRACTIONS
            and any(e.degraded is None for e in ledger.extractions))
