"""Settings precedence: resolve (the contract: contract.json; python verify.py)."""

from __future__ import annotations

from typing import Any


def resolve(defaults: dict[str, Any], file: dict[str, Any], env: dict[str, Any], cli: dict[str, Any]) -> dict[str, Any]:
    raise NotImplementedError("resolve: not written yet")
