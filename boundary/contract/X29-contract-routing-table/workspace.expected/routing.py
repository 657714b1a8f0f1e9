"""Request routing: route (the contract: contract.json; python verify.py)."""

from __future__ import annotations

ROUTES = {
    "/api": "gateway",
    "/api/orders": "orders-v1",
    "/api/orders/v2": "orders-v2",
    "/static": "cdn",
}


def route(path: str) -> str:
    best = None
    for prefix in ROUTES:
        if path == prefix or path.startswith(prefix + "/"):
            if best is None or len(prefix) > len(best):
                best = prefix
    return "not-found" if best is None else ROUTES[best]
