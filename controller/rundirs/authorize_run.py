"""Authorization for a run: the bindings a run must match, faux minting and burning,
and the real route's grant.

A faux run mints its own faux authorization (its own domain: it can never pass the
real validator), consumes it in the faux burn registry beside the run root and verifies
the pair before any child starts. A real run (``pilot --real``, ``smoke``) brings a
``RealGrant``: everything it needs is read and checked before anything is written
(``load_grant``); its authorization is consumed in the real burn registry under the run
lease before any child starts (``consume_real``), exactly once, ever.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from efold.controller.campaigns.campaign import prep_seconds, probe_seconds
from efold.controller.campaigns.profiles import Profile, is_loopback_url
from efold.controller.campaigns.registration import Registration
from efold.controller.campaigns.shards import ShardTicket
from efold.controller.errors import ControllerError
from efold.digests import canonical_json, runtime_digest, sha256_hex
from efold.errors import Code
from efold.input_files import InputFileError, read_input
from efold.registry.approver_keys import load_public_key
from efold.registry.authorization import (
    FAUX_ACCOUNT_ID,
    MAX_ARTIFACT_BYTES,
    AuthorizationBindings,
    AuthorizationDomain,
    mint_faux_authorization,
)
from efold.registry.burn import consume_authorization, verify_consumption
from efold.registry.lease import Lease

FAUX_CREDENTIAL_ENV: Final = "EFOLD_FAUX_NO_CREDENTIAL"
# Bound as the credential variable of a route that takes none (a local server).
NO_CREDENTIAL_ENV: Final = "EFOLD_NO_CREDENTIAL"
ACCOUNT_ENV: Final = "EFOLD_ACCOUNT_ID"  # the provider account id, for pilot and authorize
CI_ENV: Final = "CI"


def credential_binding(reg: Registration) -> str:
    """The credential variable an authorization binds: the reader's (the summariser's is
    bound through the registration's reader digest)."""
    return reg.campaign.reader.credential_env or NO_CREDENTIAL_ENV


def run_bindings(reg: Registration, reg_bytes: bytes, schedule_sha256: str,
                 output_root: Path, credential_env_var: str, *,
                 cap_units: int | None = None) -> AuthorizationBindings:
    """What an authorization for this run must bind (``cap_units`` None: the
    registration's cap; a smoke binds its own, smaller one)."""
    d = reg.campaign.deadlines
    return AuthorizationBindings(
        registration_raw_sha256=sha256_hex(reg_bytes),
        registration_canonical_sha256=sha256_hex(canonical_json(reg)),
        code_digest=reg.digests.build,  # the source tree the registration froze
        build_digest=runtime_digest(),  # the interpreter and dependencies it runs on
        reader=f"{reg.campaign.reader.provider}/{reg.campaign.reader.model}",
        effort=reg.campaign.reader.effort or "none",
        catalog_digest=reg.digests.catalog,
        policy_digest=reg.digests.policy,
        cap_units=reg.cap_units if cap_units is None else cap_units,
        schedule_digest=schedule_sha256,
        # milliseconds: exact for any deadline a campaign can hold, never truncated to 0
        deadlines={
            "prep_ms": round(prep_seconds(reg.campaign) * 1000),
            "probe_ms": round(probe_seconds(reg.campaign) * 1000),
            "run_ms": round(d.run_seconds * 1000),
            "grace_ms": round(d.grace_seconds * 1000),
        },
        output_root=os.path.realpath(output_root),
        credential_env_var=credential_env_var,
    )


def shard_credential_binding(reg: Registration, route: str) -> str:
    """The credential variable a shard's authorization binds: the real route's (its
    name only: the value is read on the shard's node), the local route's none, or the
    faux placeholder."""
    if route == "real":
        return credential_binding(reg)
    return NO_CREDENTIAL_ENV if route == "local" else FAUX_CREDENTIAL_ENV


