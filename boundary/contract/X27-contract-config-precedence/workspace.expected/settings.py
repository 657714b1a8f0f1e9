"""Settings precedence: resolve (the contract: contract.json; python verify.py)."""

from __future__ import annotations

from typing import Any


def resolve(defaults: dict[str, Any], file: dict[str, Any], env: dict[str, Any],
            cli: dict[str, Any]) -> dict[str, Any]:
    settings = dict(defaults)
    for layer in (file, env):
        for key, value in layer.items():
            if key in defaults:
                settings[key] = value
    for key, value in cli.items():
        if key in defaults:
            settings[key] = defaults[key] if value is None else value
    return settings
