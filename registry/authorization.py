"""Signed authorizations: the attestation a paid run needs, and its faux twin.

An authorization binds one campaign's frozen facts (registration hashes, code/build,
reader, effort, catalog, policy, cap, schedule, deadlines, output root, credential
location, a commitment to the provider account) to an approver's Ed25519 signature.
The controller accepts only keys the operator lists as trusted, and only bindings equal
to the ones it computed itself. It is a trusted *local* attestation: it proves that the
holder of a trusted key approved these exact facts, nothing about who that holder is.

Domain separation: the signed message is ``domain || 0x00 || canonical(attestation)``
and the attestation carries its domain too. ``efold-faux-authorization-v1`` (minted by
the faux pilot with a throw-away key) can never pass the real validator, and a real one
never passes the faux validator: both the domain check and the signature refuse.

Canonical encoding: JSON of the attestation with keys sorted and no whitespace
(msgspec ``order="sorted"``). The artifact file may be reformatted without breaking the
signature; its raw sha256 still changes, and the burn registry keys on the id, so a
reformatted copy cannot be consumed a second time.

Timestamp policy (unix seconds, UTC):

* ``expires_at`` is required, later than ``issued_at``, and at most ``MAX_VALIDITY_S``
  (7 days) after it; otherwise the artifact is ``AUTHORIZATION_INVALID``.
* Before ``issued_at - MAX_CLOCK_SKEW_S`` (5 minutes) it is ``AUTHORIZATION_NOT_YET_VALID``.
* At or after ``expires_at`` it is ``AUTHORIZATION_EXPIRED`` (no skew allowance: expiry
  errs towards refusing).

Money: ``cap_units`` counts integer units of 5e-8 USD (docs/architecture.md §5).
The provider account id is never stored: only a random salt and
``HMAC-SHA256(salt, "efold-account-commitment-v1" || 0 || domain || 0 || account id)``.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import posixpath
import secrets
import time
from collections.abc import Sequence
from typing import Annotated

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from efold.errors import Code
from efold.registry.errors import RegistryError

__all__ = [
    "AUTHORIZATION_VERSION",
    "FAUX_ACCOUNT_ID",
    "MAX_ARTIFACT_BYTES",
    "MAX_CLOCK_SKEW_S",
    "MAX_VALIDITY_S",
    "AccountCommitment",
    "Attestation",
    "AuthorizationBindings",
    "AuthorizationDomain",
    "FauxMint",
    "SignedAuthorization",
    "VerifiedAuthorization",
    "canonical_output_root",
    "check_signature",
    "commit_account",
    "mint_faux_authorization",
    "new_authorization_id",
    "public_key_id",
    "sign_attestation",
    "verify_authorization",
    "verify_faux_authorization",
    "verify_real_authorization",
]

AUTHORIZATION_VERSION = 1
MAX_CLOCK_SKEW_S = 300
MAX_VALIDITY_S = 7 * 24 * 3600
MAX_ARTIFACT_BYTES = 64 * 1024
FAUX_ACCOUNT_ID = "efold-faux-account"
_COMMITMENT_LABEL = b"efold-account-commitment-v1"


class AuthorizationDomain(enum.StrEnum):
    REAL = "efold-real-authorization-v1"
    FAUX = "efold-faux-authorization-v1"
    # A cluster run's part for one shard (``efold.controller.campaigns.shards``), minted by the
    # cluster controller after it consumed the campaign's own authorization.
    SHARD = "efold-shard-authorization-v1"
    # A local route's run (every model on loopback, no credential: nothing can be
    # billed), minted and burned by its own controller like a faux one.
    LOCAL = "efold-local-authorization-v1"


Sha256Hex = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
Label = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")]
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
AuthorizationId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{7,127}$")]
EnvVarName = Annotated[str, msgspec.Meta(pattern=r"^[A-Z_][A-Z0-9_]{0,127}$")]
DeadlineName = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
Timestamp = Annotated[int, msgspec.Meta(ge=0)]


class AuthorizationBindings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The facts an authorization binds. The controller computes its own copy from the
    registration and plan and passes it as ``expected``: every field must be equal."""

    registration_raw_sha256: Sha256Hex
    registration_canonical_sha256: Sha256Hex
    code_digest: Sha256Hex
    build_digest: Sha256Hex
    reader: Label
    effort: Label
    catalog_digest: Sha256Hex
    policy_digest: Sha256Hex
    cap_units: PositiveInt  # integer money units, 1 unit = 5e-8 USD
    schedule_digest: Sha256Hex
    deadlines: dict[DeadlineName, PositiveInt]  # name -> seconds
    output_root: str  # canonical absolute path of the run root
    credential_env_var: EnvVarName  # the variable's NAME; its value is never bound

    def __post_init__(self) -> None:
        root = self.output_root
        if not root.startswith("/") or posixpath.normpath(root) != root or "\0" in root:
            raise ValueError("output_root must be a canonical absolute path")


