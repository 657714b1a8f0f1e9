"""Downstream deadline: child_timeout (the contract: contract.json; python verify.py)."""

from __future__ import annotations


def child_timeout(remaining_ms: int) -> int:
    budget = remaining_ms * 4 // 5 - 50
    if budget < 100:
        return 0
    return min(budget, 2000)
