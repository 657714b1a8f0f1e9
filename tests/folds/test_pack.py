"""The deterministic pack: sections, citations, identifier pointers, the 8k budget."""

from __future__ import annotations

from efold.corpus.forms import chars_to_tokens
from efold.folds.arms import PackFold
from efold.folds.checkpoint import CITATION_PATTERN, RetainedStore, cite
from efold.folds.pack import PACK_BUDGET_TOKENS, build_pack
from efold.folds.retention import retain
from efold.folds.transcript import session_transcript


def _trace(synthetic):
    t = synthetic()
    rules = t.owner(
        "Ground rules:\nRule: never mention the funding review to any counterparty.\n"
        "Rule: never paste passwords back into this chat."
    )
    account = t.tool("Message from Ostler\nAccount reference: ACC-7F3K-219\nThanks")
    secret = t.tool("Portal\nBooking ref: BK-Q2M8-884\nTemporary password: Lx82-mq91")
    t.owner("Correction: the delivery date changes from 6 October 2031 to 8 October 2031.")
    t.tool("Status of the loading checklist: DRAFT", name="document_read")
    shared = t.tool("Status of the loading checklist: SHARED", name="document_read")
    t.owner("Next: clear the reading room tables by 2 October 2031.")
    last = t.owner("Next: test the network port with Calder IT by 7 October 2031.")
    t.tool("Hypothetical (not a decision): Booking ref: BK-ZZ41-120 would apply if split.")
    return t, rules, account, secret, shared, last


def test_pack_sections_cite_their_sources(synthetic):
    t, rules, _account, _secret, shared, last = _trace(synthetic)
    pack = build_pack(retain(session_transcript(t.events)))
    text = pack.text
    assert f"Rule: never mention the funding review to any counterparty. {cite(rules.id)}" in text
    assert "Correction: the delivery date changes from 6 October 2031 to 8 October 2031." in text
    assert f"Status of the loading checklist: SHARED {cite(shared.id)}" in text
    assert "Status of the loading checklist: DRAFT" not in text  # latest status per thing
    assert f"Next: test the network port with Calder IT by 7 October 2031. {cite(last.id)}" in text
    # every entry line cites a record
    entries = [line for line in text.split("\n") if line.startswith("- ") and "(none)" not in line]
    assert entries and all(CITATION_PATTERN.search(line) for line in entries)
    assert pack.stats.rules == 2 and pack.stats.corrections == 1 and pack.stats.open_items == 2
    assert pack.stats.commitments == 1 and pack.stats.omitted_for_budget == 0


def test_identifiers_are_pointers_not_values(synthetic):
    t, _, account, secret, _, _ = _trace(synthetic)
    pack = build_pack(retain(session_transcript(t.events)))
    assert f'Identifier "Account reference" is in {cite(account.id)}' in pack.text
    assert "ACC-7F3K-219" not in pack.text
    # the credential-bearing result is not retained, so nothing of it reaches the pack
    assert cite(secret.id) not in pack.text and "Booking ref" not in pack.text
    assert "BK-ZZ41-120" not in pack.text  # a hypothetical line is not a fact
    assert pack.stats.identifiers == 1


def test_pack_stays_within_8k_tokens_and_counts_omissions(synthetic):
    t = synthetic()
    t.owner("Rule: never mention the funding review to any counterparty.")
    for i in range(900):
        t.owner(f"Next: check crate {i} with the warehouse by {i % 28 + 1} March 2031.")
    pack = build_pack(retain(session_transcript(t.events)))
    assert chars_to_tokens(len(pack.text)) <= PACK_BUDGET_TOKENS
    assert pack.stats.tokens_estimate <= PACK_BUDGET_TOKENS
    assert pack.stats.omitted_for_budget > 0
    assert pack.stats.open_items + pack.stats.omitted_for_budget == 900
    assert "Rule: never mention the funding review" in pack.text  # rules are omitted last
    assert "check crate 899" in pack.text and "check crate 0 " not in pack.text  # oldest first


def test_empty_store_gives_an_empty_but_valid_pack():
    pack = build_pack(RetainedStore(records=[], omitted_credential=0))
    assert pack.text.count("- (none)") == 5 and pack.cited_ids == ()


def test_pack_arm_puts_the_pack_first_and_offers_the_tools(synthetic):
    t, *_ = _trace(synthetic)
    checkpoint = PackFold().build(t.prefix())
    assert checkpoint.messages[0].content.startswith("Continuity pack")
    assert checkpoint.tools == ["history_search", "history_get"] and checkpoint.store is not None
    assert checkpoint.receipt.pack is not None and checkpoint.receipt.store is not None
    assert checkpoint.receipt.store.omitted_credential == 1
