"""Fold code runs without a network and writes only its own slot (``efold.isolation``,
applied by the prep child before any fold code: ``worker.fold_isolation``).

An external command fold and an entry-point fold each try to reach a listener the test
opens outside their namespace (on loopback and on the host's own address), a
non-loopback address, to append to the run's journal, to write into the burn registry
and into the operator's home: every attempt fails inside the fold, the listener
accepts nothing, the journal is intact and reconciled. ``fold check`` says whether the
fold ran isolated; where isolation is unavailable (simulated) the run still works and
says why, and a campaign that requires isolation refuses with
``fold_isolation_unavailable``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import isolation_fold
import pytest
from plugin_kit import installed_plugin

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.registration import compute_registration, write_registration
from efold.controller.pilot.fold_check import check_fold, resolve
from efold.controller.rundirs.recovery import observe
from efold.isolation import SIMULATE_VAR
from efold.registry.burn import faux_registry_root

HERE = Path(__file__).resolve().parent
SIMULATING_CHILD = HERE / "simulating_child.py"

CAMPAIGN = """
name = "isolated"
suite = "original"
roles = ["{role}"]
probe_limit = 1
selection_seed = 7
schedule_seed = 7
cap_usd = "60.00"
{extra}
[role.{role}]
{fold}
"""

ENTRY_POINT = """
import sys
sys.path.insert(0, {here!r})
import isolation_fold
from efold.folds.fold import build_receipt
from efold.folds.checkpoint import BoundaryEvidence, Checkpoint, ReaderMessage


class Fold:
    name = {name!r}

    def build(self, prefix):
        isolation_fold.attempt_all({targets!r})
        messages = [ReaderMessage(role="user", content=prefix.events[-1].content)]
        receipt = build_receipt(arm=self.name, prefix=prefix, messages=messages, tools=[],
                                boundary=BoundaryEvidence(kind="external", verified=True),
                                pressure=[])
        return Checkpoint(arm=self.name, trace_id=prefix.trace_id, messages=messages,
                          tools=[], receipt=receipt)
"""


def host_address() -> str:
    """The host's own non-loopback address (the source of its route out)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            pytest.skip("this host has no non-loopback route")
        return str(s.getsockname()[0])


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("0.0.0.0", 0))
    sock.listen(8)
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


def accepted(sock: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


@contextmanager
def isolation_probe(kind: str, targets: Path) -> Iterator[tuple[str, str]]:
    """(role name, [role] table body) of the probing fold of ``kind``."""
    if kind == "command":
        argv = [sys.executable, str(HERE / "isolation_fold.py"), str(targets)]
        yield "probe-cmd", f"command = {argv!r}\ntimeout_seconds = 20.0"
        return
    name = "probe-ep"
    source = ENTRY_POINT.format(here=str(HERE), name=name, targets=str(targets))
    with installed_plugin(name, source):
        yield name, f'arm = "{name}"'


def _registration(tmp: Path, role: str, fold: str, extra: str = "") -> tuple[Path, str]:
    text = CAMPAIGN.format(role=role, fold=fold, extra=extra)
    reg = compute_registration(parse_campaign(text), text.encode())
    return write_registration(reg, tmp / "registered")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "efold.controller", *args],
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("kind", ["command", "entry-point"])
def test_an_isolated_fold_reaches_nothing_and_writes_only_its_slot(
        tmp_path: Path, kind: str, listener: socket.socket) -> None:
    run = tmp_path / "runs" / "run"
    run.parent.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    registry = Path(faux_registry_root(run))
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps({
        "port": listener.getsockname()[1], "host": host_address(),
        "journal": str(run / "journal.sqlite"), "registry": str(registry),
        "home": str(home)}))
    with isolation_probe(kind, targets) as (role, fold):
        path, sha = _registration(tmp_path, role, fold)
        result = _cli("pilot", "--faux", "--registration", str(path), "--sha256", sha,
                      "--run-dir", str(run), "--no-progress", env={"HOME": str(home)})
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    found = list(run.glob("checkpoints/*/attempts.json"))
    assert found, "the fold never ran"
    for attempts in (json.loads(f.read_text()) for f in found):  # one per checkpoint
        assert attempts == {
            "host_loopback": "refused errno 111",  # its own loopback: nobody listens
            "host_address": "refused errno 101",  # no route out of its namespace
            "non_loopback": "refused errno 101",
            "journal": "refused errno 13",  # Landlock: not beneath its slot
            "registry": "refused errno 13",
            "home": "refused errno 13",
        }
    assert accepted(listener) == 0
    assert isolation_fold.ATTACK not in (run / "journal.sqlite").read_bytes()
    assert not (registry / "planted").exists()
    assert list(home.iterdir()) == []
    with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    report = observe(run)
    assert report.reconciled, report.verdict


