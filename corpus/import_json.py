"""Reading transcript files as JSON or JSONL while keeping every record's line number.

Every refusal names ``FILE:LINE`` (the line a record starts on, or the line of a
decoding error), so a user can open the file where it went wrong:

* ``read_jsonl``: one JSON value per non-blank line; the record's line is its own.
* ``read_messages``: a JSON document holding a message list (a bare array, or an object
  with a ``messages`` array). Each message's line is found from its offset in the text
  (the document is scanned once more with ``json.JSONDecoder.raw_decode``); its
  ``where`` names it as ``messages[12]`` (or ``[12]`` for a bare array). With
  ``allow_jsonl`` a file of one message object per line is read as JSONL instead.

The document is decoded with the standard library (``json``), which reports the line and
column of a syntax error; msgspec does not.
"""

from __future__ import annotations

import bisect
import json
import re
from typing import Any

from efold.corpus.errors import CorpusError
from efold.corpus.imports import STRICT_JSON, NumberRefused, Origin, import_error

_DECODER = STRICT_JSON
_SPACE = re.compile(r"[ \t\n\r]*")


def decode_text(data: bytes, name: str) -> str:
    """The file as text (a UTF-8 byte order mark is skipped); invalid UTF-8 refuses with
    the line of the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise import_error(name, Origin(line), "not UTF-8 text") from exc


def _malformed(name: str, line: int, exc: json.JSONDecodeError) -> CorpusError:
    return import_error(name, Origin(line), f"malformed JSON: {exc.msg} (column {exc.colno})")


def _refused_number(name: str, line: int, exc: NumberRefused) -> CorpusError:
    return import_error(name, Origin(line), exc.detail, exc.code)


def read_jsonl(data: bytes, name: str) -> list[tuple[Origin, Any]]:
    """(origin, value) of every non-blank line, in file order."""
    records: list[tuple[Origin, Any]] = []
    for number, raw in enumerate(decode_text(data, name).split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            records.append((Origin(number), STRICT_JSON.decode(raw)))
        except json.JSONDecodeError as exc:
            raise _malformed(name, number, exc) from exc
        except NumberRefused as exc:
            raise _refused_number(name, number, exc) from exc
        except RecursionError as exc:
            raise import_error(name, Origin(number), "JSON nested too deep") from exc
    return records


def _skip(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _element_starts(text: str, at: int) -> list[int]:
    """Offsets of the elements of the (valid) JSON array starting at ``text[at]``."""
    starts: list[int] = []
    at = _skip(text, at + 1)
    if text[at] == "]":
        return starts
    while True:
        starts.append(at)
        _, at = _DECODER.raw_decode(text, at)
        at = _skip(text, at)
        if text[at] == "]":
            return starts
        at = _skip(text, at + 1)  # past ","


def _member_start(text: str, at: int, key: str) -> int:
    """Offset of the value of the last member ``key`` of the (valid) JSON object at
    ``text[at]`` (the last one is the one ``json.loads`` keeps), or -1."""
    found = -1
    at = _skip(text, at + 1)
    if text[at] == "}":
        return found
    while True:
        member, at = _DECODER.raw_decode(text, at)
        at = _skip(text, _skip(text, at) + 1)  # past ":"
        if member == key:
            found = at
        _, at = _DECODER.raw_decode(text, at)
        at = _skip(text, at)
        if text[at] == "}":
            return found
        at = _skip(text, at + 1)  # past ","


def _looks_like_jsonl(text: str) -> bool:
    """True when the first non-blank line is itself a whole JSON object."""
    for raw in text.split("\n"):
        if raw.strip():
            try:
                return isinstance(STRICT_JSON.decode(raw), dict)
            except (ValueError, RecursionError):  # NumberRefused included
                return False
    return False


def read_messages(data: bytes, name: str, *, allow_jsonl: bool) -> tuple[list[tuple[Origin, Any]], dict[str, Any]]:
    """The message records of a message-list file, and the enclosing object's members
    (empty for a bare array or JSONL).

    Refuses a file that is neither a JSON array, an object with a ``messages`` array nor
    (with ``allow_jsonl``) JSONL of message objects.
    """
    text = decode_text(data, name)
    start = _skip(text, 0)
    if start == len(text):
        raise import_error(name, Origin(1), "empty file (no user or assistant message)")
    try:
        document = STRICT_JSON.decode(text)
    except json.JSONDecodeError as exc:
        if allow_jsonl and text[start] == "{" and _looks_like_jsonl(text):
            return read_jsonl(data, name), {}
        raise _malformed(name, exc.lineno, exc) from exc
    except NumberRefused as exc:
        # The decoder gives no offset here: the line is where the token first appears.
        raise _refused_number(name, text.count("\n", 0, max(text.find(exc.token), 0)) + 1,
                              exc) from exc
    except RecursionError as exc:
        raise import_error(name, Origin(1), "JSON nested too deep") from exc
    newlines = [m.start() for m in re.finditer("\n", text)]

    def origin(offset: int, where: str) -> Origin:
        return Origin(bisect.bisect_left(newlines, offset) + 1, where)

    if isinstance(document, list):
        starts = _element_starts(text, start)
        return [(origin(s, f"[{i}]"), v) for i, (s, v) in enumerate(zip(starts, document, strict=True))], {}
    if isinstance(document, dict) and isinstance(document.get("messages"), list):
        at = _member_start(text, start, "messages")
        starts = _element_starts(text, at)
        records = [(origin(s, f"messages[{i}]"), v)
                   for i, (s, v) in enumerate(zip(starts, document["messages"], strict=True))]
        return records, document
    if allow_jsonl and isinstance(document, dict) and "role" in document:
        return [(Origin(origin(start, "").line), document)], {}
    raise import_error(name, origin(start, ""),
                       "expected a JSON array of messages or an object with a \"messages\" array"
                       + (" (or JSONL, one message per line)" if allow_jsonl else ""))
