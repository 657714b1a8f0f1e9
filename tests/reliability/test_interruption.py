"""Ctrl-C and SIGTERM end a run first-class: admission closes, the child in flight is
contained, its slot is recorded ``interrupted``, the reports are written with an
"interrupted" banner, the run directory and the next step are printed, and the exit
status is 130 (143). A second signal during that shutdown never skips containment."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from efold_pilot_kit import HERE, TEST_CONCURRENCY, alive, journal_rows

from efold.controller.rundirs.recovery import observe
from efold.errors import Code

CONTROLLER = """
import sys
sys.path.insert(0, {here!r})
from efold_pilot_kit import faulty_program, small_registration
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir
reg, raw = small_registration()
out = run_pilot(reg, raw, claim_run_dir({run!r}), program=faulty_program({mode!r}, {marker!r}))
print("interrupted", out.interrupted, flush=True)
"""



def _wait_for(predicate, process: subprocess.Popen[bytes], seconds: float = 90,
              poll: float = 0.05) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert process.poll() is None, "the controller ended before the fault point"
        assert time.monotonic() < deadline, "timed out waiting for the fault point"
        time.sleep(poll)



@pytest.mark.parametrize("signals", [(signal.SIGINT,), (signal.SIGINT, signal.SIGINT),
                                     (signal.SIGTERM,)])
def test_an_interrupt_contains_the_child_in_flight_and_writes_the_reports(
        tmp_path: Path, signals: tuple[int, ...]) -> None:
    run = tmp_path / "run"
    code = CONTROLLER.format(here=str(HERE), run=str(run), marker=str(tmp_path / "marker"),
                           mode="hang" if len(signals) == 1 else "hang-through-sigterm")
    controller = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
    try:
        # The hanging probe child has consumed a hold: a request is "in flight".
        _wait_for(lambda: journal_rows(run, "SELECT 1 FROM holds WHERE state = 'consumed'"),
                  controller)
        (child,) = journal_rows(run, "SELECT pid FROM launches WHERE exited_ns IS NULL "
                                 "AND kind = 'probe'")[0:1]
        for signum in signals:
            controller.send_signal(signum)
            time.sleep(0.05)
        out, err = controller.communicate(timeout=60)
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    assert controller.returncode == 0, err.decode()
    assert out.decode().split() == ["interrupted", str(signals[0])]
    assert not alive(int(child[0]))  # type: ignore[arg-type]
    stops = journal_rows(run, "SELECT code FROM stops WHERE sticky = 1")
    assert (Code.INTERRUPTED.value,) in stops
    statuses = dict(journal_rows(run, "SELECT slot, code FROM slot_status"))  # type: ignore[arg-type]
    receipts = [json.loads(p.read_bytes()) for p in sorted((run / "receipts").iterdir())]
    assert len(receipts) == 16 == len(statuses)  # every slot visited, none launched after
    # The hung child, and (at EFOLD_TEST_CONCURRENCY > 1) any other admitted one in flight.
    flying = [r for r in receipts if r["status"] == "incomplete"]
    assert 1 <= len(flying) <= TEST_CONCURRENCY
    assert all(r["code"] == Code.INTERRUPTED.value for r in flying)
    assert any(r["spend"]["retained_units"] > 0 for r in flying)  # the consumed hold counts
    later = [r for r in receipts if r["status"] == "unadmitted"]
    assert later and all(r["code"] == Code.INTERRUPTED.value for r in later)
    for name in ("results.json", "summary.md", "report.html"):
        assert (run / name).exists()
    report = observe(run)
    assert report.reconciled, report.verdict


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_the_run_opens_ends_it_interrupted(tmp_path: Path,
                                                          signum: int) -> None:
    """The lease is taken and the fork-server template is starting (a launch) when the
    signal comes: the run opens, admits nothing and ends ``interrupted``, its template
    contained and its lease released; never a controller killed by the signal with
    its lease held and a launch never seen to end (a shard whose keeper passed on its
    driver's death mid-opening)."""
    run, marker = tmp_path / "run", tmp_path / "marker"
    code = CONTROLLER.format(here=str(HERE), run=str(run), marker=str(marker),
                             mode="slow-template")
    controller = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
    try:
        _wait_for(marker.exists, controller)  # the template has started, not yet ready
        assert journal_rows(run, "SELECT kind FROM launches") == [("template",)]
        controller.send_signal(signum)
        out, err = controller.communicate(timeout=60)
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    assert controller.returncode == 0, err.decode()
    assert out.decode().split() == ["interrupted", str(signum)]
    assert (Code.INTERRUPTED.value,) in journal_rows(run, "SELECT code FROM stops WHERE sticky = 1")
    receipts = [json.loads(p.read_bytes()) for p in (run / "receipts").iterdir()]
    assert len(receipts) == 16
    assert all(r["status"] == "unadmitted" and r["code"] == Code.INTERRUPTED.value
               for r in receipts)
    assert journal_rows(run, "SELECT kind FROM launches") == [("template",)]
    report = observe(run)
    assert report.reconciled, report.verdict


def test_the_pilot_command_exits_130_and_says_what_to_do_next(tmp_path: Path) -> None:
    run = tmp_path / "run"
    controller = subprocess.Popen(
        [sys.executable, "-m", "efold.controller", "pilot", "--faux", "--run-dir", str(run),
         "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "200"},
    )
    try:
        _wait_for(lambda: len(journal_rows(run, "SELECT slot FROM receipts")) >= 3, controller)
        controller.send_signal(signal.SIGINT)
        out, err = controller.communicate(timeout=60)
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    text = out.decode()
    assert controller.returncode == 130, (text, err.decode())
    assert "Aborted" not in err.decode() and "Traceback" not in err.decode()
    assert f"run: {run}" in text and "interrupted:" in text and "recover" in text
    results = json.loads((run / "results.json").read_bytes())
    assert results["execution"]["visited"] == results["execution"]["planned"]
    assert observe(run).reconciled
    # What ran, from the run itself: never "reports for 260 of 260 slots"; and after the
    # interruption no progress line counts the slots visited without a launch.
    assert f"interrupted: {_what_ran(run)}; the reports are in {run}" in text.splitlines()
    assert not [line for line in text.splitlines()
                if line.startswith("probe slots: ") and " in " in line]


def test_ctrl_c_before_the_runs_own_handling_exits_130_and_leaves_no_process(
        tmp_path: Path) -> None:
    """SIGINT once ``pilot`` has started its template but before the run's signal
    watcher (the registration's checks, the run's claim): 130 and a plain word, never
    click's "Aborted!" and status 1; the template is killed and reaped on the way out."""
    run = tmp_path / "run"
    controller = subprocess.Popen(
        [sys.executable, "-m", "efold.controller", "pilot", "--faux", "--run-dir", str(run),
         "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    children = Path(f"/proc/{controller.pid}/task/{controller.pid}/children")
    try:
        _wait_for(lambda: bool(children.read_text().split()), controller, poll=0.002)
        (template,) = (int(pid) for pid in children.read_text().split())
        controller.send_signal(signal.SIGINT)
        out, err = controller.communicate(timeout=60)
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    assert controller.returncode == 130, (out.decode(), err.decode())
    assert "Aborted" not in err.decode() and "Traceback" not in err.decode()
    assert "interrupted" in out.decode() + err.decode()
    assert not Path(f"/proc/{template}").exists()


def _what_ran(run: Path) -> str:
    """``N answered, M not admitted: interrupted`` and every other status, from the
    receipts the run wrote."""
    receipts = [json.loads(p.read_bytes()) for p in (run / "receipts").glob("*.json")]
    answered = sum(r["status"] == "completed" for r in receipts)
    refused = sum(r["status"] == "unadmitted" and r["code"] == Code.INTERRUPTED.value
                  for r in receipts)
    others: dict[str, int] = {}
    for r in receipts:
        if r["status"] != "completed" and not (r["status"] == "unadmitted"
                                               and r["code"] == Code.INTERRUPTED.value):
            others[r["status"]] = others.get(r["status"], 0) + 1
    assert answered >= 3 and refused > 0  # the Ctrl-C came mid-run
    return ", ".join([f"{answered:,} answered", f"{refused:,} not admitted: interrupted",
                      *(f"{n:,} {status}" for status, n in sorted(others.items()))])


def test_ctrl_c_under_a_bar_stops_the_bar_and_counts_what_ran(tmp_path: Path) -> None:
    """In a terminal, rich's live bar would redraw over the interruption notice: the bar
    is stopped first, so nothing moves the cursor back over the notice afterwards."""
    run = tmp_path / "run"
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    controller = subprocess.Popen(
        [sys.executable, "-m", "efold.controller", "pilot", "--faux", "--run-dir", str(run)],
        stdin=secondary, stdout=secondary, stderr=secondary, env=env | {"TERM": "xterm"})
    os.close(secondary)
    shown: list[bytes] = []
    reader = threading.Thread(target=lambda: shown.extend(_read_all(primary)), daemon=True)
    reader.start()  # a terminal nobody reads would block the controller's writes
    try:
        _wait_for(lambda: len(journal_rows(run, "SELECT slot FROM receipts")) >= 3, controller)
        controller.send_signal(signal.SIGINT)
        controller.wait(timeout=120)
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
        reader.join(timeout=30)
        os.close(primary)
    text = b"".join(shown).decode(errors="replace")
    assert controller.returncode == 130, text
    assert "\x1b[1A" in text  # a live bar was drawn (and redrawn) before the interrupt
    notice = text.index("efold: SIGINT: admission closed")
    after = text[notice:]
    assert "\x1b[1A" not in after and "\x1b[2K" not in after, after  # no redraw over it
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", after).replace("\r", "")
    assert f"interrupted: {_what_ran(run)}; the reports are in {run}" in plain.splitlines()


def _read_all(fd: int) -> Iterator[bytes]:
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: every writer closed the terminal
            return
        if not data:
            return
        yield data