def test_the_probe_succeeds_unisolated(tmp_path: Path, listener: socket.socket) -> None:
    """The same attempts, run by the test's own user without isolation, all succeed: the
    refusals above are the isolation's, not the test's permissions."""
    journal = tmp_path / "journal.sqlite"
    journal.write_bytes(b"")
    (tmp_path / "slot" / "tmp").mkdir(parents=True)
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps({
        "port": listener.getsockname()[1], "host": host_address(), "journal": str(journal),
        "registry": str(tmp_path / "registry"), "home": str(tmp_path)}))
    done = subprocess.run([sys.executable, str(HERE / "isolation_fold.py"), str(targets)],
                          input=b"{}", capture_output=True, timeout=60,
                          env={**os.environ, "TMPDIR": str(tmp_path / "slot" / "tmp")})
    assert done.returncode == 0, done.stderr
    got = json.loads((tmp_path / "slot" / "attempts.json").read_text())
    assert {k: v for k, v in got.items() if k != "non_loopback"} == {
        "host_loopback": "done", "host_address": "done", "journal": "done",
        "registry": "done", "home": "done"}
    assert accepted(listener) == 2


TAIL = ENTRY_POINT.replace("        isolation_fold.attempt_all({targets!r})\n", "")


@contextmanager
def tail_fold(name: str) -> Iterator[str]:
    with installed_plugin(name, TAIL.format(here=str(HERE), name=name)):
        yield f'arm = "{name}"'


def _check(tmp_path: Path, extra: str, simulate: str | None) -> dict[str, object]:
    campaign = tmp_path / "campaign.toml"
    name = "tail-ep"
    with tail_fold(name) as fold:
        campaign.write_text(CAMPAIGN.format(role=name, fold=fold, extra=extra))
        program = None if simulate is None else (
            sys.executable, "-I", str(SIMULATING_CHILD), simulate)
        check = check_fold(resolve(name, str(campaign), None), program=program)
    import msgspec

    return dict(msgspec.to_builtins(check))


def test_fold_check_says_the_fold_ran_isolated(tmp_path: Path) -> None:
    campaign = tmp_path / "campaign.toml"
    with tail_fold("tail-ep") as fold:
        campaign.write_text(CAMPAIGN.format(role="tail-ep", fold=fold, extra=""))
        result = _cli("fold", "check", "tail-ep", "--campaign", str(campaign))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    start = lines.index("isolated: yes")
    assert lines[start + 1] == "  network: loopback-only"
    assert lines[start + 2].startswith("  writes: landlock-abi-")
    assert lines[start + 2].endswith(" (only its slot directory)")


def test_unavailable_isolation_is_said_and_the_fold_still_runs(tmp_path: Path) -> None:
    check = _check(tmp_path, "", "network,writes")
    assert check["ok"] is True, check
    assert check["isolation"] == {
        "network": "host", "writes": "unrestricted",
        "network_reason": f"network namespace unavailable (simulated by {SIMULATE_VAR})",
        "writes_reason": f"Landlock unavailable (simulated by {SIMULATE_VAR})"}


@pytest.mark.parametrize("simulate", ["network", "writes", "network,writes"])
def test_a_campaign_requiring_isolation_refuses_where_it_is_unavailable(
        tmp_path: Path, simulate: str) -> None:
    check = _check(tmp_path, 'isolation = "required"', simulate)
    assert check["ok"] is False
    assert check["code"] == "fold_isolation_unavailable"
    assert check["checkpoint"] is None


def test_a_campaign_requiring_isolation_runs_where_it_is_available(tmp_path: Path) -> None:
    check = _check(tmp_path, 'isolation = "required"', None)
    assert check["ok"] is True, check
    iso = check["isolation"]
    assert isinstance(iso, dict) and iso["network"] == "loopback-only"
    assert str(iso["writes"]).startswith("landlock-abi-")


def test_an_ordinary_users_fold_runs_isolated() -> None:
    """As an ordinary user (umask 002) the prep child goes through a user namespace: the
    fold still has no network and Landlock writes (``fold check --json`` says so)."""
    from as_user import USERS, drop, ordinary_python, workspace

    if "nobody" not in USERS:
        pytest.skip("needs root to drop to an ordinary user")
    with ordinary_python() as python, workspace("nobody") as base:
        if python is None:
            pytest.skip("no interpreter the ordinary user can run")
        done = subprocess.run(
            [*drop("nobody"), python, "-m", "efold.controller", "fold", "check",
             "compaction", "--json"], cwd=base, capture_output=True, text=True,
            timeout=180, umask=0o002,
            env={"PATH": os.environ["PATH"], "HOME": str(base)})
    assert done.returncode == 0, done.stderr
    iso = json.loads(done.stdout)["isolation"]
    assert iso["network"] == "loopback-only" and iso["network_reason"] is None
    assert str(iso["writes"]).startswith("landlock-abi-") and iso["writes_reason"] is None
