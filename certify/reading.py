"""Reading a fold's store the way a reader does: through ``LookupTool.call`` only, with
the reply parsed from the JSON text the reader would receive."""

from __future__ import annotations

import json
from typing import Any, Final

from efold.folds.lookup import LookupTool

SEARCH_PAGE: Final = 10


def whole_record(tool: LookupTool, record_id: str) -> str | None:
    """Every page of ``record_id`` joined, or None when the tool answers an error (an
    unknown id, an exhausted meter) or a record with another id."""
    pages: list[str] = []
    cursor: str | None = None
    while True:
        arguments: dict[str, str] = {"id": record_id}
        if cursor is not None:
            arguments["cursor"] = cursor
        reply = json.loads(tool.call("history_get", json.dumps(arguments)))
        if "error" in reply or reply.get("id") != record_id:
            return None
        pages.append(reply["text"])
        cursor = reply["next_cursor"]
        if cursor is None:
            return "".join(pages)


def search(tool: LookupTool, query: str, *, at_most: int) -> list[dict[str, Any]]:
    """Up to ``at_most`` hits for ``query``, page after page (an error ends the list)."""
    hits: list[dict[str, Any]] = []
    cursor: str | None = None
    while len(hits) < at_most:
        reply = json.loads(tool.call("history_search", json.dumps(
            {"query": query, "limit": SEARCH_PAGE, "cursor": cursor})))
        if "error" in reply:
            break
        hits += reply["results"]
        cursor = reply["next_cursor"]
        if cursor is None:
            break
    return hits[:at_most]
