"""Picking queue order: sort_orders (the contract: contract.json; python verify.py)."""

from __future__ import annotations

from typing import Any


def sort_orders(orders: list[dict[str, Any]]) -> list[str]:
    ranked = sorted(orders, key=lambda o: (-o["priority"], o["created"], o["id"]))
    return [o["id"] for o in ranked]
