"""The arms built across several prep children, through the commands and the journal.

restart-switch-compact (f): every checkpoint is built by two prep children, the second
a fresh process started after the first ended, from the durable session the first left
(its digest journaled between them) and from nothing else; its checkpoint crosses the
cold boundary and then one compaction. A session changed after its child reported it is
never built from.

ledger-cold: three extraction children, one after another, each committing a ledger
that extends the one before (journaled, checked by the controller), then a fourth that
builds the cold checkpoint with the final ledger. An extraction that does not extend the
one before fails the checkpoint before the next runs.

Both register, pass ``preflight`` and run in a faux campaign."""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import msgspec
from efold_pilot_kit import faulty_program, small_registration

from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir
from efold.corpus import load_trace, trace_digest
from efold.digests import sha256_hex
from efold.errors import Code
from efold.folds import TracePrefix, read_checkpoint
from efold.folds.arms import RestartSwitchCompactFold
from efold.folds.ledger import (
    LEDGER_EXTRACTIONS,
    LEDGER_FILE,
    check_extension,
    decode_ledger,
    render_ledger,
)

EFOLD = str(Path(sys.executable).with_name("efold-controller"))
CAMPAIGN = """name = "f"
suite = "original"
roles = ["cold-rebuild", "restart-switch-compact", "ledger-cold"]
probe_limit = 2
cap_usd = "60.00"
"""


