"""What a non-2xx answer says about why: a fixed kind, and a sanitised excerpt.

An HTTP error keeps its hold (``guard.settlement.settle_http_status``); this module only
reads the evidence, so a report can say *why* a request failed, not just that it did.

- ``HttpFailureKind`` is a closed set, decided from the status and, for a 4xx, from
  fixed phrases of the error body (a context window exceeded). It is content-free: it
  may travel into receipts and reports.
- ``excerpt`` is the server's own words, bounded and stripped: at most
  ``EXCERPT_CHARS`` printable ASCII characters, whitespace collapsed, anything shaped
  like a credential (a bearer token, an ``sk-`` key, a ``key=value`` secret, a long hex
  or base64 run) redacted, and every run of ``ECHO_RUN`` or more characters that also
  occurs in the request that was sent removed: a server may echo the prompt, and no
  part of the request may come back out through its error. It is still the server's
  free text, so it never reaches a receipt or a report: only the owner-only private
  artifact (docs/reliability.md, "HTTP failures").
"""

from __future__ import annotations

import enum
import re
from typing import Any, Final

import msgspec

from efold.errors import Code

# How much of an error body is read (the rest is never received): enough for any
# provider's error object, small enough to bound the read.
ERROR_BODY_BYTES: Final = 16 * 1024
EXCERPT_CHARS: Final = 200
ECHO_RUN: Final = 8  # a run this long that occurs in the request is request content
# Only this much of the server's text is considered: it bounds the echo search (one
# substring search of the request per character, ~0.3 s against a 1 MB request), and
# leaves room for the runs removed before the excerpt is cut to its length.
_CONSIDERED_CHARS: Final = 2 * EXCERPT_CHARS
# The codes a non-2xx answer ends a request with: only an outcome with one of them has
# HTTP failure evidence (a receipt's ``http``).
HTTP_FAILURE_CODES: Final = frozenset({Code.LOOKUP_HTTP_STATUS, Code.LOOKUP_REDIRECT_FORBIDDEN})
_REMOVED: Final = "[...]"
_REDACTED: Final = "[redacted]"


class HttpFailureKind(enum.StrEnum):
    """Why a provider answered a request with a non-2xx status (a closed set)."""

    CONTEXT_EXCEEDED = "context_exceeded"  # 400/413/422 naming a context/token limit
    RATE_LIMITED = "rate_limited"  # 429
    AUTH_REFUSED = "auth_refused"  # 401, 403
    NOT_FOUND = "not_found"  # 404 (a wrong path or model)
    BAD_REQUEST = "bad_request"  # any other 4xx
    SERVER_ERROR = "server_error"  # 5xx
    REDIRECT = "redirect"  # 3xx (never followed)
    UNEXPECTED = "unexpected"  # any other status


# Statuses a context-window refusal comes with, and the phrases that name one (as
# OpenAI, Anthropic, llama.cpp, vLLM and Ollama word it), matched case-insensitively.
_CONTEXT_STATUSES: Final = frozenset({400, 413, 422})
_CONTEXT_PHRASES: Final = re.compile(
    r"context[ _-]?(length|size|window)|maximum context|prompt is too long|too many tokens"
    r"|exceeds? the (available|maximum) context|context_length_exceeded",
    re.IGNORECASE)


def kinds_for(status: int) -> frozenset[HttpFailureKind]:
    """The kinds ``status`` can have: a claimed kind outside them is not believed."""
    base = _status_kind(status)
    if status in _CONTEXT_STATUSES:
        return frozenset({base, HttpFailureKind.CONTEXT_EXCEEDED})
    return frozenset({base})


def _status_kind(status: int) -> HttpFailureKind:
    if 300 <= status < 400:
        return HttpFailureKind.REDIRECT
    if status == 429:
        return HttpFailureKind.RATE_LIMITED
    if status in (401, 403):
        return HttpFailureKind.AUTH_REFUSED
    if status == 404:
        return HttpFailureKind.NOT_FOUND
    if 400 <= status < 500:
        return HttpFailureKind.BAD_REQUEST
    if 500 <= status < 600:
        return HttpFailureKind.SERVER_ERROR
    return HttpFailureKind.UNEXPECTED


