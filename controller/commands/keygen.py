"""``efold-controller keygen --out PREFIX``: an approver key pair for authorizations."""

from __future__ import annotations

import click

from efold.controller.commands._options import refuse
from efold.errors import EfoldError
from efold.registry.approver_keys import write_key_pair


@click.command("keygen")
@click.option("--out", "prefix", required=True, metavar="PREFIX",
              help="Writes PREFIX.key (private, mode 0600) and PREFIX.pub (public).")
def command(prefix: str) -> None:
    """Generate an Ed25519 approver key pair. Never overwrites an existing file.

    Keep PREFIX.key with the approver; give PREFIX.pub to operators, who pass it to
    `--trust`. Prints the key id (sha256 of the raw public key).

    Exit status: 0 written, 2 usage error or refused (nothing written).
    """
    try:
        private_path, public_path, key_id = write_key_pair(prefix)
    except EfoldError as exc:
        refuse(exc)
    click.echo(f"private key: {private_path}")
    click.echo(f"public key: {public_path}")
    click.echo(f"key id: {key_id}")
