"""``efold-controller recover RUN_DIR [--json]``: what a run left behind (observation only).

Reads the journal, re-proves every recorded process and reports survivors; never
signals, never launches, never writes (``efold.controller.recovery``). The report is
content-free: ids, pids, start times, process groups, states and fixed codes, no paths.

The verdict line comes first (and is repeated last): ``reconciled`` only when nothing
tied to any launch is alive, every launch has an exit record or a finished containment,
and no containment is unfinished.

Exit status: 0 reconciled, 1 not reconciled, 2 when the journal cannot be read.
"""

from __future__ import annotations

from collections.abc import Iterator

import click

from efold.controller.commands._options import echo_report, run_report_options
from efold.controller.recovery import RecoveryReport, observe
from efold.errors import EfoldError


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


@click.command("recover")
@run_report_options
def command(run_dir: str, as_json: bool) -> None:
    """Report the processes a run left behind. Never signals, never launches."""
    try:
        report = observe(run_dir)
    except EfoldError as exc:
        click.echo(exc.code.value, err=True)
        raise SystemExit(2) from None
    echo_report(report, as_json=as_json, text=_text(report))
    raise SystemExit(0 if report.reconciled else 1)
