"""``efold-controller authorize ...``: sign an authorization from explicit arguments.

Every bound fact is an explicit option: nothing is read from a campaign, so the
approver sees exactly what they sign. The provider account id is read from the
environment variable ``EFOLD_AUTHORIZE_ACCOUNT_ID`` or a hidden prompt (never a
command-line argument, which other users can read in the process list) and only its
salted commitment is written.
"""

from __future__ import annotations

import hashlib
import os
import time

import click

from efold.controller.commands._options import fail, refuse
from efold.errors import Code, EfoldError
from efold.registry.approver_keys import load_private_key
from efold.registry.authorization import (
    AUTHORIZATION_VERSION,
    Attestation,
    AuthorizationBindings,
    AuthorizationDomain,
    canonical_output_root,
    commit_account,
    new_authorization_id,
    sign_attestation,
)
from efold.registry.authorization import MAX_VALIDITY_S as _MAX_VALIDITY_S
from efold.registry.files import publish_exclusive

_ACCOUNT_ENV = "EFOLD_AUTHORIZE_ACCOUNT_ID"


def _deadline(_ctx: click.Context, _param: click.Parameter,
              values: tuple[str, ...]) -> dict[str, int]:
    deadlines: dict[str, int] = {}
    for value in values:
        name, sep, seconds = value.partition("=")
        if not sep or not seconds.isdigit() or name in deadlines:
            raise click.BadParameter("expected NAME=SECONDS, each name once")
        deadlines[name] = int(seconds)
    return deadlines


def _digest(name: str, help_text: str) -> click.Option:
    return click.Option([f"--{name}"], required=True, metavar="SHA256", help=help_text)


@click.command("authorize", params=[
    _digest("registration-raw-sha256", "sha256 of the registration file's bytes."),
    _digest("registration-canonical-sha256", "sha256 of the canonical registration."),
    _digest("code-digest", "Code binding."),
    _digest("build-digest", "Build binding."),
    _digest("catalog-digest", "Rate catalog digest."),
    _digest("policy-digest", "Policy digest."),
    _digest("schedule-digest", "Schedule digest from the plan."),
])
@click.option("--key", "key_path", required=True, type=click.Path(dir_okay=False),
              help="The approver's private key (must be owner-only).")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="Where to write the authorization (never overwritten; mode 0600).")
@click.option("--reader", required=True)
@click.option("--effort", required=True)
@click.option("--cap-units", required=True, type=click.IntRange(min=1),
              help="The cap C in integer money units (1 unit = 5e-8 USD).")
@click.option("--deadline", "deadlines", multiple=True, callback=_deadline,
              metavar="NAME=SECONDS", help="A bound deadline (repeatable).")
@click.option("--output-root", required=True, type=click.Path(file_okay=False),
              help="The run root this authorization may be consumed in.")
@click.option("--credential-env", required=True, metavar="NAME",
              help="NAME of the environment variable holding the provider credential.")
@click.option("--approver", required=True)
@click.option("--approval-reference", required=True,
              help="Reference of the numeric approval of this cap.")
@click.option("--id", "authorization_id", default=None, help="Default: a fresh random id.")
@click.option("--valid-for", default=24 * 3600, show_default=True,
              type=click.IntRange(min=1, max=_MAX_VALIDITY_S), help="Lifetime in seconds.")
@click.option("--faux", is_flag=True, help="Sign in the faux domain (tests and drills only).")
def command(key_path: str, out: str, reader: str, effort: str, cap_units: int,
            deadlines: dict[str, int], output_root: str, credential_env: str, approver: str,
            approval_reference: str, authorization_id: str | None, valid_for: int,
            faux: bool, **digests: str) -> None:
    """Sign an authorization binding a registered campaign to a cap and a run root."""
    domain = AuthorizationDomain.FAUX if faux else AuthorizationDomain.REAL
    try:
        key = load_private_key(key_path)
        account_id = os.environ.get(_ACCOUNT_ENV) or click.prompt(
            "Provider account id", hide_input=True)
        bindings = AuthorizationBindings(
            cap_units=cap_units, reader=reader, effort=effort, deadlines=deadlines,
            output_root=canonical_output_root(output_root),
            credential_env_var=credential_env, **digests,
        )
        issued = int(time.time())
        attestation = Attestation(
            version=AUTHORIZATION_VERSION, domain=domain,
            authorization_id=authorization_id or new_authorization_id(),
            bindings=bindings, account=commit_account(account_id, domain=domain),
            approver=approver, approval_reference=approval_reference,
            issued_at=issued, expires_at=issued + valid_for,
        )
        artifact = sign_attestation(attestation, key)
        directory, name = os.path.split(os.path.abspath(out))
        publish_exclusive(directory, name, artifact, mode=0o600)
    except EfoldError as exc:
        refuse(exc)
    except (TypeError, ValueError) as exc:  # a binding the schema refuses
        fail(Code.AUTHORIZATION_INVALID.value, type(exc).__name__)
    click.echo(f"authorization: {out}")
    click.echo(f"id: {attestation.authorization_id}")
    click.echo(f"sha256: {hashlib.sha256(artifact).hexdigest()}")
