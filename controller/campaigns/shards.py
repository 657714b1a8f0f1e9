"""Sharding a campaign over a cluster: which slots each shard runs and how much of the
cap it may spend. Pure functions of the registration and its plan; nothing here knows
Ray (``controller.cluster.dispatch`` does the transport).

**Which slots.** A shard is a set of whole checkpoints (role x trace x repeat): every
checkpoint is built and probed inside one shard, and a shard's plan is the whole plan's
slots of its checkpoints in the whole plan's schedule order (``shard_plan``).
Checkpoints go to shards by expected cost, largest first, each to the shard with the
least so far (``deal``). A checkpoint, not a trace, is the unit: the default campaign
has 4 traces but 20 checkpoints, so three shards get 91, 91 and 78 slots, not 130, 65
and 65.

**The cap (the design choice).** The campaign's cap C is partitioned *before dispatch*
into per-shard caps C_1..C_n, each C_i >= Rmax and sum C_i <= C (``split_cap``): every
shard gets Rmax, and what is left is shared in proportion to each shard's expected cost
E_i, by largest remainder, so the parts sum to C exactly. Each shard is an ordinary
controller: its one durable permit source (``guard.ledger``) counts
T_i = settled + retained + active holds on that shard's journal and admits a request
only when T_i + Rmax <= C_i.

Proof sketch that the whole campaign keeps T + Rmax <= C at every admission, where
T = sum T_i: at an admission on shard i, T_i + Rmax <= C_i. On every other shard j,
T_j <= C_j at all times: T_j grows only by a hold admitted under that rule (a hold is at
most Rmax), and a settlement replaces a hold by a cost that is at most the hold (a cost
above it is an integrity stop that retains the hold). Summing, T + Rmax <= sum C_i <= C.
No admission reads anything from another node, so no lost message can make one wrong.
A shard whose node dies keeps its part C_i: nothing is ever handed to another shard, so
whatever that shard held or spent (its retained holds) stays inside C_i, counted.

The price of this design against one cluster-wide admission authority: a shard cannot
borrow headroom another shard leaves unused, so a tight cap stops a shard sooner
(``not_admitted_cap`` on its own part) than one machine would. A single authority
would need every admission to be a round trip to one durable writer, and a shard cut
off from it would have to stop; the partition keeps every admission local.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from efold.controller.campaigns.plan import plan_estimate
from efold.controller.campaigns.registration import Registration
from efold.controller.errors import ControllerError
from efold.errors import Code
from efold.protocol.records import Plan, ShardMark, schedule_digest

# A cluster run has at most this many shards (each is a controller with its children).
MAX_SHARDS = 64


class ShardSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One shard as the plan fixes it before dispatch: which cluster run and index, its
    checkpoints (keys, in schedule order) and its part of the cap."""

    mark: ShardMark
    checkpoints: list[str]
    cap_units: int
    expected_units: int  # E_i: the plan's estimate of this shard's slots


