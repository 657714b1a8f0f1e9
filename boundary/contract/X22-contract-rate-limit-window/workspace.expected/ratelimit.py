"""Rate limit window: admit (the contract: contract.json; python verify.py)."""

from __future__ import annotations

WINDOW_SECONDS = 10
LIMIT = 5


def admit(history: list[float], now: float) -> bool:
    recent = [t for t in history if now - WINDOW_SECONDS < t <= now]
    return len(recent) < LIMIT
