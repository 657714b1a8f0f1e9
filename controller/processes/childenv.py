"""The environment a child starts with: an allowlist, never the controller's whole
environment. Credentials, proxies, PYTHON* and tool variables stay behind; ``CI`` keeps
its presence (paid routes refuse where it is set, even empty)."""

from __future__ import annotations

import os
from collections.abc import Mapping

ALLOWED = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "CI")


def child_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    source = os.environ if environ is None else environ
    env = {name: source[name] for name in ALLOWED if name in source}
    env.setdefault("PATH", os.defpath)
    return env
