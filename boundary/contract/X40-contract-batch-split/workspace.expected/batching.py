"""Import batches: split (the contract: contract.json; python verify.py)."""

from __future__ import annotations


def split(total: int, max_batch: int) -> list[int]:
    if total < 0 or max_batch < 1:
        raise ValueError("total must be >= 0 and max_batch >= 1")
    if total == 0:
        return []
    count = -(-total // max_batch)
    size, extra = divmod(total, count)
    return [size + 1] * extra + [size] * (count - extra)