def mint_shard(reg: Registration, reg_bytes: bytes, schedule_sha256: str, run_dir: Path, *,
               authorization_id: str, cap_units: int, route: str = "faux"
               ) -> tuple[bytes, bytes]:
    """A cluster run's authorization for one shard (its own domain, ``SHARD``): its
    bindings are the shard's (schedule, cap, the shard's run directory on its node, the
    route's credential variable). Returns the artifact and the raw public key that
    verifies it."""
    bindings = run_bindings(reg, reg_bytes, schedule_sha256, run_dir,
                            shard_credential_binding(reg, route), cap_units=cap_units)
    mint = mint_faux_authorization(bindings, authorization_id=authorization_id,
                                   domain=AuthorizationDomain.SHARD)
    return mint.artifact, mint.trusted_key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def consume_shard(reg: Registration, reg_bytes: bytes, schedule_sha256: str, lease: Lease,
                  run_id: str, ticket: ShardTicket) -> str:
    """Consume a shard's authorization for this shard run (the shard burn registry
    beside its run root) and verify the pair before any child starts; returns its id.
    Its bindings must be this run's: this registration, the shard's schedule and cap,
    this run directory; a second use refuses (``authorization_consumed``)."""
    bindings = run_bindings(reg, reg_bytes, schedule_sha256, Path(lease.run_dir),
                            shard_credential_binding(reg, ticket.route),
                            cap_units=ticket.spec.cap_units)
    record = consume_authorization(
        ticket.artifact, domain=AuthorizationDomain.SHARD,
        trusted_keys=[Ed25519PublicKey.from_public_bytes(ticket.trusted_key)],
        expected=bindings, account_id=FAUX_ACCOUNT_ID, lease=lease, run_id=run_id,
    )
    return record.authorization_id


def consume_faux(reg: Registration, reg_bytes: bytes, schedule_sha256: str, lease: Lease,
                 run_id: str, *, cap_units: int | None = None,
                 domain: AuthorizationDomain = AuthorizationDomain.FAUX) -> str:
    """Mint, consume and verify a faux authorization for this run (``domain`` LOCAL: a
    local route's, which binds the no-credential variable); returns its id."""
    credential_env = (NO_CREDENTIAL_ENV if domain is AuthorizationDomain.LOCAL
                      else FAUX_CREDENTIAL_ENV)
    bindings = run_bindings(reg, reg_bytes, schedule_sha256, Path(lease.run_dir),
                            credential_env, cap_units=cap_units)
    mint = mint_faux_authorization(bindings, domain=domain)

    consume_authorization(
        mint.artifact, domain=domain, trusted_keys=[mint.trusted_key],
        expected=bindings, account_id=FAUX_ACCOUNT_ID, lease=lease,
        run_id=run_id,
    )
    verify_consumption(
        lease.run_dir, domain=domain,
        authorization_id=mint.authorization_id, artifact_sha256=sha256_hex(mint.artifact),
        run_id=run_id, controller=lease.holder,
    )
    return mint.authorization_id


@dataclass(frozen=True)
class RealGrant:
    """What a real run brings: the signed authorization, the keys it must verify under,
    the provider account id, and the credentials read from the controller's environment
    (by variable name, once, at the start). ``repr`` never shows a credential."""

    artifact: bytes
    trusted_keys: list[Ed25519PublicKey]
    account_id: str
    credentials: dict[str, str] = field(repr=False)
    # A local route's run (``LOCAL_GRANT``): every model on loopback without a
    # credential; its authorization is minted and burned by the run itself
    # (``consume_faux`` in the LOCAL domain), never an operator's.
    local: bool = False

    def credential(self, profile: Profile | None) -> bytes | None:
        """The credential a profile's requests carry (None: the route takes none)."""
        if profile is None or profile.credential_env is None:
            return None
        return self.credentials[profile.credential_env].encode("ascii")


# What a local route's run brings: nothing to verify and no credential.
LOCAL_GRANT: Final = RealGrant(b"", [], FAUX_ACCOUNT_ID, {}, local=True)


# Variables that make the controller show what it handles, or weaken one of its checks:
# a paid run refuses while any is set, even empty (``debug_environment``). Children never
# see them (``childenv``: an allowlist), and the guard reads no proxy, netrc or
# certificate setting from the environment (``guard.wire.http``). Not ``PYTHONBREAKPOINT``:
# efold calls no ``breakpoint()``, and Ray sets it in every process of a cluster.
DEBUG_VARIABLES: Final = {
    "EFOLD_ISOLATION_SIMULATE": "simulates refused fold isolation",
    "PYTHONINSPECT": "opens a prompt over the controller's memory when it ends",
    "PYTHONDEBUG": "prints the parser's debug output",
    "PYTHONVERBOSE": "traces every import",
    "PYTHONDEVMODE": "installs development hooks and warnings",
}


