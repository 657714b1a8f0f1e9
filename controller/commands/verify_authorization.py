"""``efold-controller verify-authorization FILE --trust PUBKEY``: a content-free verdict.

A refusal is ``refused: CODE (FILE: why)``, naming the file that failed as the operator
gave it (the authorization, or the ``--trust`` key that could not be loaded) and a fixed
reason; never the authorization's content.
"""

from __future__ import annotations

import os

import click

from efold.controller.commands._options import fail
from efold.errors import Code, EfoldError
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
    keys = []
    for path in trusted:
        try:
            keys.append(load_public_key(path))
        except EfoldError as exc:
            fail(exc.code.value, f"trust key {path}: {_why(exc)}")
    try:
        directory, name = os.path.split(os.path.abspath(file))
        artifact = read_private(directory, name, max_bytes=MAX_ARTIFACT_BYTES)
        verified = check_signature(artifact, domain=domain, trusted_keys=keys)
    except EfoldError as exc:
        fail(exc.code.value, f"{file}: {_why(exc, domain=domain, trusted=trusted)}")
    click.echo(f"valid: {domain.value}")
    click.echo(f"id: {verified.authorization_id}")
    click.echo(f"sha256: {verified.artifact_sha256}")
    click.echo(f"expires_at: {verified.attestation.expires_at}")


def _why(exc: EfoldError, *, domain: AuthorizationDomain | None = None,
         trusted: tuple[str, ...] = ()) -> str:
    """A fixed reason per code; the library's detail only where it is fixed text too.
    (A decoder's message could quote the file, so ``malformed`` stays just that.)"""
    code = exc.code
    if code is Code.AUTHORIZATION_UNTRUSTED:
        return "signed by a key that is none of --trust " + ", ".join(trusted)
    if code is Code.AUTHORIZATION_DOMAIN_MISMATCH and domain is AuthorizationDomain.REAL:
        return "a faux authorization, checked as a real one (pass --faux for a faux one)"
    if code is Code.AUTHORIZATION_DOMAIN_MISMATCH and domain is AuthorizationDomain.FAUX:
        return "a real authorization, checked as a faux one (--faux)"
    if code is Code.AUTHORIZATION_INVALID and exc.detail == "bad signature":
        return "signature does not verify against the trusted key with its key id"
    if code is Code.AUTHORIZATION_INVALID and exc.detail.startswith("malformed"):
        return "not a signed authorization (malformed)"
    return exc.detail or code.value
