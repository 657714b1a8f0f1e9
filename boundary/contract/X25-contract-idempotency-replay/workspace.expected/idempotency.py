"""Idempotency keys: replay_decision (the contract: contract.json; python verify.py)."""

from __future__ import annotations

from typing import Any

TTL_SECONDS = 86_400


def replay_decision(stored: dict[str, Any] | None, body_sha256: str, now: int) -> str:
    if stored is None or now - stored["at"] >= TTL_SECONDS:
        return "process"
    if stored["body_sha256"] != body_sha256:
        return "conflict"
    return "replay"