def check_real_route(reg: Registration, environ: Mapping[str, str]) -> None:
    """``lookup_pilot_real_route_unavailable`` unless the registration's routes may
    dispatch here: every profile is a real endpoint (or the deterministic summariser),
    and where ``CI`` is set (even empty) only to a loopback base URL without a
    credential, so that no money can move from a CI machine; ``debug_environment``
    while a variable of ``DEBUG_VARIABLES`` is set, even empty."""
    debug = sorted(name for name in DEBUG_VARIABLES if name in environ)
    flags = [flag for flag, on in (("-i", sys.flags.inspect or sys.flags.interactive),
                                   ("-v", sys.flags.verbose), ("-d", sys.flags.debug),
                                   ("-X dev", sys.flags.dev_mode)) if on]
    if flags:  # the same, given to the interpreter as options
        raise ControllerError(Code.DEBUG_ENVIRONMENT,
                              f"python was started with {' '.join(flags)}: a paid run does "
                              "not start under a debug option; run it without")
    if debug:
        raise ControllerError(Code.DEBUG_ENVIRONMENT, "; ".join(
            f"{name} is set ({DEBUG_VARIABLES[name]})" for name in debug)
            + ": a paid run does not start while it is; unset it")
    code = Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE
    profiles = [p for p in (reg.campaign.reader, reg.campaign.summariser) if p is not None]
    if reg.campaign.reader.is_faux:
        raise ControllerError(code, "the reader is faux: run it with --faux")
    if CI_ENV in environ:
        for p in profiles:
            if not is_loopback_url(p.base_url) or p.credential_env is not None:
                raise ControllerError(code, "where CI is set, real dispatch goes only to a "
                                            "loopback server without a credential")


def load_grant(reg: Registration, *, authorization: str | None, trusted: Sequence[str],
               environ: Mapping[str, str], with_credentials: bool = True) -> RealGrant:
    """Read what a real run needs before anything is written: the route check, the
    authorization file, the trusted keys, the account id (``EFOLD_ACCOUNT_ID``) and
    every credential the profiles name (not ``with_credentials``: a cluster run's
    controller, which sends nothing; each shard reads them on its node). Each miss
    refuses with ``lookup_pilot_real_route_unavailable`` naming it."""
    code = Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE
    check_real_route(reg, environ)
    if authorization is None or not trusted:
        raise ControllerError(code, "a real run needs --authorization FILE and --trust KEY")
    account_id = environ.get(ACCOUNT_ENV)
    if not account_id:
        raise ControllerError(code, f"a real run needs the provider account id in {ACCOUNT_ENV}")
    try:
        # A regular file of at most the artifact's own bound (a FIFO would hang here).
        artifact = read_input(authorization, what="authorization", limit=MAX_ARTIFACT_BYTES)
    except InputFileError as exc:
        if exc.code is not Code.INPUT_FILE_UNREADABLE:
            raise
        raise ControllerError(code, f"authorization {authorization} unreadable") from exc
    keys = [load_public_key(k) for k in trusted]
    return RealGrant(artifact, keys, account_id, {} if not with_credentials
                     else read_credentials(reg, environ))


def read_credentials(reg: Registration, environ: Mapping[str, str], *,
                     where: str = "") -> dict[str, str]:
    """Every credential the profiles name, by variable, from ``environ``; a variable
    not set refuses (``lookup_pilot_real_route_unavailable``, naming it and ``where``)."""
    credentials: dict[str, str] = {}
    for p in (reg.campaign.reader, reg.campaign.summariser):
        if p is None or p.credential_env is None:
            continue
        value = environ.get(p.credential_env)
        if not value:
            raise ControllerError(Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE,
                                  f"the credential variable {p.credential_env} is not set{where}")
        credentials[p.credential_env] = value
    return credentials


def consume_real(reg: Registration, reg_bytes: bytes, schedule_sha256: str, lease: Lease,
                 run_id: str, grant: RealGrant, *, cap_units: int | None = None) -> str:
    """Consume the operator's signed authorization for this run (real burn registry)
    and verify the pair before any child starts; returns its id."""
    bindings = run_bindings(reg, reg_bytes, schedule_sha256, Path(lease.run_dir),
                            credential_binding(reg), cap_units=cap_units)
    record = consume_authorization(
        grant.artifact, domain=AuthorizationDomain.REAL, trusted_keys=grant.trusted_keys,
        expected=bindings, account_id=grant.account_id, lease=lease, run_id=run_id,
    )
    return record.authorization_id
