"""Authorization for a run: the bindings a run must match, faux minting and burning,
and the refusal of the real route.

A faux run mints its own faux authorization (its own domain: it can never pass the
real validator), consumes it in the faux burn registry beside the run root and verifies
the pair before any child starts. A real run is refused before anything is written:
``lookup_pilot_real_route_unavailable``, after its authorization has been verified
against the operator's trusted keys (so an operator learns whether the artifact would be
accepted), and never consumed (an authorization is single-use: burning one for a run
that cannot dispatch would waste it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from efold.controller.errors import ControllerError
from efold.controller.registration import Registration
from efold.digests import canonical_json, runtime_digest, sha256_hex
from efold.errors import Code, EfoldError
from efold.registry.approver_keys import load_public_key
from efold.registry.authorization import (
    FAUX_ACCOUNT_ID,
    AuthorizationBindings,
    AuthorizationDomain,
    mint_faux_authorization,
    verify_real_authorization,
)
from efold.registry.burn import consume_authorization, verify_consumption
from efold.registry.lease import Lease

# The single release gate of the paid route (a later milestone). Nothing sets it.
REAL_ROUTE_ENABLED: Final = False
FAUX_CREDENTIAL_ENV: Final = "EFOLD_FAUX_NO_CREDENTIAL"


def run_bindings(reg: Registration, reg_bytes: bytes, schedule_sha256: str,
                 output_root: Path, credential_env_var: str) -> AuthorizationBindings:
    d = reg.campaign.deadlines
    return AuthorizationBindings(
        registration_raw_sha256=sha256_hex(reg_bytes),
        registration_canonical_sha256=sha256_hex(canonical_json(reg)),
        code_digest=reg.digests.build,  # the source tree the registration froze
        build_digest=runtime_digest(),  # the interpreter and dependencies it runs on
        reader=f"{reg.campaign.reader.provider}/{reg.campaign.reader.model}",
        effort=reg.campaign.reader.effort,
        catalog_digest=reg.digests.catalog,
        policy_digest=reg.digests.policy,
        cap_units=reg.cap_units,  # positive: campaign validation guarantees it
        schedule_digest=schedule_sha256,
        # milliseconds: exact for any deadline a campaign can hold, never truncated to 0
        deadlines={
            "prep_ms": round(d.prep_seconds * 1000),
            "probe_ms": round(d.probe_seconds * 1000),
            "run_ms": round(d.run_seconds * 1000),
            "grace_ms": round(d.grace_seconds * 1000),
        },
        output_root=os.path.realpath(output_root),
        credential_env_var=credential_env_var,
    )


def consume_faux(reg: Registration, reg_bytes: bytes, schedule_sha256: str, lease: Lease,
                 run_id: str) -> str:
    """Mint, consume and verify a faux authorization for this run; returns its id."""
    bindings = run_bindings(reg, reg_bytes, schedule_sha256, Path(lease.run_dir),
                            FAUX_CREDENTIAL_ENV)
    mint = mint_faux_authorization(bindings)

    consume_authorization(
        mint.artifact, domain=AuthorizationDomain.FAUX, trusted_keys=[mint.trusted_key],
        expected=bindings, account_id=FAUX_ACCOUNT_ID, lease=lease,
        run_id=run_id,
    )
    verify_consumption(
        lease.run_dir, domain=AuthorizationDomain.FAUX,
        authorization_id=mint.authorization_id, artifact_sha256=sha256_hex(mint.artifact),
        run_id=run_id, controller=lease.holder,
    )
    return mint.authorization_id


def refuse_real(reg: Registration, reg_bytes: bytes, schedule_sha256: str, *,
                authorization: str | None, trusted: list[str], output_root: Path,
                credential_env_var: str, account_id: str | None) -> ControllerError:
    """Check a real request as far as this milestone can, then return the refusal.

    Order: CI present (even empty) refuses; no authorization or trusted key refuses; an
    authorization that does not verify refuses with its code as the detail; one that
    verifies still refuses, because the real route's release gate is closed.
    """
    code = Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE
    if "CI" in os.environ:
        return ControllerError(code, "paid runs never run where CI is set")
    if authorization is None or not trusted:
        return ControllerError(code, "--real needs --authorization FILE and --trust KEY")
    if not account_id:
        return ControllerError(code, "--real needs the provider account id in EFOLD_ACCOUNT_ID")
    try:
        artifact = Path(authorization).read_bytes()
        keys = [load_public_key(k) for k in trusted]
        bindings = run_bindings(reg, reg_bytes, schedule_sha256, output_root,
                                credential_env_var)
        verified = verify_real_authorization(
            artifact, trusted_keys=keys, expected=bindings, account_id=account_id,
        )
    except EfoldError as exc:
        return ControllerError(code, f"authorization refused: {exc.code.value}")
    except OSError:
        return ControllerError(code, "authorization file unreadable")
    if not REAL_ROUTE_ENABLED:
        return ControllerError(
            code, f"authorization {verified.attestation.authorization_id} verified; the real route is not "
            "released in this build (not consumed)"
        )
    return ControllerError(code, "unreachable")  # pragma: no cover
