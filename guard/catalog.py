"""The price catalog: per-model rates loaded from TOML, and its digest.

The bundled catalog (``guard/catalog.toml``) carries the faux reader's registered rates
and a few real models; an operator catalog is loaded by path. The catalog's digest is
the sha256 of the file's bytes, so a registration binds exactly the text it priced with.

Validation is closed: unknown keys, a duplicate (provider, model), a missing class, a
negative or non-finite rate, a rate whose decimal exponent lies outside
``±RATE_EXPONENT_LIMIT`` (its exact fraction would take ``10**|exponent|``: ``1e999999999``
would hang the parse) all refuse with ``catalog_invalid``, as does a file TOML cannot
read (too deep, or an integer past Python's digit limit). TOML floats are parsed
as ``Decimal`` (exactly); a looked-up model that is absent refuses with
``lookup_invalid_rate`` (missing pricing is never free).

Two optional parts of an entry (new in the schema; version 1 still, since a reader that
does not know them refuses them as unknown keys, which fails closed):

- ``[[model.input_tier]]``: input-size price tiers. A call is priced at the highest tier
  whose ``above_tokens`` its reported input (cached input included: reported input
  already counts it) *strictly* exceeds, else at the base rates. Thresholds are positive
  integers in strictly increasing order, each tier carries all four classes; a bad
  threshold or order refuses with ``catalog_tiers_invalid``.
- ``snapshots``: dated names the provider may report for this model (a non-empty list of
  distinct strings, none another entry's model or another entry's snapshot).
- ``context_window``: the most input tokens the model (or the server hosting it) takes.
  It may only *tighten* the input envelope I of a route (``CatalogEntry.input_envelope``),
  never widen it: a positive integer; the envelope is ``min(I, context_window)``.
- ``service_tiers``: whether the provider has service tiers (a boolean). Absent means
  ``true``, the conservative reading and what every catalog written before the key
  existed meant (so such a catalog, its digest unchanged, prices exactly as before):
  a response that reports no tier is priced at the dearest multiplier (x2). ``false``
  (a local server, which has no tiers and never reports one): an absent tier is the
  base rate (x1). A reported tier is priced as reported either way, and Rmax keeps the
  factor 2 (``pricing``).
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from efold.errors import Code
from efold.guard.errors import CatalogError, GuardError
from efold.guard.money import TOKEN_CLASSES, parse_decimal, rate_units_per_token
from efold.input_files import CATALOG_LIMIT, InputFileError, read_input

CATALOG_VERSION: Final = 1
WILDCARD: Final = "*"  # an entry's model: every model of its provider (``Catalog.entry``)
RATE_EXPONENT_LIMIT: Final = 64  # far past any price; keeps every exact rate small
_ENTRY_KEYS: Final = frozenset({"provider", "model", *TOKEN_CLASSES})
_OPTIONAL_ENTRY_KEYS: Final = frozenset({"input_tier", "snapshots", "context_window",
                                         "service_tiers"})
_TIER_KEYS: Final = frozenset({"above_tokens", *TOKEN_CLASSES})
_INPUT_CLASSES: Final = ("input", "cache_read", "cache_write")


def max_input_class_rate(rates: Mapping[str, Fraction]) -> Fraction:
    """Units per token of the dearest input class (input, cache read, cache write) of
    one rate set: a reported input token may be any of them."""
    return max(rates[c] for c in _INPUT_CLASSES)


@dataclass(frozen=True)
class InputTier:
    """Rates that apply once reported input exceeds ``above_tokens``."""

    above_tokens: int
    usd_per_million: Mapping[str, decimal.Decimal]
    units_per_token: Mapping[str, Fraction]


@dataclass(frozen=True)
class CatalogEntry:
    """One model's rates. ``usd_per_million`` keeps the exact base decimals as written;
    ``units_per_token`` the same rates as exact fractions of a unit."""

    provider: str
    model: str
    usd_per_million: Mapping[str, decimal.Decimal]
    units_per_token: Mapping[str, Fraction]
    # Invariant: strictly increasing by above_tokens (checked at parse), so the last tier
    # the input exceeds is the highest one.
    input_tiers: tuple[InputTier, ...] = ()
    snapshots: frozenset[str] = frozenset()
    context_window: int | None = None  # None: the model takes at least I
    service_tiers: bool = True  # False: an absent reported tier is x1 (module docstring)

    def input_envelope(self, registered: int) -> int:
        """The envelope of a route to this model: the registered I, tightened (never
        widened) by the model's context window."""
        return registered if self.context_window is None else min(registered, self.context_window)

    @property
    def max_input_class_rate(self) -> Fraction:
        """The dearest input class of the *base* rates (Rmax uses ``worst_rates_within``)."""
        return max_input_class_rate(self.units_per_token)

    @property
    def output_rate(self) -> Fraction:
        """The base output rate (Rmax uses ``worst_rates_within``)."""
        return self.units_per_token["output"]

    def rates_for_input(self, input_tokens: int) -> Mapping[str, Fraction]:
        """Units per token for a call that reported ``input_tokens`` of input (cached
        included): the highest tier with ``input_tokens > above_tokens``, else base."""
        rates = self.units_per_token
        for tier in self.input_tiers:
            if input_tokens <= tier.above_tokens:
                break
            rates = tier.units_per_token
        return rates

    def worst_rates_within(self, input_envelope: int) -> Mapping[str, Fraction]:
        """Per class, the dearest rate any call with input <= ``input_envelope`` can be
        priced at: the base and every tier with ``above_tokens < input_envelope`` (a
        tier at or above the envelope can never be strictly exceeded)."""
        reachable = [self.units_per_token] + [
            t.units_per_token for t in self.input_tiers if t.above_tokens < input_envelope
        ]
        return {cls: max(rates[cls] for rates in reachable) for cls in TOKEN_CLASSES}

    def accepts_model(self, name: str) -> bool:
        """True when ``name`` is this model or one of its listed dated snapshots."""
        return name == self.model or name in self.snapshots


