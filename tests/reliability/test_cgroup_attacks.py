"""Containment no process can leave (cgroup mode): a fold that escapes every tie but the
kernel's (``escaping_fold``: setsid, double fork, SIGTERM ignored, an empty environment
and another name, then a burst of short-lived processes), as an external command and as
an entry-point plugin.

- The controller SIGKILLed mid-fold in ``pilot``, ``plan``, ``preflight`` and ``fold
  check``: ``recover`` (given the run, or the private root the command printed) says NOT
  reconciled and names the escaped process; ``reap`` kills it; ``recover`` then says
  reconciled, and /proc holds nothing of the run.
- The controller alive: the escaped process is contained with the rest, the run
  journals ``lookup_worker_lost``, and nothing is left when the command returns.

Everything is checked from /proc (the survivor's command line carries a fresh token;
the run's cgroup is read through /proc/PID/cgroup), never from efold's records alone.
These tests skip, saying why, only where no writable cgroup2 exists.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import escaping_fold
import pytest
from plugin_kit import installed_plugin

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.registration import compute_registration, write_registration
from efold.controller.processes.cgroup_mount import NoCgroup2, find_cgroup2
from efold.controller.rundirs.recovery import observe
from efold.registry.journal import JournalReader

FOUND = find_cgroup2()
pytestmark = pytest.mark.skipif(isinstance(FOUND, NoCgroup2),
                                reason=f"no writable cgroup2: {getattr(FOUND, 'reason', '')}")
KIT = Path(escaping_fold.__file__).resolve().parent

CAMPAIGN = """
name = "escaping"
suite = "original"
roles = ["{role}"]
probe_limit = 1
selection_seed = 7
schedule_seed = 7
cap_usd = "60.00"
containment = "cgroup"
[deadlines]
prep_seconds = {prep_seconds}
grace_seconds = 0.5
[role.{role}]
{fold}
"""

ENTRY_POINT = """
import sys
sys.path.insert(0, {kit!r})
import escaping_fold

class Fold:
    name = {name!r}

    def build(self, prefix):
        escaping_fold.escape({token!r})
        {after}
"""


@contextmanager
def escaping(kind: str, tmp: Path, token: str, mode: str,
             prep_seconds: float = 30.0) -> Iterator[Path]:
    """The campaign file of a one-role campaign whose fold escapes (``kind``: command
    or entry-point), its survivor carrying ``token``; every holder killed at the end."""
    try:
        if kind == "command":
            argv = [sys.executable, str(KIT / "escaping_fold.py"), token, mode]
            role, fold = "escaper", f"command = {argv!r}\ntimeout_seconds = {prep_seconds}"
            yield _campaign(tmp, role, fold, prep_seconds)
            return
        after = "return None" if mode == "answer" else "escaping_fold.hang()"
        name = f"escaper-{token[-8:]}"
        source = ENTRY_POINT.format(kit=str(KIT), name=name, token=token, after=after)
        with installed_plugin(name, source):
            yield _campaign(tmp, name, f'arm = "{name}"', prep_seconds)
    finally:
        for pid in escaping_fold.holders(token):
            os.kill(pid, signal.SIGKILL)


def _campaign(tmp: Path, role: str, fold: str, prep_seconds: float) -> Path:
    path = tmp / "campaign.toml"
    path.write_text(CAMPAIGN.format(role=role, fold=fold, prep_seconds=prep_seconds))
    return path


def _registered(campaign: Path) -> tuple[Path, str]:
    text = campaign.read_text()
    reg = compute_registration(parse_campaign(text, campaign.parent), text.encode())
    return write_registration(reg, campaign.parent / "registered")


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "efold.controller", *args],
                          capture_output=True, text=True, timeout=timeout)


def _wait(condition: object, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _in_cgroup(rel: str) -> list[int]:
    """Live processes whose /proc/PID/cgroup puts them in ``rel`` or below."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cgroup") as f:
                line = next((ln for ln in f.read().splitlines() if ln.startswith("0::")), "")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        path = line[3:]
        if (path == rel or path.startswith(rel + "/")) and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def _run_cgroup(run: Path) -> str:
    with JournalReader(run) as journal:
        assert journal.meta("containment") == "cgroup"
        rel = journal.meta("run_cgroup")
    assert rel is not None
    return rel


