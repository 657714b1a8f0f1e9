"""A template started as ``pilot`` begins (``template.prestart_template``), before the
run it will serve exists: taken by the run when its program and routes fit (placed, then
journaled, before any fork request), else killed and reaped; and never left behind,
whether the command refuses, ends, or dies before taking it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from proc_harness import FAST, Run, alive, make_assignment, wait_until, welcome

from efold.controller.cli import main
from efold.controller.commands import pilot as pilot_command
from efold.controller.processes.launcher import supervise
from efold.controller.processes.subreaper import DIRECT_CHILDREN
from efold.controller.processes.template import (
    TEMPLATE_KIND,
    EarlyTemplate,
    prestart_template,
    running_template,
)
from efold.identity import ProcessIdentity, identity_of
from efold.ipc import Prepared
from efold.registry.journal import JournalReader

pytestmark = pytest.mark.anyio


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
        prep = make_assignment(run, kind="prep")
        async with supervise(run.journal, prep, policy=FAST, template=template) as handle:
            await handle.accept_hello(welcome(), timeout=10)
            assert isinstance(await handle.channel.receive(timeout=10), Prepared)
            await handle.acknowledge_done()
        assert (await handle.close()).status == 0
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
        from efold.controller.processes.template import prestart_template
        early = prestart_template("faux")
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

    def prestart(*args: Any, **kwargs: Any) -> EarlyTemplate | None:
        early = prestart_template(*args, **kwargs)
        if early is not None and early._spawned is not None:
            made.append(early._spawned.identity)
        return early

    monkeypatch.setattr(pilot_command, "prestart_template", prestart)
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
        prep = make_assignment(run, kind="prep")
        async with supervise(run.journal, prep, policy=FAST, template=template) as handle:
            await handle.accept_hello(welcome(), timeout=10)
            assert isinstance(await handle.channel.receive(timeout=10), Prepared)
            await handle.acknowledge_done()
        assert (await handle.close()).status == 0
        assert template.alive  # forked by the new template, not spawned
