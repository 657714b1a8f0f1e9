"""Caller-supplied request options: the guard accepts none that change how it sends.

The guard installs its own single-shot transport and builds its own headers, so a
caller option that would substitute a fetch/transport, add headers or environment,
or configure retries is refused before anything else happens. An *empty* headers or
env mapping is harmless and accepted; a fetch/transport key refuses even when its
value is ``None`` (its mere presence means a caller tried to route the send).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from efold.errors import Code
from efold.guard.errors import PolicyViolation

_FETCH_KEYS: Final = frozenset({"fetch", "transport", "client", "http_client", "session",
                                "base_url", "url", "proxy", "proxies", "mounts"})
_RETRY_KEYS: Final = frozenset({"retry", "retries", "max_retries", "retry_profile",
                                "retry_budget", "outage_profile", "backoff"})
_EMPTY_OK_KEYS: Final = frozenset({"headers", "extra_headers", "env"})


def check_options(options: Mapping[str, object] | None) -> None:
    """Raise ``PolicyViolation`` for any option the guard does not accept."""
    if not options:
        return
    for key in sorted(options):
        value = options[key]
        if key in _FETCH_KEYS:
            raise PolicyViolation(Code.LOOKUP_EXTERNAL_FETCH_FORBIDDEN, f"option {key!r}")
        if key in _RETRY_KEYS:
            raise PolicyViolation(Code.LOOKUP_RETRY_PROFILE_FORBIDDEN, f"option {key!r}")
        if key in _EMPTY_OK_KEYS:
            if value is None or (isinstance(value, Mapping) and not value):
                continue
            raise PolicyViolation(Code.LOOKUP_OPTION_FORBIDDEN, f"non-empty option {key!r}")
        raise PolicyViolation(Code.LOOKUP_OPTION_FORBIDDEN, f"unknown option {key!r}")
