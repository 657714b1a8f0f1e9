"""Username rules: valid_username (the contract: contract.json; python verify.py)."""

from __future__ import annotations

import re

_USERNAME = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")


def valid_username(name: str) -> bool:
    return 4 <= len(name) <= 20 and _USERNAME.fullmatch(name) is not None
