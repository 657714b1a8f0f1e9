"""Retry backoff: retry_delays (the contract: contract.json; python verify.py)."""

from __future__ import annotations

FIRST_DELAY_MS = 250
GROWTH = 3
MAX_DELAY_MS = 6000


def retry_delays(attempts: int) -> list[int]:
    if attempts < 0:
        raise ValueError("attempts must be >= 0")
    delays = []
    delay = FIRST_DELAY_MS
    for _ in range(attempts):
        delays.append(min(delay, MAX_DELAY_MS))
        delay *= GROWTH
    return delays
