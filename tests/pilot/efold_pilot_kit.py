"""Helpers for the pilot tests: small registered campaigns, the faulty-child program."""

from __future__ import annotations

import sys
from pathlib import Path

from efold.controller.campaign import parse_campaign
from efold.controller.registration import (
    Registration,
    compute_registration,
    encode_registration,
)

HERE = Path(__file__).resolve().parent

SMALL = """
name = "small"
suite = "original"
roles = ["native", "store"]
probe_limit = 2
selection_seed = 7
schedule_seed = 7
cap_usd = "{cap}"
"""


def small_registration(cap: str = "60.00", roles: str | None = None) -> tuple[Registration, bytes]:
    text = SMALL.format(cap=cap)
    if roles is not None:
        text = text.replace('roles = ["native", "store"]', f"roles = {roles}")
    raw = text.encode()
    reg = compute_registration(parse_campaign(text), raw)
    return reg, encode_registration(reg)


def faulty_program(mode: str, marker: Path) -> tuple[str, ...]:
    return (sys.executable, "-I", str(HERE / "faulty_child.py"), mode, str(marker))
