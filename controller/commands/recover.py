"""``efold-controller recover RUN_DIR [--json]``: what a run left behind (observation only).

Reads the journal, re-proves every recorded process and reports survivors; never
signals, never launches, never writes (``efold.controller.recovery``). The report is
content-free: ids, pids, start times, process groups, states and fixed codes, no paths.

The verdict line comes first (and is repeated last): ``reconciled`` only when nothing
tied to any launch is alive, every launch has an exit record or a finished containment,
and no containment is unfinished.

Exit status: 0 reconciled, 1 not reconciled, 2 refused: the journal cannot be read
(``RUN_DIR`` missing, not a directory, or a directory that is not a run). A refusal is
``refused: CODE (what, where)`` on stderr and, under ``--json``, also one JSON object
``{"refused": CODE, "detail": ...}`` on stdout, so a script reading stdout never sees
nothing. The refusal names ``RUN_DIR`` as given (the operator's own argument); the
report itself stays path-free.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NoReturn

import click
import msgspec

from efold.controller.commands._options import echo_report, fail, latest_options, resolve_run
from efold.controller.recovery import RecoveryReport, observe
from efold.errors import Code, EfoldError
from efold.registry.journal import JOURNAL_NAME


def _text(report: RecoveryReport) -> Iterator[str]:
    yield report.verdict
    yield f"lease: {report.lease}"
    yield f"sticky stop: {report.sticky_stop or '-'}"
    yield (f"launches: {len(report.launches)}  members: {len(report.members)}  "
           f"containments: {len(report.containments)} "
           f"(unfinished {report.unfinished_containments})")
    for launch in report.launches:
        yield (f"  launch {launch.launch_id} {launch.kind} slot={launch.slot} "
               f"pid={launch.pid} start={launch.start_time} pgid={launch.pgid} "
               f"proof={launch.proof.value}")
    if not report.survivors:
        yield "survivors: none"
    for s in report.survivors:
        yield (f"  survivor launch={s.launch_id} pid={s.pid} start={s.start_time} "
               f"ppid={s.ppid} pgid={s.pgid} tie={s.tie.value}")
    if report.unsettled_launches:
        yield "never seen to end: launch " + ", ".join(map(str, report.unsettled_launches))
    yield report.verdict


def _refuse(code: str, detail: str, *, as_json: bool) -> NoReturn:
    """The documented refusal on stderr (exit 2); under ``--json`` also as JSON on stdout."""
    if as_json:
        click.echo(msgspec.json.encode({"refused": code, "detail": detail}).decode())
    fail(code, detail)


def _not_a_run(run_dir: str) -> str | None:
    """Why ``run_dir`` is plainly not a run directory (``None`` when it may be one; the
    journal's own checks then decide). Checked here, not by click, so that every refusal
    of ``recover`` has the same form."""
    if not os.path.lexists(run_dir):
        return "no such directory"
    if not os.path.isdir(run_dir):
        return "not a directory"
    if not os.path.lexists(os.path.join(run_dir, JOURNAL_NAME)):
        return f"no {JOURNAL_NAME}"
    return None


@click.command("recover")
@click.argument("run_dir", required=False, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@latest_options
def command(run_dir: str | None, latest: bool, root: str | None, as_json: bool) -> None:
    """Report the processes a run left behind. Never signals, never launches.
    `--latest` takes the newest run under --root (./efold-runs) instead of RUN_DIR.

    Exit status: 0 reconciled, 1 not reconciled, 2 usage error or refused (RUN_DIR is
    not a readable run, or --latest found none; under --json the refusal is also one
    JSON object on stdout)."""
    run_dir = resolve_run(run_dir, latest, root,
                          lambda code, detail: _refuse(code, detail, as_json=as_json))
    why = _not_a_run(run_dir)
    if why is not None:
        _refuse(Code.JOURNAL_INVALID.value, f"{run_dir} is not a run directory: {why}",
                as_json=as_json)
    try:
        report = observe(run_dir)
    except EfoldError as exc:
        where = (os.path.join(run_dir, JOURNAL_NAME) if exc.code is Code.JOURNAL_INVALID
                 else run_dir)
        _refuse(exc.code.value, f"{where}: {exc.detail or 'refused'}", as_json=as_json)
    echo_report(report, as_json=as_json, text=_text(report))
    raise SystemExit(0 if report.reconciled else 1)
