"""Retry backoff: retry_delays (the contract: contract.json; python verify.py)."""

from __future__ import annotations


def retry_delays(attempts: int) -> list[int]:
    raise NotImplementedError("retry_delays: not written yet")
