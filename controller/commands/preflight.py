"""``efold-controller preflight --registration F --sha256 S``."""

from __future__ import annotations

import click
import msgspec

from efold.controller.commands._options import refuse, registration_options
from efold.controller.interrupt import exit_status
from efold.controller.preflight import run_preflight
from efold.controller.registration import load_registration
from efold.errors import EfoldError


@click.command("preflight")
@registration_options()
def command(registration: str, sha256: str) -> None:
    """Run only the prep children in a private temporary root (removed afterwards),
    dry-restore every snapshot and print a JSON report per slot. Exits 1 if any
    eligible slot fails (tree limits, restore, watchdog), 130/143 when interrupted."""
    try:
        loaded = load_registration(registration, sha256)
        report = run_preflight(loaded.registration, loaded.data)
    except EfoldError as exc:
        refuse(exc)
    click.echo(msgspec.json.format(msgspec.json.encode(report), indent=2))
    if report.interrupted is not None:
        raise SystemExit(exit_status(report.interrupted))
    if not report.ok:
        raise SystemExit(1)