class ShardTicket(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a node is handed to run one shard: the spec, the Ray node it is bound to,
    the registration's sha256, the shard run's directory on that node, the shard's
    authorization (``authorize_run.mint_shard``) with the raw key that verifies it, and
    its route: ``faux``; ``local`` (every model on its node's loopback, no credential:
    the cluster run consumed a local authorization of its own); or ``real`` (the cluster
    run consumed the operator's signed authorization; the shard reads its credentials
    from its own node's environment, never from the ticket, and its authorization binds
    the credential variable's name).
    ``process_group_ok``: the operator's ``--process-group-containment``."""

    spec: ShardSpec
    node: str
    registration_sha256: str
    run_dir: str
    artifact: bytes
    trusted_key: bytes
    route: Literal["faux", "local", "real"] = "faux"
    process_group_ok: bool = False


def shard_plan(plan: Plan, mark: ShardMark, checkpoints: Sequence[str],
               cap_units: int) -> Plan:
    """The whole plan narrowed to the slots of ``checkpoints`` (schedule order kept) and
    to their roles (campaign order kept), under the shard's cap, its schedule digest
    marked with the shard (``schedule_digest``)."""
    kept = set(checkpoints)
    slots = [s for s in plan.slots if s.checkpoint in kept]
    roles = {s.role for s in slots}
    return msgspec.structs.replace(
        plan, slots=slots, cap_units=cap_units, shard=mark,
        roles=[r for r in plan.roles if r in roles],  # a shard may hold some roles only
        schedule_sha256=schedule_digest([s.slot for s in slots], shard=mark))


def split_cap(cap_units: int, rmax_units: int, weights: Sequence[int]) -> list[int]:
    """C split into ``len(weights)`` parts, each at least Rmax, summing to C exactly:
    Rmax each, and the rest in proportion to ``weights`` (all zero: equally), by largest
    remainder (ties to the lower index). ``cluster_cap_too_small`` when C < n x Rmax."""
    n = len(weights)
    if n < 1 or any(w < 0 for w in weights):
        raise ValueError("split_cap needs at least one non-negative weight")
    spare = cap_units - n * rmax_units
    if spare < 0:
        raise ControllerError(Code.CLUSTER_CAP_TOO_SMALL,
                              f"the cap ({cap_units} units) holds fewer than {n} maximum "
                              f"reservations of {rmax_units} units: use fewer shards")
    basis = list(weights) if sum(weights) else [1] * n
    total = sum(basis)
    shares = [spare * w // total for w in basis]
    # Largest remainder: the units integer division left go to the largest fractions.
    order = sorted(range(n), key=lambda i: (-(spare * basis[i] % total), i))
    for i in order[:spare - sum(shares)]:
        shares[i] += 1
    return [rmax_units + s for s in shares]


def deal(costs: Sequence[tuple[str, int]], n: int) -> list[list[str]]:
    """``costs`` (key, expected units) in their order, dealt to ``n`` shards: largest
    cost first (ties: the given order), each to the shard with the least expected cost
    so far (ties: fewer keys, then the lower index), so with at least ``n`` keys no
    shard is left empty, even where costs are zero. Each shard's keys come back in the
    given order."""
    rank = {key: i for i, (key, _) in enumerate(costs)}
    loads = [0] * n
    dealt: list[list[str]] = [[] for _ in range(n)]
    for key, cost in sorted(costs, key=lambda kc: (-kc[1], rank[kc[0]])):
        i = min(range(n), key=lambda k: (loads[k], len(dealt[k]), k))
        loads[i] += cost
        dealt[i].append(key)
    return [sorted(keys, key=rank.__getitem__) for keys in dealt]


def plan_shards(reg: Registration, plan: Plan, cluster: str, count: int) -> list[ShardSpec]:
    """The shards of one cluster run of ``plan`` (the registration's whole plan).

    Refuses ``cluster_shards_invalid`` for fewer than 1 or more than ``MAX_SHARDS``
    shards, or more shards than the plan has checkpoints (a shard is whole
    checkpoints), and ``cluster_cap_too_small`` when the cap cannot give each shard an
    Rmax."""
    keys = checkpoint_keys(plan)
    if not 1 <= count <= MAX_SHARDS or count > len(keys):
        raise ControllerError(Code.CLUSTER_SHARDS_INVALID,
                              f"{count} shards: a cluster run has 1 to {MAX_SHARDS} shards "
                              f"and no more than its plan's checkpoints ({len(keys)})")
    costs = [(k, _expected(reg, plan, [k])) for k in keys]
    dealt = deal(costs, count)
    expected = [_expected(reg, plan, shard) for shard in dealt]
    caps = split_cap(plan.cap_units, plan.rmax_units, expected)
    return [ShardSpec(mark=ShardMark(cluster=cluster, index=i + 1, count=count),
                      checkpoints=shard, cap_units=cap, expected_units=e)
            for i, (shard, cap, e) in enumerate(zip(dealt, caps, expected, strict=True))]


def checkpoint_keys(plan: Plan) -> list[str]:
    """The plan's checkpoints, in the order their first slot is scheduled."""
    return list(dict.fromkeys(s.checkpoint for s in plan.slots))


def _expected(reg: Registration, plan: Plan, checkpoints: Sequence[str]) -> int:
    """E of the plan's slots of ``checkpoints``: the plan's own estimate (every line:
    reader, summariser, judge), in exact integer units."""
    mark = ShardMark(cluster="estimate", index=1, count=1)
    part = shard_plan(plan, mark, checkpoints, plan.cap_units)
    return plan_estimate(reg, part).expected_units
