"""A shard ticket minted as ``cluster pilot`` mints one, without a cluster."""

from __future__ import annotations

from pathlib import Path

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.plan import plan_for
from efold.controller.campaigns.registration import compute_registration, encode_registration
from efold.controller.campaigns.shards import ShardTicket, plan_shards, shard_plan
from efold.controller.rundirs.authorize_run import mint_shard
from efold.digests import sha256_hex

CAMPAIGN = """
name = "ticket"
suite = "original"
roles = ["native", "pack"]
probe_limit = 1
selection_seed = 7
schedule_seed = 7
cap_usd = "60.00"
"""


def mint_ticket(tmp: Path, *, node: str = "ab" * 28,
                cluster: str = "ticket-cluster") -> tuple[bytes, ShardTicket]:
    """The registration's bytes and shard 1's ticket of a two-shard cluster run whose
    shard runs go under ``tmp/runs``."""
    reg = compute_registration(parse_campaign(CAMPAIGN), CAMPAIGN.encode())
    raw = encode_registration(reg)
    plan = plan_for(reg)
    spec = plan_shards(reg, plan, cluster, 2)[0]
    part = shard_plan(plan, spec.mark, spec.checkpoints, spec.cap_units)
    run_dir = tmp / "runs" / f"{cluster}-s1"
    artifact, key = mint_shard(reg, raw, part.schedule_sha256, run_dir,
                               authorization_id=f"{cluster}-auth.shard-1",
                               cap_units=spec.cap_units)
    return raw, ShardTicket(spec=spec, node=node, registration_sha256=sha256_hex(raw),
                            run_dir=str(run_dir), artifact=artifact, trusted_key=key)
