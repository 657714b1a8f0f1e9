"""``efold-controller register CAMPAIGN.toml --output DIR``."""

from __future__ import annotations

import click

from efold.controller.campaign import BUNDLED, bundled_campaign, load_campaign
from efold.controller.commands._options import refuse
from efold.controller.registration import compute_registration, write_registration
from efold.errors import EfoldError


@click.command("register")
@click.argument("campaign", type=click.Path(dir_okay=False))
@click.option("--output", "output", required=True, type=click.Path(file_okay=False),
              help="Directory for registration.json (created private; must not hold one).")
def command(campaign: str, output: str) -> None:
    """Validate a campaign, freeze its digests and write registration.json.

    CAMPAIGN is a TOML file, or `default` / `hard` for a bundled campaign. Prints the
    registration's sha256: every later command takes --registration FILE --sha256 SHA.

    Exit status: 0 registered, 2 usage error or refused (nothing written).
    """
    try:
        if campaign in BUNDLED:
            spec, raw = bundled_campaign(campaign)
        else:
            spec, raw = load_campaign(campaign)
        reg = compute_registration(spec, raw)
        path, sha = write_registration(reg, output)
    except EfoldError as exc:
        refuse(exc)
    click.echo(f"registration: {path}")
    click.echo(f"sha256: {sha}")
