"""Rate limit window: admit (the contract: contract.json; python verify.py)."""

from __future__ import annotations


def admit(history: list[float], now: float) -> bool:
    raise NotImplementedError("admit: not written yet")
