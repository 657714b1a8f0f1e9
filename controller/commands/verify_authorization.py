"""``efold-controller verify-authorization FILE --trust PUBKEY``: a content-free verdict."""

from __future__ import annotations

import os

import click

from efold.controller.commands._options import fail
from efold.errors import EfoldError
from efold.registry.approver_keys import load_public_key
from efold.registry.authorization import MAX_ARTIFACT_BYTES, AuthorizationDomain, check_signature
from efold.registry.files import read_private


@click.command("verify-authorization")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--trust", "trusted", multiple=True, required=True, metavar="PUBKEY",
              type=click.Path(dir_okay=False), help="A trusted approver public key (repeatable).")
@click.option("--faux", is_flag=True, help="Check against the faux domain instead of the real one.")
def command(file: str, trusted: tuple[str, ...], faux: bool) -> None:
    """Check an authorization's shape, domain, trusted signature and validity window.

    It does not check the bindings against a campaign (the controller does that at run
    time). Prints only the verdict, the id, the artifact sha256 and the expiry; exits 2
    with a fixed code if refused.
    """
    domain = AuthorizationDomain.FAUX if faux else AuthorizationDomain.REAL
    try:
        keys = [load_public_key(path) for path in trusted]
        directory, name = os.path.split(os.path.abspath(file))
        artifact = read_private(directory, name, max_bytes=MAX_ARTIFACT_BYTES)
        verified = check_signature(artifact, domain=domain, trusted_keys=keys)
    except EfoldError as exc:
        fail(exc.code.value)  # the code only: the verdict stays content-free
    click.echo(f"valid: {domain.value}")
    click.echo(f"id: {verified.authorization_id}")
    click.echo(f"sha256: {verified.artifact_sha256}")
    click.echo(f"expires_at: {verified.attestation.expires_at}")
