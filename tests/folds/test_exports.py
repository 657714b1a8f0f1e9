"""A probe child that restores a snapshot must not pay for the plugin loader or the
subprocess runner (every public name resolving: ``tests/test_lazy_exports.py``)."""

from __future__ import annotations

import subprocess
import sys


def test_restoring_a_snapshot_imports_little():
    code = (
        "import sys, efold.folds.snapshot, efold.folds.request\n"
        "heavy = {'importlib.metadata', 'subprocess', 'efold.folds.registry', 'efold.folds.external'}\n"
        "print(sorted(heavy & set(sys.modules)))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
