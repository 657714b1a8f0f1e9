"""``efold-controller certify FOLD [--campaign FILE] [--json FILE] [--timeout S]``: certify a
fold offline.

Deterministic, no model call, no money (``efold.certify``). Prints a human summary, then
the complete JSON report (``efold-certification-v1``); ``--json FILE`` also writes the
report to FILE, which must not exist. With ``--campaign``, FOLD is one of its roles:
a built-in arm or entry point with the role's settings, or an external command (a
compaction proxy is refused: ``certify_not_applicable``). Exit 0 when every threshold
passed, 1 when any failed, 2 on a refusal (an unknown fold or role, a fold that does not
load, a child that did not finish, files that do not read back).
"""

from __future__ import annotations

from pathlib import Path

import click
import msgspec

from efold.certify.child import Target
from efold.certify.report import human_summary
from efold.certify.run import DEFAULT_TIMEOUT_S, certify
from efold.controller.campaigns.campaign import named_campaign
from efold.controller.commands._options import refuse
from efold.controller.errors import CampaignError
from efold.errors import Code, EfoldError
from efold.registry.files import publish_exclusive


@click.command("certify")
@click.argument("fold")
@click.option("--campaign", "campaign", default=None, metavar="FILE",
              help="A campaign file (or a bundled name): FOLD is then one of its roles.")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the JSON report to this new file.")
@click.option("--timeout", "timeout_s", default=DEFAULT_TIMEOUT_S, show_default=True,
              type=click.FloatRange(min=1.0), help="Seconds the contained child may run.")
def command(fold: str, campaign: str | None, json_path: Path | None, timeout_s: float) -> None:
    """Certify a fold offline: 100 fold cycles with a poisoned previous summary, closure
    fixtures and a maximal source, in a contained child.

    FOLD is a built-in arm or an installed efold.folds entry point. The session grows
    by one work unit per cycle; the fold is offered the whole source and the previous
    summary (marked), and must keep the goal, the rules, a rare fact, files, open
    errors and their sources addressable, closed and bounded (32 KiB). Exit 0 pass, 1 a
    threshold failed, 2 refused."""
    try:
        report = certify(_target(fold, campaign), timeout_s=timeout_s)
        encoded = msgspec.json.encode(report)
        if json_path is not None:
            publish_exclusive(json_path.parent, json_path.name, encoded + b"\n")
    except EfoldError as exc:
        refuse(exc)
    click.echo(human_summary(report))
    click.echo(encoded.decode())
    raise SystemExit(0 if report.passed else 1)


def _target(fold: str, campaign: str | None) -> Target:
    """FOLD itself, or the role FOLD of ``campaign``."""
    if campaign is None:
        return Target(name=fold)
    spec, _ = named_campaign(campaign)
    role = next((r for r in spec.roles if r.name == fold), None)
    if role is None:
        raise CampaignError(Code.CAMPAIGN_INVALID, f"the campaign has no role {fold!r} "
                            f"(its roles: {', '.join(r.name for r in spec.roles)})")
    if role.proxy is not None:
        raise EfoldError(Code.CERTIFY_NOT_APPLICABLE, f"{fold} is a compaction proxy: certify "
                         "does not drive a proxy's capture endpoint")
    return Target(name=role.arm, command=role.command, timeout_seconds=role.timeout_seconds,
                  cwd=role.cwd, env=role.env, settings=role.settings)