@dataclass(frozen=True)
class Catalog:
    entries: Mapping[tuple[str, str], CatalogEntry]
    digest: str  # sha256 hex of the file's bytes

    def entry(self, provider: str, model: str) -> CatalogEntry:
        """``model``'s entry; else the provider's wildcard entry (``model = "*"``: every
        model of the provider at its rates) named ``model``; else ``lookup_invalid_rate``."""
        found = self.entries.get((provider, model))
        if found is None and (wild := self.entries.get((provider, WILDCARD))) is not None:
            found = dataclasses.replace(wild, model=model)
        if found is None:
            raise GuardError(Code.LOOKUP_INVALID_RATE, "model has no price in the catalog")
        return found


def parse_catalog(data: bytes) -> Catalog:
    """Validate catalog bytes (TOML) into a ``Catalog``."""
    import tomllib  # lazily: a probe child that is handed its entry never parses TOML

    try:
        raw = tomllib.loads(data.decode("utf-8"), parse_float=decimal.Decimal)
    # UnicodeDecodeError and TOMLDecodeError are ValueErrors, and so is tomllib's
    # refusal of an integer past the int-string digit limit; RecursionError: too deep.
    except (ValueError, RecursionError) as exc:
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
    _check_snapshots_are_unambiguous(entries.values())
    return Catalog(entries=entries, digest=hashlib.sha256(data).hexdigest())


def _parse_entry(item: object) -> CatalogEntry:
    if not isinstance(item, dict) or not _ENTRY_KEYS <= set(item) <= (
            _ENTRY_KEYS | _OPTIONAL_ENTRY_KEYS):
        raise CatalogError(
            Code.CATALOG_INVALID,
            f"a model needs {sorted(_ENTRY_KEYS)} and may add {sorted(_OPTIONAL_ENTRY_KEYS)}, "
            "nothing else",
        )
    provider, model = item["provider"], item["model"]
    if not isinstance(provider, str) or not isinstance(model, str) or not provider or not model:
        raise CatalogError(Code.CATALOG_INVALID, "provider and model must be strings")
    usd = _parse_rates(item, model)
    return CatalogEntry(
        provider=provider,
        model=model,
        usd_per_million=usd,
        units_per_token=_units(usd),
        input_tiers=_parse_tiers(item["input_tier"], model) if "input_tier" in item else (),
        snapshots=(_parse_snapshots(item["snapshots"], model) if "snapshots" in item
                   else frozenset()),
        context_window=(_parse_context_window(item["context_window"], model)
                        if "context_window" in item else None),
        service_tiers=_parse_service_tiers(item.get("service_tiers", True), model),
    )


