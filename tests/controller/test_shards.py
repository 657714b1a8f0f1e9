"""Sharding a plan (``controller.campaigns.shards``): pure functions, no Ray.

- the cap split: every part at least Rmax, the parts summing to C exactly, for any
  expected costs; refused when C cannot hold an Rmax per shard;
- the checkpoints dealt: every checkpoint in exactly one shard;
- the shard plans partition the whole plan, schedule order kept, each with its own
  schedule digest;
- the cluster command without Ray installed refuses, and ``pilot`` never imports Ray.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.plan import plan_for
from efold.controller.campaigns.registration import compute_registration
from efold.controller.campaigns.shards import deal, plan_shards, shard_plan, split_cap
from efold.controller.errors import ControllerError
from efold.errors import Code
from efold.protocol.records import ShardMark

CAMPAIGN = """
name = "shards"
suite = "original"
roles = ["native", "pack", "compaction"]
probe_limit = 3
selection_seed = 7
schedule_seed = 7
cap_usd = "60.00"
"""


@given(rmax=st.integers(1, 10**9), weights=st.lists(st.integers(0, 10**12), min_size=1,
                                                      max_size=64),
       spare=st.integers(0, 10**12))
def test_the_cap_split_gives_each_part_rmax_and_sums_to_the_cap(
        rmax: int, weights: list[int], spare: int) -> None:
    cap = len(weights) * rmax + spare
    parts = split_cap(cap, rmax, weights)
    assert len(parts) == len(weights)
    assert sum(parts) == cap
    assert min(parts) >= rmax
    # A heavier shard never gets less than a lighter one.
    for a, b in zip(weights, parts, strict=True):
        for c, d in zip(weights, parts, strict=True):
            if a > c:
                assert b >= d


def test_a_cap_below_one_rmax_per_shard_refuses() -> None:
    with pytest.raises(ControllerError) as err:
        split_cap(3 * 100 - 1, 100, [1, 1, 1])
    assert err.value.code is Code.CLUSTER_CAP_TOO_SMALL
    assert split_cap(300, 100, [5, 0, 9]) == [100, 100, 100]


def test_checkpoints_are_dealt_largest_first_to_the_lightest_shard() -> None:
    dealt = deal([("a", 5), ("b", 9), ("c", 4), ("d", 4)], 2)
    assert dealt == [["b", "d"], ["a", "c"]]  # 9 + 4 against 5 + 4 (a tie: the lower index)
    # Costs of zero (a checkpoint with no eligible slot) still leave no shard empty.
    assert deal([("a", 0), ("b", 0), ("c", 0)], 3) == [["a"], ["b"], ["c"]]
    assert deal([("a", 7), ("b", 0), ("c", 0), ("d", 0)], 3) == [
        ["a"], ["b", "d"], ["c"]]


def test_the_shards_partition_the_plan() -> None:
    reg = compute_registration(parse_campaign(CAMPAIGN), CAMPAIGN.encode())
    plan = plan_for(reg)
    specs = plan_shards(reg, plan, "c1", 3)
    assert [s.mark for s in specs] == [ShardMark("c1", i, 3) for i in (1, 2, 3)]
    # 12 checkpoints of 3 slots each, dealt 4 to a shard.
    assert [len(s.checkpoints) for s in specs] == [4, 4, 4]
    assert sum(s.cap_units for s in specs) == plan.cap_units
    parts = [shard_plan(plan, s.mark, s.checkpoints, s.cap_units) for s in specs]
    slots = [slot.slot for part in parts for slot in part.slots]
    assert sorted(slots) == sorted(s.slot for s in plan.slots) and len(set(slots)) == len(slots)
    order = [s.slot for s in plan.slots]
    for part, spec in zip(parts, specs, strict=True):
        assert [s.slot for s in part.slots] == [s for s in order if s in
                                                {p.slot for p in part.slots}]
        assert {s.checkpoint for s in part.slots}.isdisjoint(
            {s.checkpoint for other in parts if other is not part for s in other.slots})
        assert part.schedule_matches() and part.cap_units == spec.cap_units
        # Only the roles it holds (a report refuses a planned role without a slot).
        assert part.roles == [r for r in plan.roles if r in {s.role for s in part.slots}]
    digests = {p.schedule_sha256 for p in parts} | {plan.schedule_sha256}
    assert len(digests) == 4
    # The same shard of another cluster run has another schedule digest.
    other = plan_shards(reg, plan, "c2", 3)[0]
    assert shard_plan(plan, other.mark, other.checkpoints, other.cap_units).schedule_sha256 \
        != parts[0].schedule_sha256


@pytest.mark.parametrize("count", [0, 13, 65])
def test_shard_counts_outside_one_to_the_checkpoints_refuse(count: int) -> None:
    reg = compute_registration(parse_campaign(CAMPAIGN), CAMPAIGN.encode())
    with pytest.raises(ControllerError) as err:
        plan_shards(reg, plan_for(reg), "c", count)  # 4 traces x 3 roles: 12 checkpoints
    assert err.value.code is Code.CLUSTER_SHARDS_INVALID


def test_without_ray_the_cluster_command_refuses_and_pilot_never_imports_ray() -> None:
    code = ("import sys\nsys.modules['ray'] = None\n"  # an import of ray now fails
            "from efold.controller.cli import main\n"
            "main(['cluster', 'pilot', '--faux', '--ray', 'auto'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.startswith("refused: cluster_unavailable (ray is not installed")
    probe = ("import sys\nimport efold.controller.commands.pilot\n"
             "import efold.controller.commands.aggregate\n"
             "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
