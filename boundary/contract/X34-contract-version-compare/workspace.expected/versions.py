"""Version ordering: compare (the contract: contract.json; python verify.py)."""

from __future__ import annotations


def _parse(version: str) -> tuple[tuple[int, ...], list[str]]:
    core, dash, pre = version.split("+", 1)[0].partition("-")
    numbers = tuple(int(part) for part in core.split("."))
    if len(numbers) != 3:
        raise ValueError(f"{version!r} is not MAJOR.MINOR.PATCH")
    return numbers, pre.split(".") if dash else []


def _pre_key(identifiers: list[str]) -> list[tuple[int, int, str]]:
    return [(0, int(i), "") if i.isdigit() else (1, 0, i) for i in identifiers]


def compare(a: str, b: str) -> int:
    (core_a, pre_a), (core_b, pre_b) = _parse(a), _parse(b)
    if core_a != core_b:
        return -1 if core_a < core_b else 1
    if not pre_a or not pre_b:
        return (not pre_a) - (not pre_b)
    key_a, key_b = _pre_key(pre_a), _pre_key(pre_b)
    return (key_a > key_b) - (key_a < key_b)
