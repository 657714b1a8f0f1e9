"""Exact token counts, when possible, beside the chars/4 estimate.

Every bound and trigger in folds/ uses the chars/4 estimate (``efold.corpus.forms``:
``chars_to_tokens``, ``estimate_tokens``) so that arms are comparable and deterministic.

Exact counts use tiktoken when it is importable *and* its encoding loads offline; they are
reported separately and never drive a decision. tiktoken fetches its BPE files over the
network on first use, so a failure to load is "unavailable" (None), never zero.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Protocol

TIKTOKEN_ENCODING = "o200k_base"


class _Encoder(Protocol):
    def encode(self, text: str, *, disallowed_special: tuple[str, ...] = ()) -> list[int]: ...


@functools.cache
def _tiktoken_encoder() -> _Encoder | None:
    try:
        import tiktoken  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    try:
        encoder: _Encoder = tiktoken.get_encoding(TIKTOKEN_ENCODING)
    except Exception:  # offline, missing cache, corrupt file: exact counts are unavailable
        return None
    return encoder


def exact_token_count(texts: Iterable[str]) -> int | None:
    """Exact token count with tiktoken, or None when tiktoken cannot run here."""
    encoder = _tiktoken_encoder()
    if encoder is None:
        return None
    return sum(len(encoder.encode(text, disallowed_special=())) for text in texts)


def tiktoken_encoding_name() -> str | None:
    """The encoding used for exact counts, or None when they are unavailable."""
    return TIKTOKEN_ENCODING if _tiktoken_encoder() is not None else None
