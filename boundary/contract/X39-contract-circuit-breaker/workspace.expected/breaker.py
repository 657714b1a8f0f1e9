"""Circuit breaker: state_at (the contract: contract.json; python verify.py)."""

from __future__ import annotations

from typing import Any

THRESHOLD = 3
COOL_DOWN_SECONDS = 30


def state_at(outcomes: list[list[Any]], now: float) -> str:
    state, streak, opened = "closed", 0, 0.0
    for at, outcome in outcomes:
        if state == "open" and at - opened >= COOL_DOWN_SECONDS:
            state = "half-open"
        if state == "open":
            continue  # calls are rejected while open: they have no outcome
        if outcome == "ok":
            state, streak = "closed", 0
        elif state == "half-open":
            state, opened = "open", at
        else:
            streak += 1
            if streak >= THRESHOLD:
                state, streak, opened = "open", 0, at
    if state == "open" and now - opened >= COOL_DOWN_SECONDS:
        return "half-open"
    return state
