"""Pagination cursor: page (the contract: contract.json; python verify.py)."""

from __future__ import annotations

from typing import Any


def page(ids: list[int], cursor: int | None, limit: int) -> dict[str, Any]:
    raise NotImplementedError("page: not written yet")
