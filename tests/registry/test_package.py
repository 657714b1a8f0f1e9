"""registry/__init__: every public name resolves, and children importing the lease do
not pay for the authorization code."""

from __future__ import annotations

import importlib
import subprocess
import sys

import efold.registry as registry


def test_every_public_name_resolves_to_its_defining_module() -> None:
    for name in registry.__all__:
        module = importlib.import_module(registry._EXPORTS[name])
        assert getattr(registry, name) is getattr(module, name), name
    assert set(registry.__all__) <= set(dir(registry))


def test_lease_import_is_light() -> None:
    code = ("import sys, efold.registry.lease\n"
            "heavy = [m for m in ('cryptography', 'sqlite3', 'click', 'trio', 'httpx')"
            " if m in sys.modules]\n"
            "print(','.join(heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == ""
