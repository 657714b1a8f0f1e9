"""Finance export line: csv_line (the contract: contract.json; python verify.py)."""

from __future__ import annotations


def _field(value: str) -> str:
    if value[:1] in ("=", "+", "-", "@"):
        value = "'" + value
    if any(c in value for c in ';"\n'):
        value = '"' + value.replace('"', '""') + '"'
    return value


def csv_line(fields: list[str]) -> str:
    return ";".join(_field(f) for f in fields)
