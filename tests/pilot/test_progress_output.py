"""What the operator sees while a pilot runs (``controller.pilot.pilot_view``), and the run's
``controller.log`` (``controller.rundirs.run_log``): real ``efold-controller pilot --faux`` runs
of the small campaign, stdout to a pipe (and once to a pseudo-terminal)."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import stat
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest
from efold_pilot_kit import faulty_program, small_registration
from ordinary_user import without_containment_warning

from efold.controller.campaigns.campaign import suite_items
from efold.controller.campaigns.registration import Registration, write_registration
from efold.controller.pilot.pilot import ProgressEvent, run_pilot
from efold.controller.pilot.pilot_view import (
    RunView,
    Verbosity,
    accuracy_text,
    next_mark,
    spend_text,
)
from efold.controller.rundirs.run_log import LOG_NAME, RunLog
from efold.controller.rundirs.runroot import claim_run_dir
from efold.digests import sha256_hex
from efold.guard import units_to_usd
from efold.report import decode_results
from efold.report.numbers import spend_line

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
LOG_LINE = re.compile(STAMP + r" [a-z_]+( [a-z_]+=[A-Za-z0-9._:#+-]+)*")
LOG_KEYS = {"state", "campaign", "faux", "smoke", "route", "phase", "total", "done",
            "seconds", "scored", "correct", "run_settled_units", "slot_settled_units",
            "run_retained_units", "run_open_units", "key", "role", "ready",
            "elapsed_ms", "slot", "status", "outcome", "code", "excluded", "lookup_calls",
            "kind", "cause", "finished", "signal", "verdict", "planned", "visited",
            "contained"}


@dataclass(frozen=True)
class Registered:
    root: Path
    reg: Registration
    file: Path
    sha: str


@dataclass(frozen=True)
class Pilot:
    run: Path
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Registered:
    root = tmp_path_factory.mktemp("progress")
    reg, _ = small_registration()
    file, sha = write_registration(reg, root / "reg")
    return Registered(root, reg, file, sha)


def pilot_args(r: Registered, run: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "efold.controller", "pilot", "--faux", "--registration",
            str(r.file), "--sha256", r.sha, "--run-dir", str(r.root / run), *extra]


def piped(r: Registered, run: str, *extra: str) -> Pilot:
    done = subprocess.run(pilot_args(r, run, *extra), cwd=r.root, capture_output=True,
                          text=True, timeout=600)
    return Pilot(r.root / run, done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def normal(registered: Registered) -> Pilot:
    return piped(registered, "normal", "--json")


@pytest.fixture(scope="module")
def verbose(registered: Registered) -> Pilot:
    return piped(registered, "verbose", "--json", "--verbose")


def receipts(run: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted((run / "receipts").glob("*.json"))]


def expected_figures(run: Path) -> tuple[str, str]:
    """The end-of-run accuracy and spend, from the run's own records."""
    scored = [r for r in receipts(run) if r["status"] == "completed" and "excluded" not in r]
    correct = sum(r.get("correct") is True for r in scored)
    results = decode_results((run / "results.json").read_bytes())
    assert results.money is not None
    return accuracy_text(correct, len(scored)), spend_line(results.money, results.cap, True)


def phase_lines(stdout: str, label: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(label + ": ")]


# -- stdout to a pipe ------------------------------------------------------------------


def test_a_piped_run_prints_plain_phase_lines_between_its_run_line_and_its_json(
        normal: Pilot) -> None:
    assert normal.returncode == 0, normal.stdout + normal.stderr
    lines = normal.stdout.splitlines()
    assert lines[0] == f"run: {normal.run}"
    assert json.loads(lines[-1])["status"] == "complete"
    assert not ANSI.search(normal.stdout) and without_containment_warning(normal.stderr) == ""
    slots = len(receipts(normal.run))
    acc, spend = expected_figures(normal.run)

    probe = phase_lines(normal.stdout, "probe slots")
    assert probe[0] == f"probe slots: 0/{slots} ..."
    assert re.fullmatch(rf"probe slots: {slots}/{slots} in \d+\.\d s, \d+\.\d slots/s, "
                        + re.escape(f"{acc}, {spend}"), probe[-1]), probe[-1]
    middle = probe[1:-1]
    assert 1 <= len(middle) <= 9  # at most one line per tenth of the phase
    counts = [int(line.split()[2].split("/")[0].rstrip(",")) for line in middle]
    assert counts == sorted(set(counts)) and all(0 < c < slots for c in counts)

    checkpoints = phase_lines(normal.stdout, "checkpoints")
    total = int(checkpoints[0].split("/")[1].split()[0])
    assert checkpoints[0] == f"checkpoints: 0/{total} ..."
    assert re.fullmatch(rf"checkpoints: {total}/{total} in \d+\.\d s", checkpoints[-1])
    # the phases come before the summary, in order
    assert lines.index(checkpoints[-1]) < lines.index(probe[0]) < lines.index(probe[-1]) \
        < next(i for i, line in enumerate(lines) if line.startswith("results: "))


