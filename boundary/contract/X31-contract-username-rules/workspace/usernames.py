"""Username rules: valid_username (the contract: contract.json; python verify.py)."""

from __future__ import annotations


def valid_username(name: str) -> bool:
    raise NotImplementedError("valid_username: not written yet")
