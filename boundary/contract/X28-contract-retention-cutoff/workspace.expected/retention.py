"""Retention cutoff: should_delete (the contract: contract.json; python verify.py)."""

from __future__ import annotations

from datetime import date

RETENTION_DAYS = 400


def should_delete(created: str, today: str) -> bool:
    age = (date.fromisoformat(today) - date.fromisoformat(created)).days
    if age < 0:
        raise ValueError("created is after today")
    return age > RETENTION_DAYS
