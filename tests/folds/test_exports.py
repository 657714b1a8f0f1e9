"""The package re-exports its public names lazily; every one must resolve, and a probe
child that restores a snapshot must not pay for the plugin loader or the subprocess
runner."""

from __future__ import annotations

import subprocess
import sys

import pytest

import efold.folds


def test_every_public_name_resolves():
    for name in efold.folds.__all__:
        assert getattr(efold.folds, name) is not None, name
    with pytest.raises(AttributeError):
        efold.folds.no_such_name  # noqa: B018


def test_restoring_a_snapshot_imports_little():
    code = (
        "import sys, efold.folds.snapshot, efold.folds.request\n"
        "heavy = {'importlib.metadata', 'subprocess', 'efold.folds.registry', 'efold.folds.external'}\n"
        "print(sorted(heavy & set(sys.modules)))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
