"""Fixtures of the pilot tests (helpers live in efold_pilot_kit)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from efold_pilot_kit import small_registration

from efold.controller.campaigns.registration import Registration


@pytest.fixture
def small() -> tuple[Registration, bytes]:
    return small_registration()
