"""The price catalog: per-model rates loaded from TOML, and its digest.

The bundled catalog (``guard/catalog.toml``) carries the faux reader's registered rates
and a few real models; an operator catalog is loaded by path. The catalog's digest is
the sha256 of the file's bytes, so a registration binds exactly the text it priced with.

Validation is closed: unknown keys, a duplicate (provider, model), a missing class, a
negative or non-finite rate all refuse with ``catalog_invalid``. TOML floats are parsed
as ``Decimal`` (exactly); a looked-up model that is absent refuses with
``lookup_invalid_rate`` (missing pricing is never free).
"""

from __future__ import annotations

import decimal
import functools
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from efold.errors import Code
from efold.guard.errors import CatalogError, GuardError
from efold.guard.money import TOKEN_CLASSES, parse_decimal, rate_units_per_token

CATALOG_VERSION: Final = 1
_ENTRY_KEYS: Final = frozenset({"provider", "model", *TOKEN_CLASSES})


@dataclass(frozen=True)
class CatalogEntry:
    """One model's rates. ``usd_per_million`` keeps the exact decimals as written;
    ``units_per_token`` the same rates as exact fractions of a unit."""

    provider: str
    model: str
    usd_per_million: Mapping[str, decimal.Decimal]
    units_per_token: Mapping[str, Fraction]

    @property
    def max_input_class_rate(self) -> Fraction:
        """Units per token of the dearest input class (input, cache read, cache write):
        a reported input token may be any of them."""
        return max(self.units_per_token[c] for c in ("input", "cache_read", "cache_write"))

    @property
    def output_rate(self) -> Fraction:
        return self.units_per_token["output"]


@dataclass(frozen=True)
class Catalog:
    entries: Mapping[tuple[str, str], CatalogEntry]
    digest: str  # sha256 hex of the file's bytes

    def entry(self, provider: str, model: str) -> CatalogEntry:
        found = self.entries.get((provider, model))
        if found is None:
            raise GuardError(Code.LOOKUP_INVALID_RATE, "model has no price in the catalog")
        return found


def parse_catalog(data: bytes) -> Catalog:
    """Validate catalog bytes (TOML) into a ``Catalog``."""
    import tomllib  # lazily: a probe child that is handed its entry never parses TOML

    try:
        raw = tomllib.loads(data.decode("utf-8"), parse_float=decimal.Decimal)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(Code.CATALOG_INVALID, "not UTF-8 TOML") from exc
    if set(raw) - {"version", "model"}:
        raise CatalogError(Code.CATALOG_INVALID, "unknown top-level key")
    if raw.get("version") != CATALOG_VERSION:
        raise CatalogError(Code.CATALOG_INVALID, "unknown catalog version")
    models = raw.get("model", [])
    if not isinstance(models, list) or not models:
        raise CatalogError(Code.CATALOG_INVALID, "no [[model]] entries")
    entries: dict[tuple[str, str], CatalogEntry] = {}
    for item in models:
        entry = _parse_entry(item)
        key = (entry.provider, entry.model)
        if key in entries:
            raise CatalogError(Code.CATALOG_INVALID, f"duplicate model {key}")
        entries[key] = entry
    return Catalog(entries=entries, digest=hashlib.sha256(data).hexdigest())


def _parse_entry(item: object) -> CatalogEntry:
    if not isinstance(item, dict) or set(item) != _ENTRY_KEYS:
        raise CatalogError(Code.CATALOG_INVALID, f"a model needs exactly {sorted(_ENTRY_KEYS)}")
    provider, model = item["provider"], item["model"]
    if not isinstance(provider, str) or not isinstance(model, str) or not provider or not model:
        raise CatalogError(Code.CATALOG_INVALID, "provider and model must be strings")
    usd: dict[str, decimal.Decimal] = {}
    for cls in TOKEN_CLASSES:
        try:
            usd[cls] = parse_decimal(item[cls], f"{model}.{cls}")
        except GuardError as exc:
            raise CatalogError(Code.CATALOG_INVALID, exc.detail) from exc
    return CatalogEntry(
        provider=provider,
        model=model,
        usd_per_million=usd,
        units_per_token={cls: rate_units_per_token(v) for cls, v in usd.items()},
    )


def load_catalog(path: str | os.PathLike[str]) -> Catalog:
    """An operator's catalog, by path."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise CatalogError(Code.CATALOG_INVALID, "catalog file unreadable") from exc
    return parse_catalog(data)


@functools.cache
def bundled_catalog() -> Catalog:
    """The catalog shipped in the package (``guard/catalog.toml``)."""
    from importlib import resources

    data = resources.files("efold.guard").joinpath("catalog.toml").read_bytes()
    return parse_catalog(data)


def catalog_digest(path: str | os.PathLike[str] | None = None) -> str:
    """sha256 of the catalog a registration binds (the bundled one by default)."""
    return (bundled_catalog() if path is None else load_catalog(path)).digest
