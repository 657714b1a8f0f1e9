"""Error statuses: status_for (the contract: contract.json; python verify.py)."""

from __future__ import annotations

STATUS = {"not_found": 404, "conflict": 409, "validation": 422, "rate_limited": 429,
          "unavailable": 503}


def status_for(error: str) -> int:
    return STATUS.get(error, 500)
