"""``efold-controller authorize ...``: sign an authorization.

Two ways to say what is bound, never mixed:

- ``--registration FILE --sha256 S [--smoke]``: every binding (registration digests,
  code and build digests, reader, effort, catalog, policy, cap, schedule, deadlines,
  credential variable) is derived from the verified registration, exactly as ``pilot
  --real`` (or, with ``--smoke``, ``smoke``) will derive it; the command prints what it
  signed so the approver sees it;
- explicit options (``--reader``, ``--cap-units``, the seven digests...), for an
  approver who computes them elsewhere.

The provider account id is read from the environment variable ``EFOLD_ACCOUNT_ID``,
the same one ``pilot --real`` reads (never from a command-line argument, which other
users can read in the process list, nor from a prompt), and only its salted commitment
is written.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import click
import msgspec

from efold.controller.campaigns.plan import plan_for, smoke_cap_units, smoke_plan
from efold.controller.campaigns.registration import load_registration
from efold.controller.commands._options import fail, refuse, registration_options
from efold.controller.rundirs.authorize_run import ACCOUNT_ENV, credential_binding, run_bindings
from efold.controller.rundirs.continuation import choose_run
from efold.errors import Code, EfoldError
from efold.guard.money import units_to_usd
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

_EXPLICIT = ("reader", "effort", "cap_units", "credential_env", "registration_raw_sha256",
             "registration_canonical_sha256", "code_digest", "build_digest",
             "catalog_digest", "policy_digest", "schedule_digest")


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
    return click.Option([f"--{name}"], default=None, metavar="SHA256",
                        help=help_text + " (explicit bindings only)")


@click.command("authorize", params=[
    _digest("registration-raw-sha256", "sha256 of the registration file's bytes."),
    _digest("registration-canonical-sha256", "sha256 of the canonical registration."),
    _digest("code-digest", "Code binding."),
    _digest("build-digest", "Build binding."),
    _digest("catalog-digest", "Rate catalog digest."),
    _digest("policy-digest", "Policy digest."),
    _digest("schedule-digest", "Schedule digest from the plan."),
])
@registration_options(required=False)
@click.option("--smoke", is_flag=True,
              help="With --registration: authorize the registration's smoke (its schedule "
                   "and its own cap) instead of its campaign run.")
@click.option("--continue", "continue_run", default=None, metavar="RUN",
              type=click.Path(file_okay=False),
              help="Instead of --registration: authorize the continuation of RUN that `pilot "
                   "--real --continue RUN` will run (RUN's registration, the slots its chain "
                   "has left, the cap it has left).")
@click.option("--slots", default=None, metavar="A:B",
              help="Authorize only that part of the schedule, as `pilot --slots` runs it.")
@click.option("--chunk", default=None, metavar="K/N",
              help="Authorize only that chunk of traces, as `pilot --chunk` runs it.")
@click.option("--key", "key_path", required=True, type=click.Path(dir_okay=False),
              help="The approver's private key (must be owner-only).")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="Where to write the authorization (never overwritten; mode 0600).")
@click.option("--reader", default=None, help="provider/model (explicit bindings only).")
@click.option("--effort", default=None, help="Reasoning effort (explicit bindings only).")
@click.option("--cap-units", default=None, type=click.IntRange(min=1),
              help="The cap C in integer money units, 1 unit = 5e-8 USD (explicit "
                   "bindings only).")
@click.option("--deadline", "deadlines", multiple=True, callback=_deadline,
              metavar="NAME=SECONDS", help="A bound deadline (repeatable).")
@click.option("--output-root", required=True, type=click.Path(file_okay=False),
              help="The run directory this authorization may be consumed in (pilot --real "
                   "--run-dir / smoke --run-dir).")
@click.option("--credential-env", default=None, metavar="NAME",
              help="NAME of the environment variable holding the provider credential "
                   "(explicit bindings only).")
@click.option("--approver", required=True)
@click.option("--approval-reference", required=True,
              help="Reference of the numeric approval of this cap.")
@click.option("--id", "authorization_id", default=None, help="Default: a fresh random id.")
@click.option("--valid-for", default=24 * 3600, show_default=True,
              type=click.IntRange(min=1, max=_MAX_VALIDITY_S), help="Lifetime in seconds.")
@click.option("--faux", is_flag=True, help="Sign in the faux domain (tests and drills only).")
def command(registration: str | None, sha256: str | None, smoke: bool,
            continue_run: str | None, slots: str | None, chunk: str | None, key_path: str,
            out: str, reader: str | None, effort: str | None, cap_units: int | None,
            deadlines: dict[str, int], output_root: str, credential_env: str | None,
            approver: str, approval_reference: str, authorization_id: str | None,
            valid_for: int, faux: bool, **digests: str | None) -> None:
    """Sign an authorization binding a registered campaign to a cap and a run root.

    With --registration FILE --sha256 S every binding is derived from the registration
    (add --smoke for its smoke, --slots A:B or --chunk K/N for a part); with --continue
    RUN, from RUN's chain (the slots and cap it has left); otherwise give them all
    explicitly. The provider account id is read from EFOLD_ACCOUNT_ID.

    Exit status: 0 signed and written, 2 usage error or refused (nothing written).
    """
    domain = AuthorizationDomain.FAUX if faux else AuthorizationDomain.REAL
    explicit = {"reader": reader, "effort": effort, "cap_units": cap_units,
                "credential_env": credential_env, **digests}
    try:
        derived = (registration is not None and sha256 is not None) or continue_run is not None
        if (slots is not None or chunk is not None) and (smoke or not derived):
            fail(Code.AUTHORIZATION_INVALID.value, "--slots and --chunk take --registration "
                 "and --sha256 or --continue, never --smoke")
        if continue_run is not None:
            if registration is not None or sha256 is not None or smoke:
                fail(Code.AUTHORIZATION_INVALID.value, "--continue RUN derives every binding "
                     "from RUN: no --registration, --sha256 or --smoke")
        if derived:
            given = sorted(k for k in _EXPLICIT if explicit.get(k) is not None)
            if given or deadlines:
                fail(Code.AUTHORIZATION_INVALID.value, "--registration (or --continue) derives every "
                     "binding; "
                     f"drop {', '.join('--' + k.replace('_', '-') for k in given) or '--deadline'}")
            bindings = registration_bindings(registration, sha256, output_root, smoke=smoke,
                                             continue_run=continue_run, slots=slots,
                                             chunk=chunk)
        elif registration is not None or sha256 is not None or smoke:
            fail(Code.REGISTRATION_INVALID.value, "--registration and --sha256 go together "
                 "(--smoke needs them)")
        else:
            missing = [k for k in _EXPLICIT if explicit.get(k) is None]
            if missing:
                fail(Code.AUTHORIZATION_INVALID.value, "give --registration FILE --sha256 S, or "
                     f"every binding: missing {', '.join('--' + k.replace('_', '-') for k in missing)}")
            bindings = msgspec.convert(
                {"cap_units": cap_units, "reader": reader, "effort": effort,
                 "deadlines": deadlines, "output_root": canonical_output_root(output_root),
                 "credential_env_var": credential_env, **digests},
                AuthorizationBindings)
        try:
            key = load_private_key(key_path)
        except EfoldError as exc:
            fail(exc.code.value, f"key {key_path}: {exc.detail or exc.code.value}")
        account_id = os.environ.get(ACCOUNT_ENV)
        if not account_id:
            fail(Code.AUTHORIZATION_INVALID.value, f"set the provider account id in {ACCOUNT_ENV}")
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
    except (TypeError, ValueError, msgspec.ValidationError) as exc:  # a binding the schema refuses
        fail(Code.AUTHORIZATION_INVALID.value, type(exc).__name__)
    click.echo(f"authorization: {out}")
    click.echo(f"id: {attestation.authorization_id}")
    click.echo(f"sha256: {hashlib.sha256(artifact).hexdigest()}")
    if derived:
        b = bindings
        what = ("smoke" if smoke else f"continuation of {continue_run}" if continue_run
                else "campaign run")
        click.echo(f"bound: {what} of {b.reader} "
                   f"(effort {b.effort}), cap {units_to_usd(b.cap_units)} USD, run directory "
                   f"{b.output_root}, credential variable {b.credential_env_var}")


def registration_bindings(registration: str | None, sha256: str | None, output_root: str, *,
                          smoke: bool, continue_run: str | None = None,
                          slots: str | None = None,
                          chunk: str | None = None) -> AuthorizationBindings:
    """The bindings ``pilot --real`` (``smoke`` with ``smoke``) derives for this
    registration in ``output_root``: of a continuation of ``continue_run`` (RUN's
    registration) or a part (``slots``, ``chunk``), its own schedule and cap."""
    try:
        chosen = choose_run(
            None if registration is None or sha256 is None
            else load_registration(registration, sha256),
            continue_run=continue_run, slots=slots, chunk=chunk)
    except ValueError as exc:
        fail(Code.AUTHORIZATION_INVALID.value, str(exc))
    loaded = chosen.loaded
    reg = loaded.registration
    plan = chosen.part or plan_for(reg)
    cap = None if chosen.part is None else chosen.part.cap_units
    if smoke:
        cap = smoke_cap_units(reg)
        plan = smoke_plan(plan, cap)
    return run_bindings(reg, loaded.data, plan.schedule_sha256,
                        Path(canonical_output_root(output_root)), credential_binding(reg),
                        cap_units=cap)
