"""A shard's ticket (``controller.campaigns.shards.ShardTicket``) is single use and binds its
shard: the real ``efold-controller cluster shard`` command, run by hand as a replay
would be (no Ray involved: the ticket's own bindings and the burn registry refuse).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
from efold_shard_kit import mint_ticket

from efold.controller.campaigns.shards import ShardTicket

CLI = [sys.executable, "-m", "efold.controller"]


def _shard(tmp: Path, reg_bytes: bytes, ticket: ShardTicket,
           name: str = "ticket.json") -> subprocess.CompletedProcess[str]:
    (tmp / "registration.json").write_bytes(reg_bytes)
    (tmp / name).write_bytes(msgspec.json.encode(ticket))
    return subprocess.run([*CLI, "cluster", "shard", "--registration",
                           str(tmp / "registration.json"), "--sha256",
                           ticket.registration_sha256, "--ticket", str(tmp / name), "--json",
                           "--no-progress"], capture_output=True, text=True, timeout=300)


def test_a_ticket_runs_its_shard_once(tmp_path: Path) -> None:
    reg_bytes, ticket = mint_ticket(tmp_path)
    first = _shard(tmp_path, reg_bytes, ticket)
    assert first.returncode == 0, first.stderr
    run = Path(ticket.run_dir)
    plan = msgspec.json.decode((run / "plan.json").read_bytes())
    assert plan["shard"] == {"cluster": "ticket-cluster", "index": 1, "count": 2}
    assert plan["cap_units"] == ticket.spec.cap_units < 60 * 20_000_000
    assert {s["checkpoint"] for s in plan["slots"]} == set(ticket.spec.checkpoints)
    receipts = sorted(p.name for p in (run / "receipts").glob("*.json"))
    assert len(receipts) == len(plan["slots"]) > 0

    again = _shard(tmp_path, reg_bytes, ticket)  # the same ticket, the run still there
    assert again.returncode == 2 and "refused: run_root_exists" in again.stderr
    shutil.rmtree(run)  # its run gone: the burn registry beside it still refuses
    again = _shard(tmp_path, reg_bytes, ticket)
    assert again.returncode == 2 and "refused: authorization_consumed" in again.stderr, \
        again.stderr
    assert not (run / "receipts").exists()


def test_a_ticket_binds_its_directory_and_its_part_of_the_cap(tmp_path: Path) -> None:
    reg_bytes, ticket = mint_ticket(tmp_path)
    elsewhere = msgspec.structs.replace(ticket, run_dir=str(tmp_path / "runs" / "elsewhere"))
    moved = _shard(tmp_path, reg_bytes, elsewhere)
    assert moved.returncode == 2 and "authorization_binding_mismatch" in moved.stderr
    richer = msgspec.structs.replace(ticket, spec=msgspec.structs.replace(
        ticket.spec, cap_units=ticket.spec.cap_units + 1))
    raised = _shard(tmp_path, reg_bytes, richer)
    assert raised.returncode == 2 and "authorization_binding_mismatch" in raised.stderr
    # Neither refusal burned the ticket: with the refused attempt's directory removed
    # (a run directory is never reused), the genuine one still runs.
    shutil.rmtree(ticket.run_dir)
    assert _shard(tmp_path, reg_bytes, ticket).returncode == 0
