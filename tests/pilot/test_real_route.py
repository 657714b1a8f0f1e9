"""``pilot --real`` refuses in this build, after checking what it can, and burns nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from efold_pilot_kit import small_registration

from efold.controller.authorize_run import refuse_real, run_bindings
from efold.controller.plan import plan_for
from efold.errors import Code
from efold.registry.approver_keys import load_private_key, write_key_pair
from efold.registry.authorization import (
    AUTHORIZATION_VERSION,
    Attestation,
    AuthorizationDomain,
    commit_account,
    mint_faux_authorization,
    new_authorization_id,
    sign_attestation,
)

ACCOUNT = "acct-fictional-42"


def _real_artifact(tmp_path: Path, cap_units: int | None = None) -> tuple[Path, Path, Path]:
    reg, raw = small_registration()
    schedule = plan_for(reg).schedule_sha256
    out = tmp_path / "runs"
    bindings = run_bindings(reg, raw, schedule, out, "OPENAI_API_KEY")
    if cap_units is not None:
        import msgspec

        bindings = msgspec.structs.replace(bindings, cap_units=cap_units)
    private, public, _ = write_key_pair(tmp_path / "approver")
    now = int(time.time())
    attestation = Attestation(
        version=AUTHORIZATION_VERSION, domain=AuthorizationDomain.REAL,
        authorization_id=new_authorization_id(), bindings=bindings,
        account=commit_account(ACCOUNT, domain=AuthorizationDomain.REAL),
        approver="ops-fictional", approval_reference="approval-0001",
        issued_at=now, expires_at=now + 3600,
    )
    artifact = tmp_path / "auth.json"
    artifact.write_bytes(sign_attestation(attestation, load_private_key(private)))
    return artifact, Path(public), out


def _refusal(tmp_path: Path, artifact: Path | None, trusted: list[str], out: Path) -> str:
    reg, raw = small_registration()
    err = refuse_real(reg, raw, plan_for(reg).schedule_sha256,
                      authorization=str(artifact) if artifact else None, trusted=trusted,
                      output_root=out, credential_env_var="OPENAI_API_KEY",
                      account_id=ACCOUNT)
    assert err.code is Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE
    return err.detail


@pytest.fixture(autouse=True)
def _no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)


def test_real_without_an_authorization_refuses(tmp_path: Path) -> None:
    assert "--authorization" in _refusal(tmp_path, None, [], tmp_path)


def test_real_with_a_verified_authorization_still_refuses_and_burns_nothing(
        tmp_path: Path) -> None:
    artifact, public, out = _real_artifact(tmp_path)
    before = artifact.read_bytes()
    detail = _refusal(tmp_path, artifact, [str(public)], out)
    assert "verified" in detail and "not consumed" in detail
    assert artifact.read_bytes() == before
    assert not out.exists()  # no run directory, lease or marker was created


def test_real_with_an_untrusted_key_refuses_with_its_code(tmp_path: Path) -> None:
    artifact, _, out = _real_artifact(tmp_path)
    _, other, _ = write_key_pair(tmp_path / "other")
    assert Code.AUTHORIZATION_UNTRUSTED.value in _refusal(tmp_path, artifact, [other], out)


def test_real_with_a_changed_binding_refuses(tmp_path: Path) -> None:
    artifact, public, out = _real_artifact(tmp_path, cap_units=1)
    assert Code.AUTHORIZATION_BINDING_MISMATCH.value in _refusal(
        tmp_path, artifact, [str(public)], out)


def test_a_faux_authorization_never_passes_the_real_route(tmp_path: Path) -> None:
    reg, raw = small_registration()
    out = tmp_path / "runs"
    mint = mint_faux_authorization(run_bindings(reg, raw, plan_for(reg).schedule_sha256, out,
                                                "OPENAI_API_KEY"))
    artifact = tmp_path / "faux.json"
    artifact.write_bytes(mint.artifact)
    _, public, _ = write_key_pair(tmp_path / "approver")
    detail = _refusal(tmp_path, artifact, [public], out)
    assert "authorization refused" in detail


def test_real_refuses_wherever_ci_is_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "")
    artifact, public, out = _real_artifact(tmp_path)
    assert "CI" in _refusal(tmp_path, artifact, [str(public)], out)


def test_real_cli_refuses_before_writing_anything(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from efold.controller.cli import main

    result = CliRunner().invoke(main, ["pilot", "--real", "--runs", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert "lookup_pilot_real_route_unavailable" in result.output
    assert not (tmp_path / "r").exists()
