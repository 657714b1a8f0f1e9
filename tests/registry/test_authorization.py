"""Signed authorizations: bindings, trust, domains, timestamps, tampering."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from efold_test_kit import hex_digest, sample_bindings
from hypothesis import given, settings
from hypothesis import strategies as st

from efold.errors import Code
from efold.registry.authorization import (
    AUTHORIZATION_VERSION,
    MAX_CLOCK_SKEW_S,
    MAX_VALIDITY_S,
    Attestation,
    AuthorizationBindings,
    AuthorizationDomain,
    SignedAuthorization,
    check_signature,
    commit_account,
    mint_faux_authorization,
    sign_attestation,
    verify_faux_authorization,
    verify_real_authorization,
)
from efold.registry.errors import RegistryError

ISSUED = 1_800_000_000
ACCOUNT = "acct-fictional-0001"
KEY = Ed25519PrivateKey.generate()
OTHER_KEY = Ed25519PrivateKey.generate()


BINDINGS = sample_bindings(
    "/srv/efold/runs/r1",
    registration_canonical_sha256=hex_digest("canonical"),
    effort="medium",
    cap_units=20_000_000,  # $1.00
    deadlines={"probe_s": 600, "run_s": 7200},
    credential_env_var="EFOLD_FICTIONAL_KEY",
)


def _attestation(**changes: Any) -> Attestation:
    base = Attestation(
        version=AUTHORIZATION_VERSION,
        domain=AuthorizationDomain.REAL,
        authorization_id="auth-0123456789abcdef",
        bindings=BINDINGS,
        account=commit_account(ACCOUNT, domain=AuthorizationDomain.REAL, salt=b"s" * 32),
        approver="approver@example.invalid",
        approval_reference="approval-42",
        issued_at=ISSUED,
        expires_at=ISSUED + 3600,
    )
    return msgspec.structs.replace(base, **changes)


def _sign(attestation: Attestation | None = None, key: Ed25519PrivateKey = KEY) -> bytes:
    return sign_attestation(attestation or _attestation(), key)


def _verify_real(artifact: bytes, **kw: Any) -> Any:
    args: dict[str, Any] = {"trusted_keys": [KEY.public_key()], "expected": BINDINGS,
                            "account_id": ACCOUNT, "now": ISSUED + 10}
    args.update(kw)
    return verify_real_authorization(artifact, **args)


def _code_of(call: Any) -> Code:
    with pytest.raises(RegistryError) as info:
        call()
    return info.value.code


def test_valid_authorization_verifies_and_reports_raw_digest() -> None:
    artifact = _sign()
    verified = _verify_real(artifact)
    assert verified.authorization_id == "auth-0123456789abcdef"
    assert verified.domain is AuthorizationDomain.REAL
    assert verified.artifact_sha256 == hashlib.sha256(artifact).hexdigest()
    assert ACCOUNT.encode() not in artifact  # only the salted commitment is stored


def _binding_variants() -> Iterator[tuple[str, Any]]:
    for field in AuthorizationBindings.__struct_fields__:
        value = getattr(BINDINGS, field)
        if field == "cap_units":
            yield field, value + 1
        elif field == "deadlines":
            yield field, {**value, "probe_s": value["probe_s"] + 1}
        elif field == "output_root":
            yield field, value + "x"
        elif field == "credential_env_var":
            yield field, value + "_2"
        elif field.endswith(("sha256", "digest")):
            yield field, hex_digest(value)
        else:
            yield field, value + "x"


@pytest.mark.parametrize(("field", "changed"), list(_binding_variants()))
def test_any_single_binding_change_refuses(field: str, changed: Any) -> None:
    # Signed honestly over a different value: the controller's expectation differs.
    bindings = msgspec.structs.replace(BINDINGS, **{field: changed})
    artifact = _sign(_attestation(bindings=bindings))
    with pytest.raises(RegistryError) as info:
        _verify_real(artifact)
    assert info.value.code is Code.AUTHORIZATION_BINDING_MISMATCH
    assert info.value.detail == f"differs: {field}"
    _verify_real(artifact, expected=bindings)  # and it is fine for its own bindings


def test_deadline_added_or_removed_refuses() -> None:
    for deadlines in ({"probe_s": 600}, {**BINDINGS.deadlines, "slot_s": 5}):
        bindings = msgspec.structs.replace(BINDINGS, deadlines=deadlines)
        assert _code_of(lambda b=bindings: _verify_real(_sign(_attestation(bindings=b)))) \
            is Code.AUTHORIZATION_BINDING_MISMATCH


def test_wrong_account_refuses() -> None:
    artifact = _sign()
    assert _code_of(lambda: _verify_real(artifact, account_id="acct-fictional-0002")) \
        is Code.AUTHORIZATION_BINDING_MISMATCH


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    else:
        yield path, node


def _mutated(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str) and value and value[-1] in "0123456789abcdef":
        return value[:-1] + ("0" if value[-1] != "0" else "1")
    return value + "x"


ARTIFACT = _sign()
LEAVES = [path for path, _ in _leaves(json.loads(ARTIFACT))]


@pytest.mark.parametrize("path", LEAVES, ids=lambda p: ".".join(map(str, p)))
def test_tampering_with_any_field_without_resigning_refuses(path: tuple[Any, ...]) -> None:
    document = json.loads(ARTIFACT)
    node = document
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = _mutated(node[path[-1]])
    tampered = json.dumps(document).encode()
    code = _code_of(lambda: _verify_real(tampered))
    assert code in (Code.AUTHORIZATION_INVALID, Code.AUTHORIZATION_UNTRUSTED,
                    Code.AUTHORIZATION_DOMAIN_MISMATCH)


@settings(max_examples=200, deadline=None)
@given(position=st.integers(min_value=0, max_value=len(ARTIFACT) - 1),
       replacement=st.integers(min_value=0, max_value=255))
def test_any_byte_change_refuses_or_means_the_same(position: int, replacement: int) -> None:
    tampered = bytearray(ARTIFACT)
    tampered[position] = replacement
    try:
        verified = _verify_real(bytes(tampered))
    except RegistryError:
        return
    # Only an insignificant change (e.g. trailing whitespace) may still verify.
    original = msgspec.json.decode(ARTIFACT, type=SignedAuthorization)
    assert verified.attestation == original.attestation


def test_untrusted_or_wrong_key_refuses() -> None:
    artifact = _sign()
    assert _code_of(lambda: _verify_real(artifact, trusted_keys=[OTHER_KEY.public_key()])) \
        is Code.AUTHORIZATION_UNTRUSTED
    assert _code_of(lambda: _verify_real(artifact, trusted_keys=[])) \
        is Code.AUTHORIZATION_UNTRUSTED
    # Signed by an untrusted key but claiming a trusted key's id: the signature fails.
    forged = json.loads(_sign(key=OTHER_KEY))
    forged["key_id"] = json.loads(artifact)["key_id"]
    assert _code_of(lambda: _verify_real(json.dumps(forged).encode())) \
        is Code.AUTHORIZATION_INVALID
    # Several trusted keys: the right one is found.
    _verify_real(artifact, trusted_keys=[OTHER_KEY.public_key(), KEY.public_key()])


def test_faux_never_passes_real_and_real_never_passes_faux() -> None:
    mint = mint_faux_authorization(BINDINGS, now=ISSUED)
    trusted = [mint.trusted_key]
    faux_args: dict[str, Any] = {"trusted_keys": trusted, "expected": BINDINGS,
                                 "now": ISSUED + 1}
    verify_faux_authorization(mint.artifact, **faux_args)
    assert _code_of(lambda: verify_real_authorization(
        mint.artifact, account_id="efold-faux-account", **faux_args)) \
        is Code.AUTHORIZATION_DOMAIN_MISMATCH
    # Relabelling a faux artifact as real breaks its signature.
    relabelled = json.loads(mint.artifact)
    relabelled["attestation"]["domain"] = AuthorizationDomain.REAL.value
    assert _code_of(lambda: verify_real_authorization(
        json.dumps(relabelled).encode(), account_id="efold-faux-account", **faux_args)) \
        is Code.AUTHORIZATION_INVALID

    real = _sign()
    real_args: dict[str, Any] = {"trusted_keys": [KEY.public_key()], "expected": BINDINGS,
                                 "account_id": ACCOUNT, "now": ISSUED + 10}
    assert _code_of(lambda: verify_faux_authorization(real, **real_args)) \
        is Code.AUTHORIZATION_DOMAIN_MISMATCH
    relabelled = json.loads(real)
    relabelled["attestation"]["domain"] = AuthorizationDomain.FAUX.value
    assert _code_of(lambda: verify_faux_authorization(json.dumps(relabelled).encode(),
                                                      **real_args)) \
        is Code.AUTHORIZATION_INVALID
    # The same key signing the same facts under the faux domain is still faux.
    faux_by_real_key = _sign(_attestation(domain=AuthorizationDomain.FAUX))
    assert _code_of(lambda: _verify_real(faux_by_real_key)) \
        is Code.AUTHORIZATION_DOMAIN_MISMATCH


def test_faux_mint_key_is_the_only_one_that_verifies() -> None:
    one = mint_faux_authorization(BINDINGS, now=ISSUED)
    two = mint_faux_authorization(BINDINGS, now=ISSUED)
    assert one.authorization_id != two.authorization_id
    assert _code_of(lambda: verify_faux_authorization(
        one.artifact, trusted_keys=[two.trusted_key], expected=BINDINGS, now=ISSUED)) \
        is Code.AUTHORIZATION_UNTRUSTED


@pytest.mark.parametrize(("now", "code"), [
    (ISSUED - MAX_CLOCK_SKEW_S, None),
    (ISSUED - MAX_CLOCK_SKEW_S - 1, Code.AUTHORIZATION_NOT_YET_VALID),
    (ISSUED, None),
    (ISSUED + 3599, None),
    (ISSUED + 3600, Code.AUTHORIZATION_EXPIRED),
    (ISSUED + 10**6, Code.AUTHORIZATION_EXPIRED),
])
def test_timestamp_policy_with_injected_clock(now: int, code: Code | None) -> None:
    artifact = _sign()
    if code is None:
        _verify_real(artifact, now=now)
    else:
        assert _code_of(lambda: _verify_real(artifact, now=now)) is code


@pytest.mark.parametrize(("expires", "valid"), [
    (ISSUED + MAX_VALIDITY_S, True),
    (ISSUED + MAX_VALIDITY_S + 1, False),
    (ISSUED, False),
    (ISSUED - 1, False),
])
def test_validity_window_is_bounded(expires: int, valid: bool) -> None:
    artifact = _sign(_attestation(expires_at=expires))
    if valid:
        _verify_real(artifact, now=ISSUED)
    else:
        assert _code_of(lambda: _verify_real(artifact, now=ISSUED)) \
            is Code.AUTHORIZATION_INVALID


def test_malformed_artifacts_refuse() -> None:
    document = json.loads(_sign())
    unknown = {**document, "extra": 1}
    wrong_version = {**document, "version": 2}
    cases = [b"", b"{", b"[]", json.dumps(unknown).encode(),
             json.dumps(wrong_version).encode(), b" " * (70 * 1024)]
    for case in cases:
        assert _code_of(lambda c=case: _verify_real(c)) is Code.AUTHORIZATION_INVALID


def test_unsignable_attestations_are_refused_at_signing() -> None:
    # A credential *value* is not an env var name; a relative output root is not bound.
    bad = msgspec.structs.replace(BINDINGS, credential_env_var="sk-live-123")
    assert _code_of(lambda: _sign(_attestation(bindings=bad))) is Code.AUTHORIZATION_INVALID
    with pytest.raises(ValueError):
        msgspec.structs.replace(BINDINGS, output_root="runs/../r1")


def test_reformatted_artifact_still_verifies_but_has_another_raw_digest() -> None:
    artifact = _sign()
    pretty = json.dumps(json.loads(artifact), indent=2, sort_keys=True).encode()
    one, two = _verify_real(artifact), _verify_real(pretty)
    assert one.authorization_id == two.authorization_id
    assert one.artifact_sha256 != two.artifact_sha256


def test_check_signature_skips_bindings_only() -> None:
    bindings = msgspec.structs.replace(BINDINGS, cap_units=1)
    artifact = _sign(_attestation(bindings=bindings))
    verified = check_signature(artifact, domain=AuthorizationDomain.REAL,
                               trusted_keys=[KEY.public_key()], now=ISSUED)
    assert verified.attestation.bindings.cap_units == 1
    assert _code_of(lambda: check_signature(artifact, domain=AuthorizationDomain.REAL,
                                            trusted_keys=[KEY.public_key()],
                                            now=ISSUED + 3600)) \
        is Code.AUTHORIZATION_EXPIRED
