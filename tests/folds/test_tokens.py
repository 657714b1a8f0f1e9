"""Token estimates: chars/4 always; exact tiktoken counts only when tiktoken can run."""

from __future__ import annotations

import sys
import types

import pytest

from efold.corpus.forms import chars_to_tokens
from efold.folds import tokens
from efold.folds.arms import NativeFold


@pytest.fixture
def fresh_encoder_cache():
    tokens._tiktoken_encoder.cache_clear()
    yield
    tokens._tiktoken_encoder.cache_clear()


def test_chars_over_four_rounds_up():
    assert [chars_to_tokens(n) for n in (0, 1, 4, 5, 2**60 + 1)] == [0, 1, 1, 2, 2**58 + 1]


def test_without_tiktoken_exact_counts_are_unavailable_not_zero(fresh_encoder_cache, monkeypatch, synthetic):
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # import fails
    assert tokens.exact_token_count(["some text"]) is None
    t = synthetic()
    t.owner("hello there")
    receipt = NativeFold().build(t.prefix()).receipt
    assert receipt.tiktoken_tokens is None and receipt.tiktoken_encoding is None
    assert receipt.tokens_estimate == 3


def test_an_encoding_that_cannot_load_is_unavailable(fresh_encoder_cache, monkeypatch):
    broken = types.ModuleType("tiktoken")

    def get_encoding(name: str) -> object:
        raise OSError("offline: cannot fetch the BPE file")

    broken.get_encoding = get_encoding  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiktoken", broken)
    assert tokens.exact_token_count(["x"]) is None


def test_with_tiktoken_counts_are_reported_separately(fresh_encoder_cache, monkeypatch, synthetic):
    # A stand-in module at the import seam (the real one downloads its BPE files).
    fake = types.ModuleType("tiktoken")

    class Encoder:
        def encode(self, text: str, *, disallowed_special: tuple[str, ...] = ()) -> list[int]:
            return list(range(len(text.split())))

    fake.get_encoding = lambda name: Encoder()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiktoken", fake)
    t = synthetic()
    t.owner("one two three four five")
    receipt = NativeFold().build(t.prefix()).receipt
    assert receipt.tiktoken_tokens == 5 and receipt.tiktoken_encoding == tokens.TIKTOKEN_ENCODING
    assert receipt.tokens_estimate == 6  # the estimate is unchanged by the exact count
