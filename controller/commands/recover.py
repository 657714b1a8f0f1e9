"""``efold-controller recover RUN_DIR [--json]``: what a run left behind (observation only).

Reads the journal, re-proves every recorded process and reports survivors; never
signals, never launches, never writes (``efold.controller.rundirs.recovery``). The report is
content-free: ids, pids, start times, process groups, states and fixed codes, no paths.

The verdict line comes first (and is repeated last): ``reconciled`` only when nothing
tied to any launch is alive, every launch has an exit record or a finished containment,
and no containment is unfinished.

On a cluster run (``cluster pilot``'s) it observes every shard's own run where this
machine reaches it, and says reconciled only if every one is
(``controller.rundirs.cluster_recovery``); a line per shard says what it found.

Exit status: 0 reconciled, 1 not reconciled, 2 refused: ``run_not_found`` (``RUN_DIR``
missing, not a directory, or a directory without a journal) or the journal cannot be
read. A refusal is
``refused: CODE (what, where)`` on stderr and, under ``--json``, also one JSON object
``{"refused": CODE, "detail": ...}`` on stdout, so a script reading stdout never sees
nothing. The refusal names ``RUN_DIR`` as given (the operator's own argument); the
report itself stays path-free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import click

from efold.controller.commands._options import (
    echo_report,
    journal_refusal,
    latest_options,
    refusal_for,
    resolve_run,
)
from efold.controller.rundirs.cluster_recovery import cluster_text, observe_cluster
from efold.controller.rundirs.cluster_run import is_cluster_run
from efold.controller.rundirs.recovery import RecoveryReport, named, observe
from efold.errors import EfoldError


def _text(report: RecoveryReport, verbose: bool, run_dir: str) -> Iterator[str]:
    """The verdict (naming ``run_dir`` in what it says to run), the counts and what
    needs the operator (survivors, launches never seen to end); with ``verbose`` also
    one line per launch (a large run has thousands)."""
    verdict = named(report.verdict, run_dir)
    yield verdict
    yield f"lease: {report.lease}"
    if report.run_cgroup is not None:
        yield f"containment: cgroup, run cgroup {report.run_cgroup} {report.cgroup_state}"
    elif not report.launches:  # stopped before it recorded its containment
        yield "containment: none recorded (nothing was launched)"
    else:
        yield f"containment: {report.containment}"
    yield f"sticky stop: {report.sticky_stop or '-'}"
    yield (f"launches: {len(report.launches)}  members: {len(report.members)}  "
           f"containments: {len(report.containments)} "
           f"(unfinished {report.unfinished_containments})")
    for launch in report.launches if verbose else ():
        yield (f"  launch {launch.launch_id} {launch.kind} slot={launch.slot} "
               f"pid={launch.pid} start={launch.start_time} pgid={launch.pgid} "
               f"proof={launch.proof.value}")
    if not report.survivors:
        yield "survivors: none"
    for s in report.survivors:
        yield (f"  survivor launch={s.launch_id or '-'} pid={s.pid} start={s.start_time} "
               f"ppid={s.ppid} pgid={s.pgid} tie={s.tie.value}")
    if report.unsettled_launches:
        yield "never seen to end: launch " + ", ".join(map(str, report.unsettled_launches))
    if report.lost_receipt_copies:
        yield ("receipt copies missing (reap restores them from the journal): "
               + ", ".join(report.lost_receipt_copies))
    yield verdict


def _cluster(run_dir: str, as_json: bool, refuse_: Callable[[str, str], NoReturn]) -> NoReturn:
    """A cluster run: every shard's own run observed where this machine reaches it."""
    try:
        report = observe_cluster(Path(run_dir))
    except EfoldError as exc:
        refuse_(exc.code.value, f"{run_dir}: {exc.detail or 'refused'}")
    echo_report(report, as_json=as_json, text=cluster_text(report))
    raise SystemExit(0 if report.reconciled else 1)


@click.command("recover")
@click.argument("run_dir", required=False, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--verbose", "-v", is_flag=True,
              help="Also one line per launch (id, kind, slot, pid, start, group, proof).")
@latest_options
def command(run_dir: str | None, latest: bool, root: str | None, as_json: bool,
            verbose: bool) -> None:
    """Report the processes a run left behind. Never signals, never launches.
    `--latest` takes the newest run under --root (./efold-runs) instead of RUN_DIR.
    Prints the verdict, the counts, every survivor and every launch never seen to end;
    --verbose adds one line per launch (--json always holds them all).

    Exit status: 0 reconciled, 1 not reconciled, 2 usage error or refused (RUN_DIR is
    not a readable run, or --latest found none; under --json the refusal is also one
    JSON object on stdout)."""
    refuse_ = refusal_for(as_json)
    run_dir = resolve_run(run_dir, latest, root, refuse_)
    if is_cluster_run(Path(run_dir)):
        _cluster(run_dir, as_json, refuse_)
    try:
        report = observe(run_dir)
    except EfoldError as exc:
        refuse_(exc.code.value, journal_refusal(run_dir, exc)
                or f"{run_dir}: {exc.detail or 'refused'}")
    echo_report(report, as_json=as_json, text=_text(report, verbose, run_dir))
    raise SystemExit(0 if report.reconciled else 1)
