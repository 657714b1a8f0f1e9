"""Version ordering: compare (the contract: contract.json; python verify.py)."""

from __future__ import annotations


def compare(a: str, b: str) -> int:
    raise NotImplementedError("compare: not written yet")
