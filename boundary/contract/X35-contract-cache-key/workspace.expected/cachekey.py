"""Response cache key: cache_key (the contract: contract.json; python verify.py)."""

from __future__ import annotations


def cache_key(path: str, query: list[list[str]]) -> str:
    pairs = sorted((name.lower(), value) for name, value in query
                   if not name.lower().startswith("utm_"))
    if not pairs:
        return path
    return path + "?" + "&".join(f"{name}={value}" for name, value in pairs)
