"""Support desk hours: is_open (the contract: contract.json; python verify.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

DESK = timezone(timedelta(hours=2))


def is_open(timestamp: str) -> bool:
    moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00")).astimezone(DESK)
    return moment.weekday() < 6 and 8 <= moment.hour < 18
