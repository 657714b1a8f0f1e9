"""Offline feasibility: would a payload's first request fit the input envelope?

The same arithmetic the guard admits with (U_k of docs/architecture.md §5), run before anything is
launched: the planner uses it to mark a slot whose first request can never be admitted
(``U_1 > I``) as inventory-infeasible, so it is skipped and counted, never launched and
refused. Later rounds only add bytes, so this is a lower bound: a feasible first round
does not promise a feasible run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from efold.guard.accounting import input_budget
from efold.guard.contract import Contract
from efold.guard.wire.formats import wire_format


def first_request_budget(payload: Mapping[str, Any], contract: Contract) -> int:
    """U_1 of ``payload`` under ``contract`` (allowlists enforced: a payload the guard
    would refuse raises the same ``PolicyViolation``)."""
    body = msgspec.json.encode(payload)
    shape = wire_format(contract.api).check(msgspec.json.decode(body), contract,
                                            first_request=True)
    return input_budget(len(body), 0, shape)
