"""Retention cutoff: should_delete (the contract: contract.json; python verify.py)."""

from __future__ import annotations


def should_delete(created: str, today: str) -> bool:
    raise NotImplementedError("should_delete: not written yet")