def efold(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EFOLD, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def rows(run: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True) as conn:
        return list(conn.execute(sql))


def checkpoints(run: Path, role: str) -> dict[str, str]:
    """The checkpoint key of each of ``role``'s slots, from the run's plan."""
    plan = json.loads((run / "plan.json").read_bytes())
    return {s["slot"]: s["checkpoint"] for s in plan["slots"] if s["role"] == role}


def test_restart_arm_registers_passes_preflight_and_proves_its_restart(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CAMPAIGN)
    done = efold(tmp_path, "register", "c.toml", "--output", "reg")
    assert done.returncode == 0, done.stderr
    sha = done.stdout.split("sha256: ")[1].strip()
    given = ("--registration", "reg/registration.json", "--sha256", sha)
    checked = efold(tmp_path, "preflight", *given)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = efold(tmp_path, "pilot", "--faux", *given, "--run-dir", "run", "--quiet")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    run = tmp_path / "run"
    receipts = [json.loads(p.read_bytes()) for p in (run / "receipts").iterdir()]
    assert receipts and all(r["status"] == "completed" and "excluded" not in r
                            for r in receipts), receipts

    keys = checkpoints(run, "restart-switch-compact")
    assert keys
    for key in sorted(set(keys.values())):
        launches = rows(run, "SELECT pid, start_time, launched_ns, exited_ns FROM launches "
                             f"WHERE kind = 'prep' AND slot = '{key}' ORDER BY launch_id")
        # Two processes, the second started after the first had ended.
        assert len(launches) == 2, launches
        (pid1, start1, _, exited1), (pid2, start2, launched2, _) = launches
        assert (pid1, start1) != (pid2, start2)
        assert isinstance(exited1, int) and isinstance(launched2, int) and exited1 < launched2
        # The session the first left, journaled, is what the second built from.
        (digest,), = rows(run, "SELECT snapshot_digest FROM assignments "
                               f"WHERE slot = '{key}#session' AND kind = 'session'")
        session = load_trace((run / "sessions" / key / "session.jsonl").read_bytes())
        assert trace_digest(session) == digest
        (snapshot,), = rows(run, "SELECT snapshot_digest FROM assignments "
                                 f"WHERE slot = '{key}' AND kind = 'checkpoint'")
        restored = read_checkpoint(run / "checkpoints" / key / "snapshot",
                                   expected_digest=str(snapshot))
        rebuilt = RestartSwitchCompactFold().build(TracePrefix.of(session))
        assert restored.checkpoint.messages == rebuilt.messages
        # Three boundaries: the restart (above), the cold reseed, then one compaction.
        receipt = restored.checkpoint.receipt
        assert receipt.boundary.kind == "restart" and receipt.boundary.verified
        assert receipt.projection is not None and receipt.projection.text_messages_kept > 0
        assert len(receipt.compactions) == 1
        assert receipt.compactions[0].summarised_messages > 0
    for key in sorted(set(checkpoints(run, "ledger-cold").values())):
        launches = rows(run, "SELECT pid, start_time, launched_ns, exited_ns FROM launches "
                             f"WHERE kind = 'prep' AND slot = '{key}' ORDER BY launch_id")
        # Four processes in series: three extractions, then the checkpoint.
        assert len(launches) == 4, launches
        assert len({(pid, start) for pid, start, _, _ in launches}) == 4
        for (_, _, _, exited), (_, _, launched, _) in itertools.pairwise(launches):
            assert isinstance(exited, int) and isinstance(launched, int) and exited < launched
        previous = None
        for number in range(1, LEDGER_EXTRACTIONS + 1):
            (digest,), = rows(run, "SELECT snapshot_digest FROM assignments WHERE "
                                   f"slot = '{key}#ledger{number}' AND kind = 'ledger'")
            data = (run / "ledgers" / key / f"p{number}" / LEDGER_FILE).read_bytes()
            assert sha256_hex(data) == digest
            ledger = decode_ledger(data)
            assert check_extension(previous, ledger, number) is None
            previous = ledger
        assert previous is not None
        (snapshot,), = rows(run, "SELECT snapshot_digest FROM assignments "
                                 f"WHERE slot = '{key}' AND kind = 'checkpoint'")
        restored = read_checkpoint(run / "checkpoints" / key / "snapshot",
                                   expected_digest=str(snapshot))
        # The final ledger, as committed, is the first thing the reader sees.
        assert restored.checkpoint.messages[0].content == render_ledger(previous)[0].text
        receipt = restored.checkpoint.receipt
        assert receipt.boundary.kind == "ledger" and receipt.boundary.verified
        assert receipt.ledger is not msgspec.UNSET and receipt.ledger.operations == 3
    # cold-rebuild's checkpoints are built once each, by one prep child.
    cold = rows(run, "SELECT slot, COUNT(*) FROM launches WHERE kind = 'prep' "
                     "AND slot LIKE '%.cold-rebuild.%' GROUP BY slot")
    assert cold and all(n == 1 for _, n in cold)


def tampered_run(tmp_path: Path, role: str, fault: str, preps: int) -> tuple[Path, str]:
    """``role`` alone run with the ``fault`` child program: exactly one checkpoint is
    refused (``lookup_preparation_invalid``); every other was built by ``preps`` prep
    children. The run and the refused checkpoint's key."""
    reg, raw = small_registration(roles=f'["{role}"]')
    outcome = run_pilot(reg, raw, claim_run_dir(tmp_path / "run"),
                        program=faulty_program(fault, tmp_path / "marker"))
    run = tmp_path / "run"
    assert (tmp_path / "marker").exists()
    keys = checkpoints(run, role)
    codes = {r.slot: r.code for r in outcome.receipts}
    refused = {keys[s] for s, c in codes.items() if c == Code.LOOKUP_PREPARATION_INVALID.value}
    assert len(refused) == 1, codes
    others = {keys[s] for s, c in codes.items() if c is None}
    assert others and all(
        rows(run, f"SELECT COUNT(*) FROM launches WHERE slot = '{k}'") == [(preps,)]
        for k in others)
    return run, refused.pop()


def test_a_session_changed_after_its_report_is_never_built_from(tmp_path: Path) -> None:
    run, key = tampered_run(tmp_path, "restart-switch-compact", "tamper-session", 2)
    # Its first prep ran, its second never did: one launch, no session row, no
    # checkpoint.
    assert rows(run, f"SELECT COUNT(*) FROM launches WHERE slot = '{key}'") == [(1,)]
    assert rows(run, f"SELECT COUNT(*) FROM assignments WHERE slot LIKE '{key}%'") == [(0,)]


def test_a_ledger_that_does_not_extend_the_one_before_fails_its_checkpoint(
        tmp_path: Path) -> None:
    run, key = tampered_run(tmp_path, "ledger-cold", "tamper-ledger", 4)
    # Extractions 1 and 2 ran; 2 was refused, so 3 and the checkpoint never did.
    assert rows(run, f"SELECT COUNT(*) FROM launches WHERE slot = '{key}'") == [(2,)]
    assert rows(run, f"SELECT slot FROM assignments WHERE slot LIKE '{key}%'") == \
        [(f"{key}#ledger1",)]
