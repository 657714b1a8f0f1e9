"""Pagination cursor: page (the contract: contract.json; python verify.py)."""

from __future__ import annotations

from typing import Any


def page(ids: list[int], cursor: int | None, limit: int) -> dict[str, Any]:
    if limit < 1:
        raise ValueError("limit must be >= 1")
    after = sorted(i for i in ids if cursor is None or i > cursor)
    items = after[:limit]
    following = items[-1] if len(items) == limit else None
    return {"items": items, "next": following}