def test_verbose_adds_one_stderr_line_per_slot_and_checkpoint_and_keeps_stdout(
        verbose: Pilot, normal: Pilot) -> None:
    assert verbose.returncode == 0, verbose.stdout + verbose.stderr
    lines = verbose.stdout.splitlines()
    assert lines[0] == f"run: {verbose.run}" and json.loads(lines[-1])["status"] == "complete"
    assert [line.split(":")[0] for line in lines] == \
        [line.split(":")[0] for line in normal.stdout.splitlines()]  # same stdout shape
    visited = receipts(verbose.run)
    slot_lines = [line for line in verbose.stderr.splitlines() if line.startswith("slot ")]
    assert len(slot_lines) == len(visited) == json.loads(lines[-1])["visited"]
    by_slot = {r["slot"]: r for r in visited}
    for line in slot_lines:
        m = re.fullmatch(r"slot (\S+) \((\S+)\): (\w+), (\w+), (\d+) lookup calls, (\d+) ms",
                         line)
        assert m is not None, line
        r = by_slot[m[1]]
        assert (m[2], m[3], m[4], int(m[5]), int(m[6])) == (
            r["role"], r["status"], r.get("outcome") or r.get("code"),
            r.get("lookup_calls", 0), r.get("elapsed_ms", 0))
    prepared = sorted(p.name for p in (verbose.run / "checkpoints").iterdir())
    ckpt = [line for line in verbose.stderr.splitlines() if line.startswith("checkpoint ")]
    assert sorted(line.split()[1] for line in ckpt) == prepared
    assert all(re.fullmatch(r"checkpoint \S+ \(\S+\): ready, \d+ ms", line) for line in ckpt)
    # --verbose also names what holds the run's processes, first (cgroup or fallback).
    assert verbose.stderr.startswith(("containment: cgroup", "warning: containment:"))
    assert len(slot_lines) + len(ckpt) + 1 == len(verbose.stderr.splitlines())


def test_quiet_prints_only_the_run_line_the_paths_and_the_json(
        registered: Registered) -> None:
    quiet = piped(registered, "quiet", "--json", "--quiet")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    run = quiet.run
    lines = quiet.stdout.splitlines()
    assert lines[:4] == [f"run: {run}", f"results: {run / 'results.json'}",
                         f"summary: {run / 'summary.md'}", f"report:  {run / 'report.html'}"]
    assert len(lines) == 5 and json.loads(lines[4])["run"] == str(run)
    assert without_containment_warning(quiet.stderr) == ""
    assert (run / LOG_NAME).is_file()  # the log is written all the same