def classify(status: int, body: bytes) -> HttpFailureKind:
    """The kind of a non-2xx answer, from its status and (for a 4xx) its body."""
    if status in _CONTEXT_STATUSES and _CONTEXT_PHRASES.search(_server_text(body)):
        return HttpFailureKind.CONTEXT_EXCEEDED
    return _status_kind(status)


def _server_text(body: bytes) -> str:
    """The error's message when the body is a JSON error object (``error.message``,
    ``error`` as a string, ``message``, ``detail``), else the body as text."""
    text = body[:ERROR_BODY_BYTES].decode("utf-8", errors="replace")
    try:
        doc: Any = msgspec.json.decode(body[:ERROR_BODY_BYTES])
    except msgspec.DecodeError:
        return text
    if isinstance(doc, dict):
        error = doc.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        for value in (error, doc.get("message"), doc.get("detail")):
            if isinstance(value, str):
                return value
    return text


_NOT_PRINTABLE: Final = re.compile(r"[^\x20-\x7e]+")
_SPACES: Final = re.compile(r" {2,}")


def _printable(text: str) -> str:
    """Printable ASCII only, every other character as a space, spaces collapsed."""
    return _SPACES.sub(" ", _NOT_PRINTABLE.sub(" ", text)).strip()


# Shapes of secrets, in order: a bearer token, a ``name=value`` / ``"name": "value"``
# secret, an API key with a known prefix, a long hex or base64 run.
_SECRETS: Final = (
    (re.compile(r"(?i)\bbearer\s+\S+"), "Bearer " + _REDACTED),
    (re.compile(r"(?i)\b((?:api[_-]?)?key|token|secret|password|authorization|credential)"
                r"(\"?\s*[:=]\s*\"?)[^\s\"',;}]+"), r"\1\2" + _REDACTED),
    (re.compile(r"\b(?:sk|pk|rk|ak)-[A-Za-z0-9_-]{6,}"), _REDACTED),
    (re.compile(r"[A-Za-z0-9+/_=-]{24,}"), _REDACTED),
)


def _redact(text: str) -> str:
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def _sent_text(sent: bytes) -> str:
    """The request as the server could echo it: every string of its JSON, keys included,
    decoded (a prompt travels escaped), or its bytes as text if it is not JSON; each put
    through ``_printable`` and NUL-joined, so no run spans two of them."""
    try:
        doc: Any = msgspec.json.decode(sent)
    except msgspec.DecodeError:
        return _printable(sent.decode("utf-8", errors="replace"))
    parts: list[str] = []
    stack = [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            parts.append(_printable(value))
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return "\0".join(parts)


def _without_echo(text: str, sent: str) -> str:
    """``text`` with every run of ``ECHO_RUN`` or more characters that occurs in
    ``sent`` replaced by one marker."""
    covered = [False] * len(text)
    for start in range(len(text) - ECHO_RUN + 1):
        if text[start:start + ECHO_RUN] in sent:
            covered[start:start + ECHO_RUN] = [True] * ECHO_RUN
    out: list[str] = []
    for i, char in enumerate(text):
        if not covered[i]:
            out.append(char)
        elif i == 0 or not covered[i - 1]:
            out.append(_REMOVED)
    return "".join(out)


def excerpt(body: bytes, sent: bytes) -> str:
    """The server's error text, sanitised as the module docstring says ("" when
    nothing is left)."""
    text = _printable(_server_text(body))[:_CONSIDERED_CHARS]
    text = _printable(_redact(_without_echo(text, _sent_text(sent))))
    if len(text) > EXCERPT_CHARS:
        text = text[:EXCERPT_CHARS - 3] + "..."
    return text


class HttpFailure(msgspec.Struct, frozen=True, kw_only=True):
    """A non-2xx answer's evidence: its status, its kind and the sanitised excerpt."""

    status: int
    kind: HttpFailureKind
    excerpt: str = ""


def read_failure(status: int, body: bytes, sent: bytes) -> HttpFailure:
    """The evidence of a non-2xx answer whose (bounded) body is ``body``, to a request
    whose body was ``sent``."""
    return HttpFailure(status=status, kind=classify(status, body), excerpt=excerpt(body, sent))
