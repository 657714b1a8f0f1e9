"""Idempotency keys: replay_decision (the contract: contract.json; python verify.py)."""

from __future__ import annotations

from typing import Any


def replay_decision(stored: dict[str, Any] | None, body_sha256: str, now: int) -> str:
    raise NotImplementedError("replay_decision: not written yet")
