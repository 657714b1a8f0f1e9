"""guard: the only path to a model.

Money units and the price catalog, the frozen request contract, payload accounting
(H, U_k), the permit protocol (admit / consume / settle / stop), the one guarded send
and usage settlement. ``guard/wire`` holds the per-API adapters and transports.

The reader-facing call::

    guard = Guard(contract, catalog_entry, permit_source, transport)
    result = guard.request(payload)      # -> GuardResult (outcome, code, output items...)

Everything here is synchronous and imports only the standard library and msgspec;
httpx is imported by ``HttpTransport`` when it first sends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from efold.lazy import lazy_exports

if TYPE_CHECKING:
    from efold.guard.accounting import PayloadShape as PayloadShape
    from efold.guard.accounting import count_schema_properties as count_schema_properties
    from efold.guard.accounting import input_budget as input_budget
    from efold.guard.catalog import Catalog as Catalog
    from efold.guard.catalog import CatalogEntry as CatalogEntry
    from efold.guard.catalog import bundled_catalog as bundled_catalog
    from efold.guard.catalog import catalog_digest as catalog_digest
    from efold.guard.catalog import load_catalog as load_catalog
    from efold.guard.catalog import parse_catalog as parse_catalog
    from efold.guard.contract import FAUX_BASE_URL as FAUX_BASE_URL
    from efold.guard.contract import HISTORY_TOOLS as HISTORY_TOOLS
    from efold.guard.contract import INPUT_ENVELOPE as INPUT_ENVELOPE
    from efold.guard.contract import MAX_OUTPUT as MAX_OUTPUT
    from efold.guard.contract import MAX_REQUESTS as MAX_REQUESTS
    from efold.guard.contract import Contract as Contract
    from efold.guard.contract import WireApi as WireApi
    from efold.guard.errors import CatalogError as CatalogError
    from efold.guard.errors import GuardError as GuardError
    from efold.guard.errors import OwnAbort as OwnAbort
    from efold.guard.errors import PolicyViolation as PolicyViolation
    from efold.guard.errors import SendFailed as SendFailed
    from efold.guard.errors import StreamLost as StreamLost
    from efold.guard.errors import TransportFailure as TransportFailure
    from efold.guard.estimate import ASSUMED_SCENARIO as ASSUMED_SCENARIO
    from efold.guard.estimate import EstimateScenario as EstimateScenario
    from efold.guard.estimate import expected_cost_units as expected_cost_units
    from efold.guard.estimate import expected_rounds as expected_rounds
    from efold.guard.estimate import expected_slot_units as expected_slot_units
    from efold.guard.ledger import PermitLedger as PermitLedger
    from efold.guard.ledger import SettleKind as SettleKind
    from efold.guard.money import TIER_MULTIPLIERS as TIER_MULTIPLIERS
    from efold.guard.money import units_to_usd as units_to_usd
    from efold.guard.money import usd_to_units as usd_to_units
    from efold.guard.permits import CONTINUABLE_CODES as CONTINUABLE_CODES
    from efold.guard.permits import AdmitRequest as AdmitRequest
    from efold.guard.permits import OutcomeKind as OutcomeKind
    from efold.guard.permits import Permit as Permit
    from efold.guard.permits import PermitSource as PermitSource
    from efold.guard.permits import Refusal as Refusal
    from efold.guard.permits import Settlement as Settlement
    from efold.guard.permits import UsageRecord as UsageRecord
    from efold.guard.permits import assert_real_source as assert_real_source
    from efold.guard.policy import contract_policy as contract_policy
    from efold.guard.pricing import Pricer as Pricer
    from efold.guard.pricing import price_units as price_units
    from efold.guard.pricing import pricer_for as pricer_for
    from efold.guard.pricing import rmax_for_reader as rmax_for_reader
    from efold.guard.pricing import rmax_units as rmax_units
    from efold.guard.request import Guard as Guard
    from efold.guard.request import GuardResult as GuardResult
    from efold.guard.transport import SendTicket as SendTicket
    from efold.guard.transport import Transport as Transport
    from efold.guard.transport import WireRequest as WireRequest
    from efold.guard.transport import WireResponse as WireResponse
    from efold.guard.wire import FauxReply as FauxReply
    from efold.guard.wire import FauxTransport as FauxTransport
    from efold.guard.wire import HttpTransport as HttpTransport

__getattr__, __dir__ = lazy_exports(__name__, __file__)
