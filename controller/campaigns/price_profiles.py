"""The plan's workload priced on other readers: a screening alternate and a sensitivity
profile on a dearer model, each beside the registered reader and never pooled with it.

``plan --screening MODEL --sensitivity MODEL`` (each repeatable) prices the same slots,
checkpoints and summary and judge lines with ``plan.plan_estimate``'s one formula, only
the reader changed. A model is priced by the reader profile's own catalog when it has
the model, else by the bundled one; a model neither prices stays **unknown**: its figures
are null and it says why, never zero, and the plan is still printed. Nothing is sent and
no credential is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Literal

import msgspec

from efold.controller.campaigns.plan import plan_estimate
from efold.controller.campaigns.profiles import profile_catalog
from efold.controller.campaigns.registration import Registration
from efold.errors import Code, EfoldError
from efold.guard.catalog import Catalog
from efold.protocol.records import Plan

__all__ = ["PriceProfile", "parse_model", "price_profiles"]

ProfileKind = Literal["primary", "screening", "sensitivity"]


class PriceProfile(msgspec.Struct, frozen=True):
    """One reader's price of the plan (integer units; null when a price is unknown)."""

    kind: ProfileKind
    reader: str  # provider/model
    faux: bool  # faux units (the faux reader), else USD
    expected_units: int | None
    per_slot_units: int | None
    unknown: str | None = None  # why the figures are null


def parse_model(text: str) -> tuple[str, str]:
    """``provider/model``; ``ValueError`` otherwise."""
    provider, sep, model = text.partition("/")
    if not sep or not provider or not model or text != text.strip():
        raise ValueError(f"{text!r}: give a model as provider/model (for example "
                         "openai/gpt-5-mini)")
    return provider, model


def price_profiles(reg: Registration, plan: Plan, infeasible: AbstractSet[str], *,
                   screening: Sequence[str] = (),
                   sensitivity: Sequence[str] = ()) -> list[PriceProfile]:
    """The registered reader first, then each screening model, then each sensitivity
    model, in the order given."""
    reader = reg.campaign.reader
    asked: list[tuple[ProfileKind, str]] = [
        ("primary", f"{reader.provider}/{reader.model}"),
        *(("screening", m) for m in screening), *(("sensitivity", m) for m in sensitivity)]
    return [_priced(reg, plan, infeasible, kind, model) for kind, model in asked]


def _priced(reg: Registration, plan: Plan, infeasible: AbstractSet[str],
            kind: ProfileKind, name: str) -> PriceProfile:
    provider, model = parse_model(name)
    reader = reg.campaign.reader
    alternate = msgspec.structs.replace(reader, provider=provider, model=model)
    if reader.catalog is not None and not _prices(profile_catalog(reader), provider, model):
        alternate = msgspec.structs.replace(alternate, catalog=None)  # the bundled one
    if not _prices(profile_catalog(alternate), provider, model):
        return PriceProfile(kind, name, provider == "faux", None, None,
                            unknown="no price in the reader's catalog or the bundled one")
    campaign = msgspec.structs.replace(reg.campaign, reader=alternate)
    try:
        est = plan_estimate(msgspec.structs.replace(reg, campaign=campaign), plan, infeasible)
    except EfoldError as exc:
        if exc.code is not Code.LOOKUP_INVALID_RATE:
            raise
        return PriceProfile(kind, name, provider == "faux", None, None,
                            unknown=exc.detail or "a line has no price")
    return PriceProfile(kind, name, provider == "faux", est.expected_units,
                        est.expected_units_per_slot)


def _prices(catalog: Catalog, provider: str, model: str) -> bool:
    try:
        catalog.entry(provider, model)
    except EfoldError:
        return False
    return True
