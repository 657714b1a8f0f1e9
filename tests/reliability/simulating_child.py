"""``python -I simulating_child.py WHAT ARGS...``: the production worker entry (a child,
or the fork-server template) with ``EFOLD_ISOLATION_SIMULATE=WHAT`` set, so that the
isolation named (``network``, ``writes`` or both) reports itself unavailable: the
controller's allowlisted child environment never carries it."""

from __future__ import annotations

import os
import runpy
import sys

from efold.isolation import SIMULATE_VAR

os.environ[SIMULATE_VAR] = sys.argv[1]
sys.argv = [sys.argv[0], *sys.argv[2:]]
runpy.run_module("efold.worker", run_name="__main__")