def _parse_service_tiers(raw: object, model: str) -> bool:
    if not isinstance(raw, bool):
        raise CatalogError(Code.CATALOG_INVALID, f"{model}: service_tiers must be true or false")
    return raw


def _parse_context_window(raw: object, model: str) -> int:
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 1:
        raise CatalogError(Code.CATALOG_INVALID, f"{model}: context_window must be a positive integer")
    return raw


def _parse_rates(table: Mapping[str, object], what: str) -> dict[str, decimal.Decimal]:
    usd: dict[str, decimal.Decimal] = {}
    for cls in TOKEN_CLASSES:
        value = table[cls]
        try:
            if not isinstance(value, str | int | decimal.Decimal):
                raise GuardError(Code.LOOKUP_INVALID_RATE, f"{what}.{cls}: not a decimal")
            usd[cls] = parse_decimal(value, f"{what}.{cls}")
        except GuardError as exc:
            raise CatalogError(Code.CATALOG_INVALID, exc.detail) from exc
        exponent = usd[cls].as_tuple().exponent  # an int: parse_decimal refused non-finite
        if not isinstance(exponent, int) or abs(exponent) > RATE_EXPONENT_LIMIT:
            raise CatalogError(Code.CATALOG_INVALID, f"{what}.{cls}: exponent out of range")
    return usd


def _units(usd: Mapping[str, decimal.Decimal]) -> dict[str, Fraction]:
    return {cls: rate_units_per_token(v) for cls, v in usd.items()}


def _parse_tiers(raw: object, model: str) -> tuple[InputTier, ...]:
    # An array of tables; an empty one is refused so that "no tiers" has one spelling.
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise CatalogError(Code.CATALOG_INVALID,
                           f"{model}: input_tier must be an array of [[model.input_tier]]")
    if not raw:
        raise CatalogError(Code.CATALOG_TIERS_INVALID, f"{model}: empty input_tier list")
    tiers: list[InputTier] = []
    for table in raw:
        if set(table) != _TIER_KEYS:
            raise CatalogError(Code.CATALOG_INVALID,
                               f"{model}: an input tier needs exactly {sorted(_TIER_KEYS)}")
        above = table["above_tokens"]
        if not isinstance(above, int) or isinstance(above, bool) or above < 1:
            raise CatalogError(Code.CATALOG_TIERS_INVALID,
                               f"{model}: above_tokens must be a positive integer")
        if tiers and above <= tiers[-1].above_tokens:
            raise CatalogError(Code.CATALOG_TIERS_INVALID,
                               f"{model}: input tiers must strictly increase by above_tokens")
        usd = _parse_rates(table, f"{model}.input_tier[{above}]")
        tiers.append(InputTier(above, usd_per_million=usd, units_per_token=_units(usd)))
    return tuple(tiers)


def _parse_snapshots(raw: object, model: str) -> frozenset[str]:
    if not isinstance(raw, list) or not raw:
        raise CatalogError(Code.CATALOG_INVALID, f"{model}: snapshots must be a non-empty list")
    if not all(isinstance(s, str) and s for s in raw):
        raise CatalogError(Code.CATALOG_INVALID, f"{model}: snapshots must be non-empty strings")
    names = frozenset(raw)
    if len(names) != len(raw) or model in names:
        raise CatalogError(Code.CATALOG_INVALID,
                           f"{model}: snapshots must be distinct and differ from the model")
    return names


def _check_snapshots_are_unambiguous(entries: Iterable[CatalogEntry]) -> None:
    """A reported name must point at one entry only: a snapshot that is another entry's
    model, or that two entries list, would let one model be priced as another."""
    entries = list(entries)
    models = {e.model for e in entries}
    claimed: set[str] = set()
    for e in entries:
        if e.snapshots & models or e.snapshots & claimed:
            raise CatalogError(Code.CATALOG_INVALID,
                               f"{e.model}: a snapshot names another entry's model or snapshot")
        claimed |= e.snapshots


def load_catalog(path: str | os.PathLike[str]) -> Catalog:
    """An operator's catalog, by path: a regular file of at most ``CATALOG_LIMIT`` bytes
    (``input_files.read_input``: a device or a FIFO refuses with its own code)."""
    try:
        data = read_input(path, what="catalog", limit=CATALOG_LIMIT)
    except InputFileError as exc:
        if exc.code is not Code.INPUT_FILE_UNREADABLE:
            raise
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
