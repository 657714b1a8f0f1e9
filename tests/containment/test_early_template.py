"""A template started as ``pilot`` begins (``template_spawn.EarlyTemplate``), before the
run it will serve exists: taken by the run when its program and routes fit (placed, then
journaled, before any fork request), else killed and reaped; and never left behind,
whether the command refuses, ends, or dies before taking it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from proc_harness import FAST, Run, alive, make_assignment, wait_until, welcome

from efold.controller.cli import main
from efold.controller.processes.launcher import supervise
from efold.controller.processes.subreaper import DIRECT_CHILDREN
from efold.controller.processes.template import TEMPLATE_KIND, Template, running_template
from efold.controller.processes.template_spawn import EarlyTemplate
from efold.identity import ProcessIdentity, identity_of
from efold.ipc import Prepared
from efold.protocol.tasks import RouteKind
from efold.registry.journal import JournalReader

pytestmark = pytest.mark.anyio


def prestart_template(routes: RouteKind) -> EarlyTemplate:
    early = EarlyTemplate()
    early.start(routes)
    return early


_INTERRUPTIONS_MASK = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))


def _blocked(pid: int) -> int:
    """``pid``'s blocked signals (its ``SigBlk``)."""
    with open(f"/proc/{pid}/status") as f:
        line = next(line for line in f if line.startswith("SigBlk:"))
    return int(line.split()[1], 16)


async def _one_prep(run: Run, template: Template) -> None:
    """A prep child forked by ``template``, run to a clean exit."""
    prep = make_assignment(run, kind="prep")
    async with supervise(run.journal, prep, policy=FAST, template=template) as handle:
        await handle.accept_hello(welcome(), timeout=10)
        assert isinstance(await handle.channel.receive(timeout=10), Prepared)
        await handle.acknowledge_done()
    assert (await handle.close()).status == 0


