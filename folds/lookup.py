"""The metered history lookup tool the reader is offered: ``history_search`` and
``history_get``.

``LookupTool.call(name, arguments_json) -> str`` is the whole reader-facing surface: it
returns the JSON text the reader receives as the function call's output. Every call is
reserved on the meter before dispatch and its response charged before delivery (see
``meter.py``). Mistakes the reader can make (unknown tool, bad arguments, a forged or
mismatched cursor, an unknown record id) come back as a fixed error object and are
charged like any response; an aborted meter answers with an uncharged abort object.

Responses (compact JSON, UTF-8, keys in the order shown)::

    history_search -> {"results": [{"id", "kind", "session", "day", "bytes", "pages",
                                    "snippet"}...], "next_cursor": str | null}
    history_get    -> {"id", "kind", "session", "day", "page", "pages", "text",
                       "next_cursor": str | null}          # page is 1-based, <= 8 KiB
    error          -> {"error": {"code": "<fixed code>", "message": "<fixed text>"}}

Cursors are opaque: ``<s|g>.<payload>.<mac>``, the payload bound to the query (search)
or the record id (get), the MAC keyed by the store's record digest. A cursor from
another query, record, tool or store is refused (``history_cursor_invalid``).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
from typing import Any, TypeVar

import msgspec

from efold.errors import Code
from efold.folds.checkpoint import HISTORY_GET, HISTORY_SEARCH
from efold.folds.errors import FoldError
from efold.folds.meter import Meter, MeterWitness
from efold.folds.store import HistoryStore, SearchHit, split_pages

MAX_SEARCH_LIMIT = 10
MAX_QUERY_CHARS = 1_000

_ERROR_MESSAGES: dict[Code, str] = {
    Code.HISTORY_TOOL_UNKNOWN: "unknown tool; use history_search or history_get",
    Code.HISTORY_ARGUMENTS_INVALID: "invalid arguments; see the tool's JSON schema",
    Code.HISTORY_QUERY_INVALID: "the query has no searchable term",
    Code.HISTORY_CURSOR_INVALID: "invalid cursor; pass next_cursor exactly as returned",
    Code.HISTORY_RECORD_UNKNOWN: "no retained record has this id",
    Code.HISTORY_STORE_INVALID: "the history store is unavailable",
    Code.METER_CALLS_EXHAUSTED: "lookup call budget exhausted; no further lookups",
    Code.METER_BYTES_EXHAUSTED: "lookup byte budget exhausted; the response was withheld",
}

HISTORY_SEARCH_SCHEMA: dict[str, Any] = {
    "type": "function",
    "name": HISTORY_SEARCH,
    "description": (
        "Search the retained conversation history (owner and assistant messages and tool "
        "results) by keywords or an exact identifier. Returns record ids with snippets; "
        "read a record with history_get. Pass next_cursor to see more results."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "keywords or an exact identifier"},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT},
            "cursor": {"type": ["string", "null"], "description": "next_cursor from a previous search"},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    "strict": False,
}

HISTORY_GET_SCHEMA: dict[str, Any] = {
    "type": "function",
    "name": HISTORY_GET,
    "description": (
        "Read one retained record by id, in pages of at most 8 KiB. Pass next_cursor to "
        "read the next page."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "a record id, e.g. from [record <id>]"},
            "cursor": {"type": ["string", "null"], "description": "next_cursor from a previous get"},
        },
        "required": ["id"],
        "additionalProperties": False,
    },
    "strict": False,
}


def lookup_tool_schemas() -> list[dict[str, Any]]:
    """The function tools (OpenAI Responses shape) a store arm offers, in a fixed order."""
    return copy.deepcopy([HISTORY_SEARCH_SCHEMA, HISTORY_GET_SCHEMA])


class _SearchArguments(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    query: str
    limit: int = MAX_SEARCH_LIMIT
    cursor: str | None = None


class _GetArguments(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: str
    cursor: str | None = None


class _SearchResponse(msgspec.Struct, frozen=True):
    results: list[SearchHit]
    next_cursor: str | None


class _GetResponse(msgspec.Struct, frozen=True):
    id: str
    kind: str
    session: int
    day: int
    page: int
    pages: int
    text: str
    next_cursor: str | None


class _ErrorBody(msgspec.Struct, frozen=True):
    code: str
    message: str


class _ErrorResponse(msgspec.Struct, frozen=True):
    error: _ErrorBody


def error_response(code: Code) -> bytes:
    """The fixed error object for ``code`` (no content, no detail)."""
    message = _ERROR_MESSAGES.get(code, "lookup failed")
    return msgspec.json.encode(_ErrorResponse(error=_ErrorBody(code=code.value, message=message)))


class _CursorCodec:
    """Opaque, MAC-bound cursors. The key derives from the store's record digest, so
    cursors are deterministic for one store and useless on any other."""

    def __init__(self, store_digest: str) -> None:
        self._key = hashlib.sha256(b"efold-history-cursor-v1\0" + store_digest.encode()).digest()

    def _mac(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()[:32]

    def encode(self, kind: str, binding: str, position: int) -> str:
        payload = msgspec.json.encode([binding, position])
        body = kind + "." + base64.urlsafe_b64encode(payload).decode().rstrip("=")
        return body + "." + self._mac(body)

    def decode(self, cursor: str, kind: str, binding: str) -> int:
        parts = cursor.split(".")
        if len(parts) != 3 or parts[0] != kind:
            raise FoldError(Code.HISTORY_CURSOR_INVALID, "malformed cursor")
        body = parts[0] + "." + parts[1]
        if not hmac.compare_digest(self._mac(body), parts[2]):
            raise FoldError(Code.HISTORY_CURSOR_INVALID, "cursor MAC mismatch")
        try:
            raw = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
            bound, position = msgspec.json.decode(raw, type=tuple[str, int])
        except (ValueError, msgspec.DecodeError) as exc:
            raise FoldError(Code.HISTORY_CURSOR_INVALID, "undecodable cursor") from exc
        if bound != binding or position < 1:
            raise FoldError(Code.HISTORY_CURSOR_INVALID, "cursor bound to another request")
        return position


def _query_binding(query: str) -> str:
    return hashlib.sha256(query.encode()).hexdigest()[:32]


class LookupTool:
    """The reader's metered window onto one retained store, for one probe."""

    def __init__(self, store: HistoryStore, meter: Meter | None = None) -> None:
        self._store = store
        # Invariant: one meter per probe; never shared with another LookupTool.
        self.meter = meter if meter is not None else Meter()
        digest = store.meta("records_digest")
        if digest is None:
            raise FoldError(Code.HISTORY_STORE_INVALID, "store has no record digest")
        self._cursors = _CursorCodec(digest)

    def witness(self) -> MeterWitness:
        return self.meter.witness()

    def call(self, name: str, arguments_json: str) -> str:
        """Dispatch one tool call; return the JSON text the reader receives."""
        try:
            self.meter.reserve_call(name)
        except FoldError as refusal:
            return error_response(refusal.code).decode()
        error_code: Code | None = None
        try:
            response = self._dispatch(name, arguments_json)
        except FoldError as mistake:
            error_code = mistake.code
            response = error_response(mistake.code)
        try:
            self.meter.deliver(name, response, error_code=None if error_code is None else error_code.value)
        except FoldError as refusal:
            return error_response(refusal.code).decode()
        return response.decode()

    # -- the two tools -----------------------------------------------------------------

    def _dispatch(self, name: str, arguments_json: str) -> bytes:
        if name == HISTORY_SEARCH:
            return self._search(_decode_arguments(arguments_json, _SearchArguments))
        if name == HISTORY_GET:
            return self._get(_decode_arguments(arguments_json, _GetArguments))
        raise FoldError(Code.HISTORY_TOOL_UNKNOWN, "unknown lookup tool")

    def _search(self, args: _SearchArguments) -> bytes:
        if not 1 <= args.limit <= MAX_SEARCH_LIMIT or not 0 < len(args.query) <= MAX_QUERY_CHARS:
            raise FoldError(Code.HISTORY_ARGUMENTS_INVALID, "limit or query out of range")
        binding = _query_binding(args.query)
        offset = 0
        if args.cursor is not None:
            offset = self._cursors.decode(args.cursor, "s", binding)
        hits, more = self._store.search(args.query, limit=args.limit, offset=offset)
        next_cursor = self._cursors.encode("s", binding, offset + len(hits)) if more else None
        return msgspec.json.encode(_SearchResponse(results=hits, next_cursor=next_cursor))

    def _get(self, args: _GetArguments) -> bytes:
        record = self._store.record(args.id)
        if record is None:
            raise FoldError(Code.HISTORY_RECORD_UNKNOWN, "unknown record id")
        pages = split_pages(record.text)
        index = 0
        if args.cursor is not None:
            index = self._cursors.decode(args.cursor, "g", record.id)
            if index >= len(pages):
                raise FoldError(Code.HISTORY_CURSOR_INVALID, "cursor past the last page")
        next_cursor = self._cursors.encode("g", record.id, index + 1) if index + 1 < len(pages) else None
        return msgspec.json.encode(
            _GetResponse(
                id=record.id,
                kind=record.kind,
                session=record.session,
                day=record.day,
                page=index + 1,
                pages=len(pages),
                text=pages[index],
                next_cursor=next_cursor,
            )
        )


_Arguments = TypeVar("_Arguments", _SearchArguments, _GetArguments)


def _decode_arguments(arguments_json: str, shape: type[_Arguments]) -> _Arguments:
    try:
        return msgspec.json.decode(arguments_json, type=shape)
    except msgspec.DecodeError as exc:
        raise FoldError(Code.HISTORY_ARGUMENTS_INVALID, "arguments do not match the schema") from exc