def test_quiet_says_a_stop_on_stderr_only(registered: Registered) -> None:
    # A run deadline of a millisecond: admission closes at once, the run stops.
    reg, _ = small_registration(extra="[deadlines]\nrun_seconds = 0.001\n")
    file, sha = write_registration(reg, registered.root / "reg-deadline")
    done = subprocess.run(
        [sys.executable, "-m", "efold.controller", "pilot", "--faux", "--registration",
         str(file), "--sha256", sha, "--run-dir", str(registered.root / "deadline"), "-q",
         "--json"], cwd=registered.root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 3, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 5 and json.loads(lines[-1])["status"] == "stopped"
    assert [line.split(":")[0] for line in lines[:-1]] == ["run", "results", "summary",
                                                           "report"]
    assert re.fullmatch(r"stopped: [a-z_]+\n", without_containment_warning(done.stderr)), \
        done.stderr


def test_quiet_prints_no_registration_lines_for_a_registration_it_made(
        registered: Registered) -> None:
    # A subset flag makes a new registration: without --quiet its two lines follow the
    # run: line; --quiet means only the result (it stays in RUN/registration.json).
    quiet = piped(registered, "quiet-subset", "--limit", "1", "--quiet")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    lines = quiet.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["run", "results", "summary", "report"]
    assert not any(line.startswith(("registration:", "sha256:")) for line in lines)
    assert (quiet.run / "registration.json").is_file()
    shown = piped(registered, "shown-subset", "--limit", "1", "--no-progress")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.splitlines()[1:3] == [
        f"registration: {shown.run / 'registration.json'}",
        f"sha256: {sha256_hex((shown.run / 'registration.json').read_bytes())}"]


@pytest.mark.parametrize(("extra", "named"), [
    (["--authorization", "auth.json"], "--authorization apply to --real runs"),
    (["--trust", "approver.pub"], "--trust apply to --real runs"),
    (["--authorization", "auth.json", "--trust", "approver.pub"],
     "--authorization and --trust apply to --real runs"),
])
def test_faux_with_real_route_options_is_a_usage_error(
        registered: Registered, extra: list[str], named: str) -> None:
    done = piped(registered, "faux-auth", *extra)
    assert done.returncode == 2 and done.stdout == ""
    assert "Usage:" in done.stderr and named in done.stderr
    assert not done.run.exists()


def test_quiet_and_verbose_together_are_a_usage_error(registered: Registered) -> None:
    done = piped(registered, "both", "-q", "-v")
    assert done.returncode == 2 and "--quiet and --verbose are exclusive" in done.stderr
    assert not done.run.exists()


# -- the run's log ---------------------------------------------------------------------


def test_the_log_has_one_content_free_line_per_phase_checkpoint_and_slot(
        registered: Registered, normal: Pilot) -> None:
    log = normal.run / LOG_NAME
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    text = log.read_text()
    lines = text.splitlines()
    for line in lines:
        assert LOG_LINE.fullmatch(line), line
        assert {f.split("=")[0] for f in line.split()[2:]} <= LOG_KEYS, line
    events = [line.split()[1] for line in lines]
    visited = receipts(normal.run)
    assert events.count("slot") == len(visited)
    assert events.count("checkpoint") == len(list((normal.run / "checkpoints").iterdir()))
    assert events.count("phase") == 4  # prep and probe, start and end
    assert lines[0].split()[1:3] == ["run", "state=start"]
    end = dict(f.split("=") for f in lines[-1].split()[2:])
    money = json.loads((normal.run / "results.json").read_text())["money"]
    assert end == {"state": "end", "status": "complete", "verdict": "complete",
                   "planned": str(len(visited)), "visited": str(len(visited)),
                   "run_settled_units": str(money["settled"]["units"]),
                   "run_retained_units": str(money["retained"]["units"]),
                   "run_open_units": "0"}
    # One name per sum: a slot line carries the slot's own settlement, a checkpoint or
    # phase line the run's running total, which ends at the journal's settled figure.
    slot_sum = sum(int(dict(f.split("=") for f in line.split()[2:])["slot_settled_units"])
                   for line in lines if line.split()[1] == "slot")
    assert slot_sum == sum(r["spend"]["settled_units"] for r in visited)  # type: ignore[index]
    probe_end = next(line for line in lines if "phase=probe" in line and "state=end" in line)
    assert f"run_settled_units={money['settled']['units']}" in probe_end.split()
    assert not any("settled_units=" in f and not f.startswith(("run_", "slot_"))
                   for line in lines for f in line.split())
    # no path (the run's own included), no question, no secret of the corpus
    assert "/" not in text and str(registered.root) not in text
    for item in suite_items(registered.reg.campaign):
        for probe in item.probes.probes:
            assert probe.question not in text
            if probe.secret:
                assert probe.secret not in text


def test_other_commands_read_a_run_with_its_log(registered: Registered, normal: Pilot) -> None:
    for command in (["show", str(normal.run)], ["recover", str(normal.run)],
                    ["reap", str(normal.run)], ["runs", str(registered.root)],
                    ["aggregate", str(normal.run), "--output", str(registered.root / "agg")]):
        done = subprocess.run([sys.executable, "-m", "efold.controller", *command],
                              cwd=registered.root, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (command, done.stdout, done.stderr)


# -- a terminal ------------------------------------------------------------------------


def _read_all(fd: int) -> Iterator[bytes]:
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            return
        if not data:
            return
        yield data


def test_in_a_terminal_the_bar_shows_rate_eta_accuracy_and_spend(
        registered: Registered) -> None:
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
    # Its size is the terminal's (not a COLUMNS or LINES the test runner inherited).
    env = {k: v for k, v in os.environ.items()
           if k not in ("NO_COLOR", "TERM", "COLUMNS", "LINES")}
    with subprocess.Popen(pilot_args(registered, "terminal"), cwd=registered.root,
                          stdin=secondary, stdout=secondary, stderr=subprocess.PIPE,
                          env=env | {"TERM": "xterm"}) as child:
        os.close(secondary)
        shown = b"".join(_read_all(primary)).decode(errors="replace")
        os.close(primary)
        assert child.stderr is not None
        errors = child.stderr.read().decode()
    assert child.returncode == 0, shown + errors
    assert shown.startswith(f"run: {registered.root / 'terminal'}")
    assert ANSI.search(shown)  # a terminal: rich drew a bar
    plain = ANSI.sub("", shown)
    slots = len(receipts(registered.root / "terminal"))
    acc, spend = expected_figures(registered.root / "terminal")
    assert re.search(rf"probe slots .*{slots}/{slots} +\d+\.\d slots/s +eta \d:\d\d:\d\d "
                     rf"+\d:\d\d:\d\d +{re.escape(acc)} +{re.escape(spend)}", plain), plain
    assert re.search(r"checkpoints .* \d+\.\d ckpt/s", plain)
    assert not phase_lines(plain, "probe slots")  # no plain progress lines under a bar


# -- the seam and its parts ------------------------------------------------------------


def test_the_progress_seam_reports_each_checkpoint_and_each_slot_once(
        tmp_path: Path) -> None:
    reg, raw = small_registration()
    events: list[ProgressEvent] = []
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run, progress=events.append)
    prep = [e for e in events if e.phase == "prep"]
    probe = [e for e in events if e.phase == "probe"]
    assert events == prep + probe  # one phase after the other
    assert prep[0].done == 0 and prep[-1].done == prep[-1].total
    assert [e.checkpoint.key for e in prep if e.checkpoint] == sorted(
        os.listdir(run / "checkpoints"), key=[s.checkpoint for s in out.plan.slots].index)
    assert all(e.checkpoint.ready for e in prep if e.checkpoint)
    assert probe[0].done == 0 and probe[0].receipt is None
    assert [e.receipt for e in probe[1:]] == out.receipts
    assert [e.done for e in probe] == list(range(len(out.plan.slots) + 1))
    settled = json.loads(out.reports["results.json"])["spend"]["settled"]["units"]
    assert probe[-1].settled_units == settled > 0
    # running spend never falls and grows by each slot's settlement
    for before, after in pairwise(probe):
        assert after.receipt is not None
        assert after.settled_units == before.settled_units + after.receipt.spend.settled_units
        assert after.retained_units == \
            before.retained_units + after.receipt.spend.retained_units
    # the running figures end at the journal's, against the run's cap
    money = json.loads(out.reports["results.json"])["money"]
    assert (probe[-1].settled_units, probe[-1].retained_units) == (
        money["settled"]["units"], money["retained"]["units"])
    assert {e.cap_units for e in events} == {out.plan.cap_units}


def test_the_running_spend_carries_a_lost_requests_retained_hold(tmp_path: Path) -> None:
    """A child killed after its admission: the hold it leaves is retained, and the
    progress the operator sees says so (settled + retained of the cap), never settled
    alone."""
    reg, raw = small_registration(cap="5.00")
    events: list[ProgressEvent] = []
    log = RunLog(tmp_path / "run")
    view = RunView(Verbosity.NORMAL, True, log, out=io.StringIO())
    out = run_pilot(reg, raw, claim_run_dir(tmp_path / "run"),
                    program=faulty_program("kill-after-admit", tmp_path / "marker"),
                    progress=lambda e: (events.append(e), view(e))[0])
    log.close()
    money = json.loads(out.reports["results.json"])["money"]
    assert money["retained"]["units"] > 0
    assert events[-1].retained_units == money["retained"]["units"]
    results = decode_results(out.reports["results.json"])
    assert results.money is not None
    last = view.out.getvalue().splitlines()[-1]  # type: ignore[attr-defined]
    assert last.endswith(spend_line(results.money, results.cap, True)), last
    assert " + retained 0.00" not in last


def test_next_mark_gives_at_most_nine_lines_at_each_tenth() -> None:
    def marks(total: int) -> list[int]:
        out, mark = [], next_mark(total, 0)
        for done in range(1, total + 1):
            if mark is not None and done >= mark and done < total:
                out.append(done)
                mark = next_mark(total, done)
        return out

    assert marks(260) == [26, 52, 78, 104, 130, 156, 182, 208, 234]
    assert marks(16) == [2, 4, 5, 7, 8, 10, 12, 13, 15]
    assert marks(3) == [1, 2] and marks(1) == [] and marks(0) == []
    assert next_mark(20, 1) == 2 and next_mark(20, 2) == 4  # equality is not "past"


def test_figures_are_exact() -> None:
    assert accuracy_text(52, 73) == "acc 71.2% (52/73)"
    assert accuracy_text(0, 0) == "acc - (0/0)"
    assert spend_text(216391280, faux=True) == "10.819564 faux units"
    assert spend_text(2468000, faux=False) == f"${units_to_usd(2468000)}" == "$0.1234"


def test_the_log_waits_for_the_run_to_open_and_never_raises(tmp_path: Path) -> None:
    log = RunLog(tmp_path)
    log.write("run", state="start", detail="a b/c\nd", n=3, ok=True, none=None)
    assert not (tmp_path / LOG_NAME).exists()  # the run root stays fresh until open
    log.open()
    log.write("slot", slot="s1")
    log.close()
    first, second = (tmp_path / LOG_NAME).read_text().splitlines()
    assert first.split()[1:] == ["run", "state=start", "detail=a?b?c?d", "n=3", "ok=yes",
                                 "none=-"]
    assert second.split()[1:] == ["slot", "slot=s1"] and log.failure is None
    assert stat.S_IMODE((tmp_path / LOG_NAME).stat().st_mode) == 0o600

    again = RunLog(tmp_path)  # exists: never appended to, never raised
    again.write("run", state="start")
    again.open()
    again.write("run", state="end")
    assert again.failure is not None and again.failure.startswith(f"{LOG_NAME}: ")
    assert len((tmp_path / LOG_NAME).read_text().splitlines()) == 2

    unopened = RunLog(tmp_path / "elsewhere")
    unopened.write("run", state="start")
    unopened.close()
    assert not (tmp_path / "elsewhere").exists() and unopened.failure is None


def test_the_summary_labels_faux_money_and_aligns_its_decimals(normal: Pilot) -> None:
    lines = normal.stdout.splitlines()
    header = next(line for line in lines if "exact (95% CI)" in line)
    assert "settled (faux units)" in header and "$" not in header
    rows = [line for line in lines if line.startswith(("│ native", "│ pack"))]
    assert len([line for line in lines if line.startswith("│")]) == len(rows)  # no wrap
    amounts = [row.rstrip(" │").rsplit("│", 1)[1].strip() for row in rows]
    assert len(amounts) == 2 and len({len(a.partition(".")[2]) for a in amounts}) == 1
    assert len({row.rindex(".") for row in rows}) == 1  # the points line up
    totals = next(line for line in lines if line.startswith("settled "))
    assert totals.endswith("cap (faux units, no money spent)") and "$" not in totals
    assert " + retained " in totals


def test_aligned_amounts_pads_with_zeros_and_never_rounds() -> None:
    from efold.controller.pilot.pilot_view import aligned_amounts

    assert aligned_amounts(["0.234448", "0.32738", "12"]) == ["0.234448", "0.327380",
                                                              "12.000000"]
    assert aligned_amounts(["1234567.5", "60"]) == ["1,234,567.5", "60.0"]
    assert aligned_amounts(["3", "60"]) == ["3", "60"]
