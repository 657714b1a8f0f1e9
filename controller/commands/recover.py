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

import click
import msgspec

from efold.controller.recovery import RecoveryReport, observe
from efold.errors import EfoldError


def _print_text(report: RecoveryReport) -> None:
    click.echo(report.verdict)
    click.echo(f"lease: {report.lease}")
    click.echo(f"sticky stop: {report.sticky_stop or '-'}")
    click.echo(f"launches: {len(report.launches)}  members: {len(report.members)}  "
               f"containments: {len(report.containments)} "
               f"(unfinished {report.unfinished_containments})")
    for launch in report.launches:
        click.echo(f"  launch {launch.launch_id} {launch.kind} slot={launch.slot} "
                   f"pid={launch.pid} start={launch.start_time} pgid={launch.pgid} "
                   f"proof={launch.proof.value}")
    if not report.survivors:
        click.echo("survivors: none")
    for s in report.survivors:
        click.echo(f"  survivor launch={s.launch_id} pid={s.pid} start={s.start_time} "
                   f"ppid={s.ppid} pgid={s.pgid} tie={s.tie.value}")
    if report.unsettled_launches:
        click.echo("never seen to end: launch " + ", ".join(map(str, report.unsettled_launches)))
    click.echo(report.verdict)


@click.command("recover")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def command(run_dir: str, as_json: bool) -> None:
    """Report the processes a run left behind. Never signals, never launches."""
    try:
        report = observe(run_dir)
    except EfoldError as exc:
        click.echo(exc.code.value, err=True)
        raise SystemExit(2) from None
    if as_json:
        click.echo(msgspec.json.encode(report).decode())
    else:
        _print_text(report)
    raise SystemExit(0 if report.reconciled else 1)
