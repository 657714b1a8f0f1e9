"""Children importing the lease do not pay for the authorization code (every public
name resolving: ``tests/test_lazy_exports.py``)."""

from __future__ import annotations

import subprocess
import sys


def test_lease_import_is_light() -> None:
    code = ("import sys, efold.registry.lease\n"
            "heavy = [m for m in ('cryptography', 'sqlite3', 'click', 'trio', 'httpx')"
            " if m in sys.modules]\n"
            "print(','.join(heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == ""
