"""``efold-controller reap RUN [--json]``: finish containment a dead controller left.

The one command that signals a run's processes after its controller is gone
(``efold.controller.rundirs.reap``); ``recover`` stays observation-only. It takes the run lease,
so it refuses (``lease_held``) while a controller is live.

Exit status: 0 the run is reconciled afterwards, 1 something could not be proven dead
(``reap_incomplete``; its processes are named by ``recover``), 2 refused.

On a cluster run it reaps every shard run this machine reaches whose controller is
gone, then collects the cluster run (``cluster collect``), and names every shard it
could not reach (``controller.rundirs.cluster_recovery``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import click

from efold.controller.commands._options import (
    echo_report,
    journal_refusal,
    latest_run_report_options,
    refusal_for,
    resolve_run,
)
from efold.controller.rundirs.cluster_recovery import cluster_text, reap_cluster
from efold.controller.rundirs.cluster_run import is_cluster_run
from efold.controller.rundirs.reap import ReapReport, reap
from efold.errors import EfoldError


def _text(report: ReapReport) -> Iterator[str]:
    yield report.verdict
    for launch in report.launches:
        yield (f"  launch {launch.launch_id} slot={launch.slot} {launch.outcome} "
               f"members={launch.members} signals={launch.signals} "
               f"survivors={launch.survivors}")
    if report.unattributed:
        yield (f"  {report.unattributed} process(es) in the run's cgroup and no launch's: "
               "killed through the run cgroup")
    if report.restored_receipts:
        yield (f"  restored {len(report.restored_receipts)} missing receipt copy(ies) from "
               "the journal: " + ", ".join(report.restored_receipts))
    if not report.launches and not report.unattributed and not report.restored_receipts:
        yield "  nothing to reap"


def _cluster(run_dir: str, as_json: bool, refuse_: Callable[[str, str], NoReturn]) -> NoReturn:
    """A cluster run: every reachable shard run reaped, then the cluster run collected."""
    try:
        report = reap_cluster(Path(run_dir))
    except EfoldError as exc:
        refuse_(exc.code.value, journal_refusal(run_dir, exc) or exc.detail)
    echo_report(report, as_json=as_json, text=cluster_text(report))
    if not report.reconciled:
        if not as_json:
            click.echo("refused: reap_incomplete (each shard's line says what is left)",
                       err=True)
        raise SystemExit(1)
    raise SystemExit(0)


@click.command("reap")
@latest_run_report_options
def command(run_dir: str | None, latest: bool, root: str | None, as_json: bool) -> None:
    """Contain every process a dead controller left behind in RUN_DIR, with the same
    proofs as a live containment (pidfd + start time + group), and journal it.

    Exit status: 0 the run is reconciled afterwards, 1 something could not be proven
    dead (reap_incomplete), 2 usage error or refused. `--latest` takes the newest run
    under --root (./efold-runs) instead of RUN_DIR."""
    refuse_ = refusal_for(as_json)
    run_dir = resolve_run(run_dir, latest, root, refuse_)
    if is_cluster_run(Path(run_dir)):
        _cluster(run_dir, as_json, refuse_)
    try:
        report = reap(run_dir)
    except EfoldError as exc:
        refuse_(exc.code.value, journal_refusal(run_dir, exc) or exc.detail)
    echo_report(report, as_json=as_json, text=_text(report))
    if not report.reconciled:
        if not as_json:
            click.echo("refused: reap_incomplete (see `efold-controller recover RUN`)", err=True)
        raise SystemExit(1)
