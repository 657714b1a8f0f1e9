"""Storage path normaliser: normalize (the contract: contract.json; python verify.py)."""

from __future__ import annotations


def normalize(path: str) -> str:
    raise NotImplementedError("normalize: not written yet")
