"""efold from Python: open a run's results as typed records, and launch a campaign.

    from efold import api

    run = api.launch("--faux", "--campaign", "default")   # pilot, in a child process
    for role in run.roles:                                  # report.schema.RoleResult
        print(role.role, role.overall.exact.successes, role.overall.exact.trials)
    wrong = [s for s in run.slots if s.eligible and s.correct is False]

``open_run`` reads a run the way ``efold-controller aggregate`` and ``show`` do (its
journal, plan and receipts, read-only: nothing in the run changes), or a
``results.json`` on its own. The records are the ``results.json`` schema's own structs
(``efold.report.schema``), versioned with it (``SCHEMA``): what a notebook reads is what
the reports print.

``launch`` runs ``efold-controller pilot`` as a child process with the arguments given
(exactly the command line's, so every refusal, the money cap, the single-use
authorization and the one-writer rule hold as they do there) and opens the run it made.
It never drives the controller in this process: a notebook that dies cannot leave a run
half-written, and a second ``launch`` is a second run, never a second writer of one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from efold.controller.rundirs.aggregate import build_run_results
from efold.controller.rundirs.cluster_collect import read_any_run
from efold.controller.rundirs.run_index import is_run_dir
from efold.controller.rundirs.run_index import latest_run as find_latest
from efold.controller.rundirs.runroot import DEFAULT_RUNS_ROOT
from efold.errors import Code, EfoldError
from efold.report import decode_results
from efold.report.readings import readings
from efold.report.schema import RESULTS_SCHEMA, Results, RoleResult, SlotRow

__all__ = ["SCHEMA", "EfoldError", "LaunchRefused", "LaunchTimedOut", "Run", "latest_run",
           "launch", "open_run"]

SCHEMA = RESULTS_SCHEMA  # the results.json schema these records follow


class LaunchRefused(EfoldError):
    """``launch`` was refused before any run started (the command line's exit 2): the
    fixed ``code`` and the ``detail`` it printed."""


class LaunchTimedOut(TimeoutError):
    """``launch`` ran out of its ``timeout``: the child was sent SIGTERM and has ended.
    ``run``: the run it had made (it ends ``interrupted``, its reports written), or None
    when it ended before it made one."""

    def __init__(self, timeout: float, run: Run | None) -> None:
        where = f"; its run: {run.path}" if run is not None else "; it had made no run"
        super().__init__(f"pilot did not end within {timeout} s and was stopped{where}")
        self.run = run


@dataclass(frozen=True)
class Run:
    """One run's results. ``path``: the run directory (or the ``results.json`` read)."""

    path: Path
    results: Results

    @property
    def status(self) -> str:
        """``complete``, ``stopped``, ``interrupted``, ``crashed``, ``damaged``,
        ``running`` or ``unreconciled``; ``unknown`` for a results.json built without
        its journal."""
        status = self.results.status
        return "unknown" if status is None else status.verdict

    @property
    def roles(self) -> list[RoleResult]:
        """Each role's summary (accuracy overall and per category, size, spend, cost
        per correct answer), in the plan's order."""
        return list(self.results.results)

    def role(self, name: str) -> RoleResult:
        for role in self.results.results:
            if role.role == name:
                return role
        raise KeyError(f"no role {name!r} (roles: {', '.join(self.results.roles)})")

    @property
    def slots(self) -> list[SlotRow]:
        """Every planned slot, in schedule order (answers are never in results)."""
        return list(self.results.slots)

    def iter_slots(self, *, role: str | None = None, category: str | None = None
                   ) -> Iterator[SlotRow]:
        for slot in self.results.slots:
            if (role is None or slot.role == role) and (category is None
                                                         or slot.category == category):
                yield slot

    def slot_dicts(self) -> list[dict[str, Any]]:
        """The slots as plain dicts (``pandas.DataFrame(run.slot_dicts())``)."""
        rows: list[dict[str, Any]] = msgspec.to_builtins(self.results.slots)
        return rows

    def readings(self) -> list[str]:
        """One line per role: which fold keeps what, at what size and cost."""
        return readings(self.results)


def open_run(path: str | os.PathLike[str]) -> Run:
    """A run directory (its journal, plan and receipts, read-only; a damaged run opens
    with its damage in ``results.status``), or a ``results.json`` file, or a directory
    holding one (``aggregate --output DIR``). Refuses with an ``EfoldError`` and its
    fixed code what is neither (``run_not_found``), or a document that is not a
    results-v1 one (``report_input_invalid``, naming the file)."""
    where = Path(path)
    if where.is_dir() and is_run_dir(where):
        return Run(where, build_run_results(read_any_run(where, allow_damaged=True)))
    document = where / "results.json" if where.is_dir() else where
    try:
        data = document.read_bytes()
    except OSError as exc:
        hint = (" (a runs root? `api.latest_run(ROOT)` opens its newest run)"
                if where.is_dir() else "")
        raise EfoldError(Code.RUN_NOT_FOUND,
                         f"{where}: neither a run directory (no journal.sqlite) nor a "
                         f"results.json ({exc.strerror or 'unreadable'}){hint}") from exc
    try:
        return Run(where, decode_results(data))
    except EfoldError as exc:
        raise type(exc)(exc.code, f"{document}: {exc.detail}") from exc


def latest_run(root: str | os.PathLike[str] = DEFAULT_RUNS_ROOT) -> Run:
    """The newest run under a runs root (default ``./efold-runs``), as ``show --latest``
    finds it; ``run_not_found`` when the root holds none."""
    return open_run(find_latest(root))


def launch(*pilot_args: str, cwd: str | os.PathLike[str] | None = None,
           timeout: float | None = None) -> Run:
    """Run ``efold-controller pilot *pilot_args`` in a child process and open its run.

    ``launch("--faux")`` runs the bundled default campaign; any ``pilot`` option works
    (``--campaign``, ``--limit``, ``--reader``/``--model``, ``--run-dir``; the real route
    with its authorization, as on the command line). Returns the run whatever way it
    ended (``run.status``: a stop or an interruption is a result, not an exception).
    Raises ``LaunchRefused`` (its fixed ``code``) when the command refused before any
    run started, ``ValueError`` for arguments ``pilot`` does not take (its usage
    error), ``RuntimeError`` when the child ended without its JSON line, and
    ``LaunchTimedOut`` after ``timeout`` seconds (the child is then sent SIGTERM; the
    run it made, in the exception's ``run``, ends ``interrupted``, its reports
    written)."""
    command = [sys.executable, "-m", "efold.controller", "pilot", *pilot_args, "--quiet",
               "--json"]
    child = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        child.terminate()  # SIGTERM: the controller closes admission and contains
        rest, _ = child.communicate()
        printed = ((expired.stdout or b"").decode() if isinstance(expired.stdout, bytes)
                   else expired.stdout or "") + rest
        made = next((line.removeprefix("run: ") for line in printed.splitlines()
                     if line.startswith("run: ")), None)
        run = None if made is None else _resolve(Path(made), cwd)
        raise LaunchTimedOut(timeout or 0.0,
                             None if run is None or not is_run_dir(run) else open_run(run)
                             ) from expired
    line = _last_json_line(out)
    if line is None:
        if child.returncode == 2:  # click's usage error: not a refusal of a run
            raise ValueError(f"pilot refused its arguments: {err.strip()[-500:]}")
        raise RuntimeError(f"pilot exited {child.returncode} without its JSON line: "
                           f"{err.strip()[-500:]}")
    if "refused" in line:
        raise LaunchRefused(Code(line["refused"]), str(line.get("detail", "")))
    return open_run(_resolve(Path(line["run"]), cwd))


def _resolve(run: Path, cwd: str | os.PathLike[str] | None) -> Path:
    """A run path the child printed, relative to its working directory."""
    return run if run.is_absolute() or cwd is None else Path(cwd) / run


def _last_json_line(out: str) -> dict[str, Any] | None:
    for text in reversed(out.splitlines()):
        if text.startswith("{"):
            value = json.loads(text)
            return value if isinstance(value, dict) else None
    return None