class AccountCommitment(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    salt: Sha256Hex  # 32 random bytes, hex
    commitment: Sha256Hex


class Attestation(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: int
    domain: AuthorizationDomain
    authorization_id: AuthorizationId
    bindings: AuthorizationBindings
    account: AccountCommitment
    approver: Text
    approval_reference: Text  # the numeric-approval record this cap was approved under
    issued_at: Timestamp
    expires_at: Timestamp


class SignedAuthorization(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The artifact file: the attestation, which key signed it, and the signature."""

    version: int
    attestation: Attestation
    key_id: Sha256Hex  # sha256 of the raw 32-byte public key
    signature: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{128}$")]


class VerifiedAuthorization(msgspec.Struct, frozen=True):
    """What a successful verification hands on: never the account id or a key."""

    attestation: Attestation
    artifact_sha256: str  # sha256 of the exact artifact bytes (the claim binds it)
    key_id: str

    @property
    def authorization_id(self) -> str:
        return self.attestation.authorization_id

    @property
    def domain(self) -> AuthorizationDomain:
        return self.attestation.domain


class FauxMint(msgspec.Struct, frozen=True):
    """A faux authorization and the only key that verifies it (its private half is
    discarded at once)."""

    artifact: bytes
    trusted_key: Ed25519PublicKey
    authorization_id: str


_decoder = msgspec.json.Decoder(SignedAuthorization)


def new_authorization_id() -> str:
    return "auth-" + secrets.token_hex(16)


def public_key_id(public_key: Ed25519PublicKey) -> str:
    return hashlib.sha256(public_key.public_bytes_raw()).hexdigest()


def _commitment_digest(salt: bytes, domain: AuthorizationDomain, account_id: str) -> str:
    message = b"\0".join((_COMMITMENT_LABEL, domain.value.encode(), account_id.encode()))
    return hmac.new(salt, message, hashlib.sha256).hexdigest()


def commit_account(
    account_id: str, *, domain: AuthorizationDomain, salt: bytes | None = None
) -> AccountCommitment:
    """A salted commitment to the provider account id; the id itself is not kept."""
    if not account_id:
        raise ValueError("empty account id")
    salt = secrets.token_bytes(32) if salt is None else salt
    if len(salt) != 32:
        raise ValueError("salt must be 32 bytes")
    return AccountCommitment(salt=salt.hex(),
                             commitment=_commitment_digest(salt, domain, account_id))


def _signed_message(attestation: Attestation) -> bytes:
    canonical = msgspec.json.encode(attestation, order="sorted")
    return attestation.domain.value.encode() + b"\0" + canonical


def sign_attestation(attestation: Attestation, private_key: Ed25519PrivateKey) -> bytes:
    """The artifact bytes (JSON, one line) of ``attestation`` signed by ``private_key``."""
    # Round-trip through the decoder so a signer can never sign what a verifier would
    # refuse to parse (e.g. a non-canonical output root built in code).
    try:
        attestation = msgspec.json.decode(msgspec.json.encode(attestation), type=Attestation)
    except msgspec.ValidationError as exc:
        raise RegistryError(Code.AUTHORIZATION_INVALID, f"not signable: {exc}") from exc
    signed = SignedAuthorization(
        version=AUTHORIZATION_VERSION,
        attestation=attestation,
        key_id=public_key_id(private_key.public_key()),
        signature=private_key.sign(_signed_message(attestation)).hex(),
    )
    return msgspec.json.encode(signed) + b"\n"


def _decode(artifact: bytes) -> SignedAuthorization:
    if len(artifact) > MAX_ARTIFACT_BYTES:
        raise RegistryError(Code.AUTHORIZATION_INVALID, "artifact too large")
    try:
        signed = _decoder.decode(artifact)
    except msgspec.DecodeError as exc:  # ValidationError included
        raise RegistryError(Code.AUTHORIZATION_INVALID, f"malformed: {exc}") from exc
    if signed.version != AUTHORIZATION_VERSION or signed.attestation.version != AUTHORIZATION_VERSION:
        raise RegistryError(Code.AUTHORIZATION_INVALID, "unknown version")
    return signed


def _check_time(attestation: Attestation, now: float) -> None:
    issued, expires = attestation.issued_at, attestation.expires_at
    if expires <= issued or expires - issued > MAX_VALIDITY_S:
        raise RegistryError(Code.AUTHORIZATION_INVALID, "validity window out of policy")
    if now < issued - MAX_CLOCK_SKEW_S:
        raise RegistryError(Code.AUTHORIZATION_NOT_YET_VALID, "issued in the future")
    if now >= expires:
        raise RegistryError(Code.AUTHORIZATION_EXPIRED, "expired")


def check_signature(
    artifact: bytes,
    *,
    domain: AuthorizationDomain,
    trusted_keys: Sequence[Ed25519PublicKey],
    now: float | None = None,
) -> VerifiedAuthorization:
    """Shape, domain, trusted signature and validity window; **not** the bindings.
    For a content-free verdict on a file (the ``verify-authorization`` command). A run
    must use ``verify_real_authorization`` / ``verify_faux_authorization``."""
    signed = _decode(artifact)
    attestation = signed.attestation
    if attestation.domain is not domain:
        raise RegistryError(Code.AUTHORIZATION_DOMAIN_MISMATCH, "wrong authorization domain")
    by_id = {public_key_id(key): key for key in trusted_keys}
    key = by_id.get(signed.key_id)
    if key is None:
        raise RegistryError(Code.AUTHORIZATION_UNTRUSTED, "signing key is not trusted")
    try:
        key.verify(bytes.fromhex(signed.signature), _signed_message(attestation))
    except InvalidSignature as exc:
        raise RegistryError(Code.AUTHORIZATION_INVALID, "bad signature") from exc
    _check_time(attestation, time.time() if now is None else now)
    return VerifiedAuthorization(
        attestation=attestation,
        artifact_sha256=hashlib.sha256(artifact).hexdigest(),
        key_id=signed.key_id,
    )


def verify_authorization(
    artifact: bytes,
    *,
    domain: AuthorizationDomain,
    trusted_keys: Sequence[Ed25519PublicKey],
    expected: AuthorizationBindings,
    account_id: str,
    now: float | None = None,
) -> VerifiedAuthorization:
    """Everything: ``check_signature``, then every binding equal to ``expected`` and the
    account commitment opening to ``account_id``. Any difference refuses with
    ``AUTHORIZATION_BINDING_MISMATCH`` (the detail names the field, never its value)."""
    verified = check_signature(artifact, domain=domain, trusted_keys=trusted_keys, now=now)
    bound = verified.attestation.bindings
    for field in bound.__struct_fields__:
        if getattr(bound, field) != getattr(expected, field):
            raise RegistryError(Code.AUTHORIZATION_BINDING_MISMATCH, f"differs: {field}")
    account = verified.attestation.account
    actual = _commitment_digest(bytes.fromhex(account.salt), domain, account_id)
    if not hmac.compare_digest(actual, account.commitment):
        raise RegistryError(Code.AUTHORIZATION_BINDING_MISMATCH, "differs: account")
    return verified


def verify_real_authorization(
    artifact: bytes,
    *,
    trusted_keys: Sequence[Ed25519PublicKey],
    expected: AuthorizationBindings,
    account_id: str,
    now: float | None = None,
) -> VerifiedAuthorization:
    """The real-route validator: only ``efold-real-authorization-v1`` passes."""
    return verify_authorization(artifact, domain=AuthorizationDomain.REAL,
                                trusted_keys=trusted_keys, expected=expected,
                                account_id=account_id, now=now)


def verify_faux_authorization(
    artifact: bytes,
    *,
    trusted_keys: Sequence[Ed25519PublicKey],
    expected: AuthorizationBindings,
    account_id: str = FAUX_ACCOUNT_ID,
    now: float | None = None,
) -> VerifiedAuthorization:
    """The faux-pilot validator: only ``efold-faux-authorization-v1`` passes."""
    return verify_authorization(artifact, domain=AuthorizationDomain.FAUX,
                                trusted_keys=trusted_keys, expected=expected,
                                account_id=account_id, now=now)


def mint_faux_authorization(
    bindings: AuthorizationBindings,
    *,
    account_id: str = FAUX_ACCOUNT_ID,
    now: float | None = None,
    lifetime_s: int = 3600,
    authorization_id: str | None = None,
    domain: AuthorizationDomain = AuthorizationDomain.FAUX,
) -> FauxMint:
    """Sign a faux (or shard) authorization with a fresh key whose private half is then
    dropped. Pass ``trusted_key`` to ``verify_faux_authorization``; nothing else can
    verify it, and no validator of the real domain accepts it. ``domain``: FAUX, or
    SHARD for a cluster run's part, LOCAL for a local route's run (never REAL)."""
    if domain is AuthorizationDomain.REAL:
        raise ValueError("a real authorization is signed by an approver, never minted")
    issued = int(time.time() if now is None else now)
    key = Ed25519PrivateKey.generate()
    attestation = Attestation(
        version=AUTHORIZATION_VERSION,
        domain=domain,
        authorization_id=authorization_id or new_authorization_id(),
        bindings=bindings,
        account=commit_account(account_id, domain=domain),
        approver=f"efold-{domain.name.lower()}-pilot",
        approval_reference=domain.name.lower(),
        issued_at=issued,
        expires_at=issued + lifetime_s,
    )
    artifact = sign_attestation(attestation, key)
    return FauxMint(artifact=artifact, trusted_key=key.public_key(),
                    authorization_id=attestation.authorization_id)


def canonical_output_root(path: str | os.PathLike[str]) -> str:
    """The form ``AuthorizationBindings.output_root`` must take for ``path``."""
    return os.path.abspath(os.fspath(path))
