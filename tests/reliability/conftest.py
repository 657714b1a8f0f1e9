"""The reliability suite: every promise of docs/reliability.md, proven by fault injection.

CI runs a bounded subset; the long run is one documented command::

    EFOLD_RELIABILITY_LONG=1 python -m pytest -q tests/reliability

Tests size themselves with ``reliability_kit.budget(ci, long)``; the pilot helpers of
``tests/pilot`` (``efold_pilot_kit``) are importable here too.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "pilot"))
