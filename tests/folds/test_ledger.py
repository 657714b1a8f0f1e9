"""The progressive ledger (``folds/ledger.py``) and the ``ledger-cold`` arm: three
extractions over disjoint thirds of the retained records, each keeping what the ones
before committed; an extraction that finds nothing still counts as one operation; the
check the controller runs on every committed ledger refuses each way a ledger can fail
to extend the one before; the checkpoint is the cold boundary after the final ledger,
identifier values included, nothing from a result that held a credential."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest

from efold.corpus.model import SuiteItem
from efold.errors import Code
from efold.folds import TracePrefix
from efold.folds.arms import ColdRebuildFold, LedgerColdFold
from efold.folds.errors import FoldError
from efold.folds.ledger import (
    LEDGER_EXTRACTIONS,
    Extraction,
    Ledger,
    check_extension,
    decode_ledger,
    encode_ledger,
    extract,
    extract_all,
    render_ledger,
)


def chained(prefix: TracePrefix) -> list[Ledger]:
    """The three ledgers, each extraction given the one before."""
    ledgers: list[Ledger] = []
    for number in range(1, LEDGER_EXTRACTIONS + 1):
        ledgers.append(extract(ledgers[-1] if ledgers else None, prefix, number))
    return ledgers


def test_three_extractions_each_keep_the_ones_before(original_items: list[SuiteItem]) -> None:
    for item in original_items:
        prefix = TracePrefix.of(item.trace)
        ledgers = chained(prefix)
        assert ledgers[-1] == extract_all(prefix)
        previous = None
        read: set[str] = set()
        for number, ledger in enumerate(ledgers, start=1):
            assert check_extension(previous, ledger, number) is None
            last = ledger.extractions[-1]
            assert last.number == number and last.operations == 1 and last.selection
            assert not read & set(last.selection)  # a new selection every time
            read |= set(last.selection)
            assert decode_ledger(encode_ledger(ledger)) == ledger
            previous = ledger
        # The thirds cover every retained record once.
        assert sum(len(e.selection) for e in ledgers[-1].extractions) == len(read)
        assert [e.added for e in ledgers[-1].extractions] == [
            len(b.entries) - len(a.entries)
            for a, b in itertools.pairwise([Ledger(prefix.trace_id, [], []), *ledgers])]


def test_extractions_out_of_order_refuse(original_items: list[SuiteItem]) -> None:
    prefix = TracePrefix.of(original_items[0].trace)
    first = extract(None, prefix, 1)
    for previous, number in ((None, 2), (first, 1), (first, 3), (None, 0), (None, 4)):
        with pytest.raises(FoldError) as refused:
            extract(previous, prefix, number)
        assert refused.value.code is Code.FOLD_INPUT_INVALID


def test_an_extraction_that_finds_nothing_still_counts(
        synthetic: Any) -> None:
    t = synthetic()
    t.owner("Rule: never call before 9am.")
    t.reply("Noted.")
    t.owner("Anything new?")
    t.reply("Nothing yet.")
    t.owner("Next: book the van by 3 June 2031.")
    t.reply("Will do.")
    prefix = t.prefix()
    ledgers = chained(prefix)
    assert [e.added for e in ledgers[-1].extractions] == [1, 0, 1]
    # The analysis-only second stage: one operation, nothing added, still valid.
    assert ledgers[1].entries == ledgers[0].entries
    assert check_extension(ledgers[0], ledgers[1], 2) is None
    _, stats = render_ledger(ledgers[-1])
    assert stats.operations == LEDGER_EXTRACTIONS and stats.added == [1, 0, 1]


def test_the_check_refuses_every_broken_extension(original_items: list[SuiteItem]) -> None:
    prefix = TracePrefix.of(original_items[0].trace)
    one, two, _ = chained(prefix)
    assert two.entries and one.entries
    last = two.extractions[-1]
    broken = {
        "an earlier entry changed": msgspec.structs.replace(
            two, entries=[msgspec.structs.replace(two.entries[0], text="- forged"),
                          *two.entries[1:]]),
        "an earlier entry dropped": msgspec.structs.replace(two, entries=two.entries[1:]),
        "a selection read again": msgspec.structs.replace(two, extractions=[
            one.extractions[0], msgspec.structs.replace(last, selection=one.extractions[0].selection)]),
        "a selection overlapping an earlier one": msgspec.structs.replace(two, extractions=[
            one.extractions[0], msgspec.structs.replace(
                last, selection=[*last.selection, one.extractions[0].selection[-1]])]),
        "a miscounted addition": msgspec.structs.replace(two, extractions=[
            one.extractions[0], msgspec.structs.replace(last, added=last.added + 1)]),
        "two operations": msgspec.structs.replace(two, extractions=[
            one.extractions[0], msgspec.structs.replace(last, operations=2)]),
        "another number": msgspec.structs.replace(two, extractions=[
            one.extractions[0], msgspec.structs.replace(last, number=3)]),
        "an earlier extraction rewritten": msgspec.structs.replace(two, extractions=[
            Extraction(1, [], 0), last]),
        "another trace": msgspec.structs.replace(two, trace_id="elsewhere"),
    }
    for why, ledger in broken.items():
        assert check_extension(one, ledger, 2) is not None, why
    assert check_extension(one, two, 3) is not None  # not the extraction asked for
    assert check_extension(None, two, 2) is not None  # not after nothing


def test_the_checkpoint_is_the_cold_boundary_after_the_final_ledger(
        original_items: list[SuiteItem]) -> None:
    for item in original_items:
        prefix = TracePrefix.of(item.trace)
        final = extract_all(prefix)
        built = LedgerColdFold(final).build(prefix)
        assert built == LedgerColdFold().build(prefix)
        cold = ColdRebuildFold().build(prefix)
        pack, stats = render_ledger(final)
        assert built.messages == [built.messages[0], *cold.messages]
        assert built.messages[0].content == pack.text and built.tools == []
        assert built.receipt.boundary.kind == "ledger" and built.receipt.boundary.verified
        assert built.receipt.ledger == stats and stats.extractions == LEDGER_EXTRACTIONS
        # Identifier values, not pointers: the arm offers no lookup.
        assert "Identifiers:\n- " in pack.text and "values in the cited records" not in pack.text
    # A ledger of two extractions is not the arm's boundary; one of another trace refuses.
    prefix = TracePrefix.of(original_items[0].trace)
    two = chained(prefix)[1]
    assert not LedgerColdFold(two).build(prefix).receipt.boundary.verified
    other = TracePrefix.of(original_items[1].trace)
    with pytest.raises(FoldError):
        LedgerColdFold(extract_all(other)).build(prefix)


def test_nothing_from_a_result_that_held_a_credential(synthetic: Any) -> None:
    t = synthetic()
    t.owner("Read the portal email.")
    t.tool("Account reference: ACC-7F3K-219\nTemporary password: hunter2")
    t.reply("Read.")
    t.owner("And the courier?")
    t.tool("Tracking number: TRK-P9QX-118")
    t.reply("Read.")
    text = render_ledger(extract_all(t.prefix()))[0].text
    assert "TRK-P9QX-118" in text
    assert "ACC-7F3K-219" not in text and "hunter2" not in text


def test_a_trace_shorter_than_the_extractions_still_gets_its_ledger(synthetic: Any) -> None:
    t = synthetic()
    t.owner("Rule: never call before 9am.")
    prefix = t.prefix()
    ledgers = chained(prefix)  # one record: the first two thirds read nothing
    assert [e.selection for e in ledgers[-1].extractions] == [[], [], ["e0001"]]
    previous = None
    for number, ledger in enumerate(ledgers, start=1):
        assert check_extension(previous, ledger, number) is None
        previous = ledger
    built = LedgerColdFold().build(prefix)
    assert built.receipt.boundary.verified and "Rule: never call before 9am." in \
        built.messages[0].content
