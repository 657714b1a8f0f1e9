"""Shared sizing of the reliability suite (see conftest.py for the long-run command)."""

from __future__ import annotations

import os

LONG = os.environ.get("EFOLD_RELIABILITY_LONG", "") not in ("", "0")


def budget(ci: int, long: int) -> int:
    """``long`` under the documented long run, ``ci`` otherwise."""
    return long if LONG else ci
