"""Textual credential assignments: the one rule efold's privacy guarantees rest on.

A *textual credential assignment* is a credential word (password, passcode, passphrase,
PIN, token, API/access/secret key, secret, access or sign-in code, credentials),
optionally followed by a few words ("temporary password for the portal"), then:

* ``:`` or ``=`` and any value: ``password: xyz``, ``token=AbCd1234`` (the corpus's
  ``Temporary password: <secret>`` is this form); or
* ``is``, ``was`` or ``set to`` and a value that looks like a credential (at least 4
  characters with a digit, a symbol or mixed case): "the temporary password is
  Qz7-29xk" is an assignment, "the password is required" is prose.

The rule errs toward omission: a tool result with "Passwords: see the vault" is
omitted too. Privacy wins over recall here, and the omission is counted.

Two users: ``folds.retention`` omits a tool result that holds one from every retained
store, whole; ``corpus import`` replaces the assigned *values* in owner and assistant
text and in tool-call arguments by ``[redacted]`` (``credential_value_spans``).
"""

from __future__ import annotations

import re

_CREDENTIAL_WORD = (
    r"(?:pass(?:word|code|phrase)|pin(?:\s+code)?|(?:api|access|auth|secret|private)[\s_-]?key"
    r"|(?:(?:api|access|auth|bearer)[\s_-]?)?token"
    r"|secret|access\s+code|sign[\s-]?in\s+code|one[\s-]?time\s+code|credentials?)"
)
# The credential word, up to four short words of context ("for the portal"), an
# assignment operator, then the candidate value.
_ASSIGNMENT = re.compile(
    r"(?i:\b" + _CREDENTIAL_WORD + r")s?\b(?:\s+[A-Za-z][\w-]{0,20}){0,4}?\s*"
    r"(?P<op>[:=]|(?i:\bis\b|\bwas\b|\bset\s+to\b))\s*[\"'`(\[]?(?P<value>[^\s\"'`)\]]+)"
)
_LOOKS_LIKE_A_CREDENTIAL = re.compile(r"\d|[^\w\s.,;:!?]|[a-z].*[A-Z]|[A-Z].*[a-z].*[A-Z]")
_PLAIN_WORDS = frozenset(
    {"required", "needed", "optional", "expired", "missing", "unchanged", "changed", "reset"}
)


# A cheap first pass: the full pattern runs only in a window around these words, found
# with ``str.find`` on the lower-cased text (regex alternation over 64 KiB results is
# ~30x slower). They are rare in tool results.
_KEYWORDS = ("password", "passcode", "passphrase", "pin", "token", "key", "secret", "code", "credential",
             # the pattern's compounds written as one word ("secretkey", "apitoken"): no
             # word boundary before their "key"/"token", so they need their own entry
             "apikey", "accesskey", "authkey", "secretkey", "privatekey",
             "apitoken", "accesstoken", "authtoken", "bearertoken")
_WINDOW_BEFORE = 24  # room for "api ", "access ", "sign-in " before the keyword
_WINDOW_AFTER = 160
_SPACE = re.compile(r"\s")


def _keyword_positions(lower: str) -> list[int]:
    positions: list[int] = []
    for keyword in _KEYWORDS:
        at = lower.find(keyword)
        while at != -1:
            end = at + len(keyword)
            for _ in range(2):  # the pattern allows "credentials" plus a plural "s"
                if end < len(lower) and lower[end] == "s":
                    end += 1
            if (at == 0 or not lower[at - 1].isalnum()) and (end == len(lower) or not lower[end].isalnum()):
                positions.append(at)
            at = lower.find(keyword, at + 1)
    return sorted(positions)


def contains_credential_assignment(text: str) -> bool:
    """True when ``text`` assigns a credential a value (see the module docstring)."""
    lower = text.lower()
    if len(lower) != len(text):  # a character whose lower case is longer: no windows
        return _assignment_in(text)
    for at in _keyword_positions(lower):
        # Search the unsliced text between positions, so ``\b`` sees the real
        # neighbours; the window ends at whitespace so a value is never cut short.
        space = _SPACE.search(text, at + _WINDOW_AFTER)
        if _assignment_in(text, max(0, at - _WINDOW_BEFORE), len(text) if space is None else space.start()):
            return True
    return False


def _assignment_in(text: str, start: int = 0, end: int | None = None) -> bool:
    # Overlapping search: a match that is not an assignment ("pin ... is password:")
    # must not hide one that starts inside it ("password: x").
    stop = len(text) if end is None else end
    match = _ASSIGNMENT.search(text, start, stop)
    while match is not None:
        if match.group("op") in (":", "="):
            return True
        value = match.group("value").rstrip(".,;:!?")
        if len(value) >= 4 and value.lower() not in _PLAIN_WORDS \
                and _LOOKS_LIKE_A_CREDENTIAL.search(value):
            return True
        match = _ASSIGNMENT.search(text, match.start() + 1, stop)
    return False


def credential_value_spans(text: str) -> list[tuple[int, int]]:
    """The spans of the values ``text`` assigns to credentials: disjoint, in order.
    Invariant: non-empty exactly when ``contains_credential_assignment(text)``."""
    spans: list[tuple[int, int]] = []
    match = _ASSIGNMENT.search(text)
    while match is not None:  # overlapping, as ``_assignment_in`` searches
        value = match.group("value")
        stripped = value.rstrip(".,;:!?") or value
        if match.group("op") in (":", "=") or (
                len(stripped) >= 4 and stripped.lower() not in _PLAIN_WORDS
                and _LOOKS_LIKE_A_CREDENTIAL.search(stripped) is not None):
            spans.append((match.start("value"), match.start("value") + len(stripped)))
        match = _ASSIGNMENT.search(text, match.start() + 1)
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def names_credential(key: str) -> bool:
    """Whether a JSON member named ``key`` holds a credential (``{"password": ...}``)."""
    return contains_credential_assignment(f"{key}: x")
