"""Session order (steers after the in-flight results) and the retention privacy rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from efold.corpus.credentials import _assignment_in
from efold.corpus.forms import estimate_tokens, is_text_message
from efold.errors import Code
from efold.folds.errors import FoldError
from efold.folds.retention import contains_credential_assignment, retain
from efold.folds.transcript import reader_message, session_transcript


def test_steer_is_delivered_after_the_in_flight_result(synthetic):
    t = synthetic()
    t.owner("Read the vendor email.")
    result = t.tool("Vendor email body", steer="also check the parcel")
    t.reply("Done.")
    order = [e.id for e in session_transcript(t.events)]
    steer = next(e for e in t.events if e.steer)
    # raw file order: call, steer, result; session order: call, result, steer
    assert [e.id for e in t.events].index(steer.id) < [e.id for e in t.events].index(result.id)
    assert order.index(result.id) < order.index(steer.id) < order.index(t.events[-1].id)
    assert sorted(order) == sorted(e.id for e in t.events)


def test_transcript_refuses_empty_and_repeated_ids(synthetic):
    with pytest.raises(FoldError) as empty:
        session_transcript([])
    assert empty.value.code is Code.FOLD_INPUT_INVALID
    t = synthetic()
    event = t.owner("hello")
    with pytest.raises(FoldError) as repeated:
        session_transcript([event, event])
    assert repeated.value.code is Code.FOLD_INPUT_INVALID


def test_text_messages_and_estimate(synthetic):
    t = synthetic()
    owner = t.owner("x" * 10)
    result = t.tool("y" * 7)
    call = t.events[-2]
    assert is_text_message(owner) and not is_text_message(call) and not is_text_message(result)
    # ceil of the *summed* characters / 4, tool-call names and arguments included
    chars = 10 + 7 + len("email_read") + len(call.tool_calls[0].function.arguments)
    assert estimate_tokens([reader_message(e) for e in t.events]) == -(-chars // 4)


@pytest.mark.parametrize(
    "text",
    [
        "Temporary password: Lx82-mq91",
        "password: xyz",
        "password: hunter2",
        "Passwords: see the vault",  # errs toward omission
        "Your temporary password for the vendor portal is Qz7-29xk.",
        "token=AbCd1234",
        "API key: sk-abc123",
        "Access code: 7731",
        "pin code is 4821",
    ],
)
def test_credential_assignments_are_detected(text):
    assert contains_credential_assignment(text)


@pytest.mark.parametrize(
    "text",
    [
        "the password is required",
        "the password is long",
        "We reset your password yesterday.",
        "Rule: never paste passwords back into this chat.",
        "the token budget is large",
        "Booking key: BK-1234",
        "Account reference: ACC-7F3K-219",
    ],
)
def test_prose_is_not_a_credential_assignment(text):
    assert not contains_credential_assignment(text)


def test_retain_omits_credential_results_whole_and_counts_them(synthetic):
    t = synthetic()
    t.owner("Rule: never paste passwords back into this chat.")
    kept = t.tool("Account reference: ACC-7F3K-219")
    dropped = t.tool("Portal access\nBooking ref: BK-Q2M8-884\nTemporary password: Lx82-mq91")
    t.reply("Noted.")
    retained = retain(session_transcript(t.events))
    ids = [r.id for r in retained.records]
    assert kept.id in ids and dropped.id not in ids
    assert retained.omitted_credential == 1
    # no partial salvage: the identifier sharing the credential's result is gone too
    assert not any("BK-Q2M8-884" in r.text for r in retained.records)
    # owner text survives even though it mentions passwords (only tool results are judged)
    assert any(r.kind == "owner" and "passwords" in r.text for r in retained.records)
    # tool-call messages are retained with the call rendered (searchable)
    assert any("(tool call email_read" in r.text for r in retained.records)


_PIECES = st.sampled_from(
    [
        "password", "Password", "passcode", "PIN", "pin code", "token", "API key", "access key",
        "secret", "Sign-in code", "credentials", "key", "code", "postcode", "pinned",
        ": ", " is ", " was ", "=", " set to ", " for the vendor portal", "\n", " ",
        "hunter2", "Lx82-mq91", "required", "AbCd", "7731", "the", "İ", "reset", "s", "x" * 150,
        "abcdefghij" * 20 + "9",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_the_keyword_prefilter_never_changes_the_verdict(text):
    assert contains_credential_assignment(text) == _assignment_in(text)


def test_exactly_the_password_result_is_omitted_on_every_hard_seed():
    from efold.corpus import generate_hard
    from efold.folds.fold import TracePrefix

    for seed in range(101, 109):
        prefix = TracePrefix.of(generate_hard(seed).trace)
        assert retain(session_transcript(prefix.events)).omitted_credential == 1, seed


def test_a_compound_credential_word_is_found_by_the_prefilter():
    """Found by hypothesis: "secretkey" has no word boundary before its "key"."""
    for text in ("secretkey=postcode", "apitoken: x", "AccessKey = 1"):
        assert _assignment_in(text) and contains_credential_assignment(text), text


def test_an_assignment_inside_a_non_assignment_match_is_found():
    """Found by hypothesis: the first match ("pin codepassword is password:") is not an
    assignment, and must not hide the one that starts inside it."""
    text = "pin codepassword is password: password"
    assert _assignment_in(text) and contains_credential_assignment(text)
    # and a doubled plural still opens a prefilter window (seed 15)
    assert contains_credential_assignment("credentialss: passwordpassword")