def _command(command: str, campaign: Path, tmp: Path) -> list[str]:
    if command == "fold-check":
        return ["fold", "check", _role(campaign), "--campaign", str(campaign)]
    path, sha = _registered(campaign)
    if command == "pilot":
        return ["pilot", "--faux", "--registration", str(path), "--sha256", sha,
                "--run-dir", str(tmp / "run"), "--no-progress"]
    return [command, "--registration", str(path), "--sha256", sha]


def _role(campaign: Path) -> str:
    match = re.search(r'^roles = \["([^"]+)"\]', campaign.read_text(), re.MULTILINE)
    assert match is not None
    return match.group(1)


@pytest.mark.parametrize("kind", ["command", "entry-point"])
@pytest.mark.parametrize("command", ["pilot", "plan", "preflight", "fold-check"])
def test_a_killed_controller_leaves_nothing_that_recover_cannot_name(
        tmp_path: Path, kind: str, command: str) -> None:
    token = f"efold-escape-{uuid.uuid4().hex}"
    root: Path | None = None
    with escaping(kind, tmp_path, token, "hang") as campaign:
        args = _command(command, campaign, tmp_path)
        err = tmp_path / "stderr"
        with open(err, "w") as stderr:
            controller = subprocess.Popen([sys.executable, "-m", "efold.controller", *args],
                                          stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            _wait(lambda: escaping_fold.escaped(token) or controller.poll() is not None)
            assert controller.poll() is None, err.read_text()
        finally:
            controller.kill()
            controller.wait()
        try:
            if command == "pilot":
                target = tmp_path / "run"
            else:
                match = re.search(r"private root (\S+) \(", err.read_text())
                assert match is not None, err.read_text()
                root = target = Path(match.group(1))
                assert root.is_dir()  # left by the kill, where the line said
            run = target if command == "pilot" else target / "run"
            rel = _run_cgroup(run)
            escaped = escaping_fold.escaped(token)
            assert len(escaped) == 1
            # Nothing ties the survivor to the run but its cgroup.
            with open(f"/proc/{escaped[0]}/environ", "rb") as f:
                assert f.read() == b""
            recovered = _cli("recover", str(target))
            assert recovered.returncode == 1, recovered.stdout + recovered.stderr
            assert recovered.stdout.startswith("NOT reconciled")
            assert f"pid={escaped[0]} " in recovered.stdout
            assert "tie=cgroup" in recovered.stdout
            assert escaped[0] in {s.pid for s in observe(run).survivors}
            reaped = _cli("reap", str(target))
            assert reaped.returncode == 0, reaped.stdout + reaped.stderr
            assert escaping_fold.holders(token) == []
            assert _in_cgroup(rel) == []
            after = _cli("recover", str(target))
            assert after.returncode == 0, after.stdout
            assert after.stdout.startswith("reconciled")
            assert "cgroup containment" in after.stdout
        finally:
            if root is not None:
                shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("kind", ["command", "entry-point"])
@pytest.mark.parametrize("mode", ["answer", "hang"])
def test_a_live_controller_contains_the_escaped_process(tmp_path: Path, kind: str,
                                                       mode: str) -> None:
    token = f"efold-escape-{uuid.uuid4().hex}"
    with escaping(kind, tmp_path, token, mode, prep_seconds=4.0) as campaign:
        result = _cli(*_command("pilot", campaign, tmp_path))
        # Nothing left the moment the command returns: no waiting, no reap.
        assert escaping_fold.holders(token) == [], result.stdout + result.stderr
        assert "Traceback" not in result.stderr, result.stderr
        assert result.returncode in (0, 3), result.stdout + result.stderr  # 3: stopped
        run = tmp_path / "run"
        assert _in_cgroup(_run_cgroup(run)) == []
        with JournalReader(run) as journal:
            stops = {row["code"] for row in journal.rows("stops")}
            leaders = journal.rows("launches")
        assert "lookup_worker_lost" in stops  # the escaped process was seen, not missed
        assert all(row["cgroup"] for row in leaders)
        report = observe(run)
        assert report.reconciled, report.verdict
        assert report.cgroup_state == "gone"
