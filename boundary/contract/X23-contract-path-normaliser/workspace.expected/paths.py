"""Storage path normaliser: normalize (the contract: contract.json; python verify.py)."""

from __future__ import annotations


def normalize(path: str) -> str:
    parts: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not parts:
                raise ValueError(f"{path!r} climbs above the root")
            parts.pop()
        else:
            parts.append(segment)
    return "/" + "/".join(parts)