def _gone(pid: int) -> bool:
    """Reaped: no process of that pid is our child any more (a live or a zombie child
    still is; a recycled pid would not be ours)."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return False


async def test_a_fitting_early_template_is_the_runs_template(run: Run) -> None:
    early = prestart_template("real")
    assert early is not None
    spawned = early._spawned
    assert spawned is not None and spawned.identity.pid in DIRECT_CHILDREN
    async with running_template(run.journal, run.epoch, policy=FAST, routes="real",
                                early=early) as template:
        assert template.identity == spawned.identity  # taken, not spawned again
        early.discard()  # a no-op once taken: the command's own end calls it too
        assert alive(spawned.identity.pid, spawned.identity.start_time)
        await _one_prep(run, template)
        # Spawned with SIGINT and SIGTERM held (so that an interruption's exception never
        # lands inside the spawn), it takes them again as any child does.
        assert _blocked(spawned.identity.pid) & _INTERRUPTIONS_MASK == 0
    with JournalReader(run.run_dir) as reader:
        rows = reader.rows("launches")
    assert [(r["kind"], r["pid"], r["exit_status"]) for r in rows] == [
        (TEMPLATE_KIND, spawned.identity.pid, 0), ("prep", rows[1]["pid"], 0)]
    assert rows[0]["marker"] == spawned.marker
    assert _gone(spawned.identity.pid) and spawned.identity.pid not in DIRECT_CHILDREN


async def test_an_early_template_that_does_not_fit_is_killed_and_another_spawned(
        run: Run) -> None:
    early = prestart_template("real")
    assert early is not None and early._spawned is not None
    unfit = early._spawned.identity
    async with running_template(run.journal, run.epoch, policy=FAST, routes="faux",
                                early=early) as template:
        assert template.identity.pid != unfit.pid
        assert _gone(unfit.pid) and unfit.pid not in DIRECT_CHILDREN
    with JournalReader(run.run_dir) as reader:
        assert [r["pid"] for r in reader.rows("launches")] == [template.identity.pid]


def test_a_discarded_early_template_is_killed_and_reaped() -> None:
    early = prestart_template("faux")
    assert early is not None and early._spawned is not None
    pid = early._spawned.identity.pid
    early.discard()
    assert _gone(pid) and pid not in DIRECT_CHILDREN
    early.discard()  # idempotent


def test_a_controller_that_dies_before_taking_it_leaves_nothing(tmp_path: Path) -> None:
    """SIGKILL of the command between the prestart and the run: the template reads end
    of file on its control socket (once its imports are done) and leaves by itself."""
    script = textwrap.dedent("""
        import os, sys, time
        from efold.controller.processes.template_spawn import EarlyTemplate
        early = EarlyTemplate()
        early.start("faux")
        s = early._spawned.identity
        print(s.pid, s.start_time, flush=True)
        time.sleep(60)
    """)
    command = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                               text=True)
    try:
        assert command.stdout is not None
        pid, start = (int(v) for v in command.stdout.readline().split())
        assert identity_of(pid).start_time == start
        command.send_signal(signal.SIGKILL)
        command.wait()
        # Orphaned (to init or the nearest subreaper, which reaps it): gone in seconds.
        assert wait_until(lambda: not alive(pid, start), timeout=30)
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[ProcessIdentity]:
    """Record the identity of every template ``pilot`` starts early."""
    made: list[ProcessIdentity] = []
    start = EarlyTemplate.start

    def recorded(self: EarlyTemplate, *args: Any, **kwargs: Any) -> None:
        start(self, *args, **kwargs)
        if self.identity is not None:
            made.append(self.identity)

    monkeypatch.setattr(EarlyTemplate, "start", recorded)
    return made


def test_pilot_runs_on_the_template_it_started_early(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    made = _recording(monkeypatch)
    run = tmp_path / "run"
    result = CliRunner().invoke(main, ["pilot", "--faux", "--limit", "1", "--roles", "native",
                                       "--run-dir", str(run), "--no-progress"])
    assert result.exit_code == 0, result.output
    (early,) = made
    with JournalReader(run) as reader:
        (row,) = [r for r in reader.rows("launches") if r["kind"] == TEMPLATE_KIND]
    assert (row["pid"], row["start_time"], row["exit_status"]) == (
        early.pid, early.start_time, 0)
    assert _gone(early.pid) and early.pid not in DIRECT_CHILDREN


def test_a_refused_pilot_kills_its_early_template(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    made = _recording(monkeypatch)
    registration = tmp_path / "registration.json"
    registration.write_text("{}")
    result = CliRunner().invoke(main, ["pilot", "--faux", "--registration", str(registration),
                                       "--sha256", "0" * 64, "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2 and "refused: " in result.output, result.output
    (early,) = made
    assert _gone(early.pid) and early.pid not in DIRECT_CHILDREN
    assert not (tmp_path / "run").exists()


def test_pilot_with_spawned_children_starts_no_template(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = _recording(monkeypatch)
    run = tmp_path / "run"
    result = CliRunner().invoke(main, ["pilot", "--faux", "--limit", "1", "--roles", "native",
                                       "--launcher", "spawn", "--run-dir", str(run),
                                       "--no-progress"])
    assert result.exit_code == 0, result.output
    assert made == []
    with JournalReader(run) as reader:
        assert TEMPLATE_KIND not in {r["kind"] for r in reader.rows("launches")}


async def test_an_early_template_that_died_meanwhile_is_reaped_and_another_spawned(
        run: Run) -> None:
    early = prestart_template("real")
    assert early is not None and early._spawned is not None
    dead = early._spawned.identity
    os.kill(dead.pid, signal.SIGKILL)
    assert wait_until(lambda: not alive(dead.pid, dead.start_time))
    async with running_template(run.journal, run.epoch, policy=FAST, routes="real",
                                early=early) as template:
        assert template.identity.pid != dead.pid
        assert _gone(dead.pid) and dead.pid not in DIRECT_CHILDREN
        await _one_prep(run, template)
        assert template.alive  # forked by the new template, not spawned


def _template_of(parent: int) -> tuple[int, int] | None:
    """(pid, start time) of the template ``parent`` started, if it has one yet."""
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except (OSError, IndexError):
            continue
        if int(stat[1]) == parent and b"--control-fd" in cmdline:
            return int(entry), int(stat[19])
    return None


def test_sigterm_before_the_run_kills_the_early_template_first(tmp_path: Path) -> None:
    """SIGTERM while the template imports and the command still loads its registration
    (before the run's own signal watcher): the command ends 143 as the default action
    would, but only once it has killed and reaped its template."""
    for attempt in range(5):
        command = subprocess.Popen(
            [sys.executable, "-m", "efold.controller", "pilot", "--faux", "--no-progress",
             "--runs", str(tmp_path / f"runs{attempt}")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while (template := _template_of(command.pid)) is None:
                assert time.monotonic() < deadline, "no template started"
                time.sleep(0.002)
            command.send_signal(signal.SIGTERM)
            _, err = command.communicate(timeout=60)
        finally:
            if command.poll() is None:
                command.kill()
                command.wait()
        assert command.returncode == 143 and "Traceback" not in err, err
        # Gone as the command ended, never left to notice it (an orphan would still be
        # importing here, or reading its end of file).
        assert not alive(*template)
