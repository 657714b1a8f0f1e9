"""Inventory feasibility from a *prepared* checkpoint: data in, no fold code run.

A checkpoint is inventory-infeasible when the first request of a probe run restored
from it can never be admitted: round 1 (the checkpoint, the longest question asked of
it, the slot's longest possible cache key) already exceeds the input envelope I. Such
slots are skipped, kept in the inventory and never counted as reader failures.

The checkpoint is the one a contained prep child built and the controller verified
(``read_checkpoint`` against the digest the child reported): the controller reads its
bytes as data and never executes a fold to size it. ``plan`` learns feasibility the same
way, from prep children in a private temporary root.

A checkpoint holding a provider's opaque items (``folds.opaque``: a provider
compaction) is inventory-infeasible for every reader that is not the provider and wire
API that made them (``opaque_reader_code``: ``inventory_opaque_reader``): efold cannot
translate what it cannot read, and sending it elsewhere would be refused or, worse,
ignored. The plan knows this before any prep (``controller.campaigns.plan.ineligible_code``); this
check is the same rule on a built checkpoint's context.
"""

from __future__ import annotations

from dataclasses import dataclass

from efold.controller.campaigns.campaign import Campaign
from efold.controller.campaigns.profiles import route_of
from efold.errors import Code
from efold.folds.checkpoint import Checkpoint
from efold.folds.opaque import OpaqueContext, readable_by
from efold.guard.feasibility import first_request_budget
from efold.protocol.tasks import ProbeTask
from efold.worker.reader import first_payload, probe_contract

_LONGEST_CACHE_KEY = "k" * 64  # the longest key a slot can be given


@dataclass(frozen=True)
class FirstRequest:
    """Round 1 of a checkpoint's longest probe, as the guard would admit it: its budget
    U_1 (the request's bytes, each counted as up to one token: efold admits before any
    tokenizer has seen the request) against the reader route's input envelope I (the
    registered I, tightened by the model's ``context_window``)."""

    budget: int
    envelope: int
    opaque: bool = False  # the reader cannot consume the checkpoint's opaque items

    @property
    def fits(self) -> bool:
        return not self.opaque and self.budget <= self.envelope

    def why_not(self) -> str:
        """Why such a checkpoint's slots are skipped, with the figures."""
        if self.opaque:
            return "the reader cannot consume its provider's opaque items"
        return (f"its first request counts as up to {self.budget:,} tokens (one per "
                "byte sent: efold admits it before any tokenizer has seen it), over the "
                f"reader's input envelope of {self.envelope:,} tokens (the model's "
                "context_window, where its catalog gives one)")


def first_request(checkpoint: Checkpoint, campaign: Campaign, role: str,
                  question: str) -> FirstRequest:
    """Round 1 of a probe of ``role`` asking ``question``, against the envelope (never
    fitting when the reader cannot consume the checkpoint's opaque items)."""
    instructions = next(r.instructions for r in campaign.roles if r.name == role)
    route = route_of(campaign.reader)
    task = ProbeTask(question=question, instructions=instructions, route=route)
    contract = probe_contract(task, _LONGEST_CACHE_KEY)
    if opaque_reader_code(checkpoint.opaque, route.provider, route.api) is not None:
        return FirstRequest(0, contract.input_envelope, opaque=True)
    budget = first_request_budget(first_payload(checkpoint, task, _LONGEST_CACHE_KEY), contract)
    return FirstRequest(budget, contract.input_envelope)


def opaque_reader_code(context: OpaqueContext | None, reader_provider: str, reader_api: str
                       ) -> Code | None:
    """``inventory_opaque_reader`` when ``context`` holds items the reader on
    ``reader_provider``/``reader_api`` cannot consume; None when there are none, or it can."""
    if context is None or readable_by(context, reader_provider, reader_api):
        return None
    return Code.INVENTORY_OPAQUE_READER
