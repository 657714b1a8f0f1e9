"""keygen, authorize and verify-authorization through the real click group."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from efold_test_kit import SAMPLE_DIGESTS, sample_bindings

from efold.controller.cli import main
from efold.registry.approver_keys import load_public_key
from efold.registry.authorization import (
    AuthorizationBindings,
    verify_faux_authorization,
    verify_real_authorization,
)

ACCOUNT = "acct-fictional-cli"


# The authorize command's digest options, as SAMPLE_DIGESTS names them.
DIGESTS = {name.replace("_", "-"): value for name, value in SAMPLE_DIGESTS.items()}


def _bindings(output_root: Path) -> AuthorizationBindings:
    return sample_bindings(output_root, deadlines={"probe_s": 600, "run_s": 3600},
                           credential_env_var="EFOLD_FICTIONAL_KEY")


def _invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def _authorize_args(key: Path, out: Path, root: Path, *extra: str) -> list[str]:
    args = ["authorize", "--key", str(key), "--out", str(out)]
    for name, value in DIGESTS.items():
        args += [f"--{name}", value]
    args += ["--reader", "faux-reader", "--effort", "low", "--cap-units", "78400000",
             "--deadline", "probe_s=600", "--deadline", "run_s=3600",
             "--output-root", str(root), "--credential-env", "EFOLD_FICTIONAL_KEY",
             "--approver", "approver@example.invalid", "--approval-reference", "appr-9"]
    return args + list(extra)


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    code, out, _ = _invoke("keygen", "--out", str(tmp_path / "approver"))
    assert code == 0, out
    return tmp_path / "approver"


def test_keygen_writes_owner_only_private_key_and_refuses_to_overwrite(keys: Path) -> None:
    private, public = Path(f"{keys}.key"), Path(f"{keys}.pub")
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    assert b"PRIVATE KEY" in private.read_bytes() and b"PUBLIC KEY" in public.read_bytes()
    before = private.read_bytes()
    code, _, err = _invoke("keygen", "--out", str(keys))
    assert code != 0 and "publish_target_exists" in err
    assert private.read_bytes() == before


def test_authorize_then_verify_round_trip(keys: Path, tmp_path: Path) -> None:
    out, root = tmp_path / "auth.json", tmp_path / "runs" / "r1"
    code, stdout, err = _invoke(*_authorize_args(Path(f"{keys}.key"), out, root),
                                env={"EFOLD_ACCOUNT_ID": ACCOUNT})
    assert code == 0, err
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    artifact = out.read_bytes()
    assert ACCOUNT.encode() not in artifact
    assert f"sha256: {hashlib.sha256(artifact).hexdigest()}" in stdout
    # The controller-side validator accepts it for exactly these bindings and account.
    trusted = [load_public_key(f"{keys}.pub")]
    verified = verify_real_authorization(artifact, trusted_keys=trusted,
                                         expected=_bindings(root), account_id=ACCOUNT)
    code, stdout, err = _invoke("verify-authorization", str(out), "--trust", f"{keys}.pub")
    assert code == 0, err
    assert f"id: {verified.authorization_id}" in stdout
    # Content-free: no path, approver, reader or account in the verdict.
    for secret in (str(root), "approver@example.invalid", "faux-reader", ACCOUNT):
        assert secret not in stdout + err
    # The real validator refuses it as faux, and vice versa for a --faux one.
    code, _, err = _invoke("verify-authorization", str(out), "--trust", f"{keys}.pub",
                           "--faux")
    assert code != 0 and err.startswith(f"refused: authorization_domain_mismatch ({out}: ")


def test_faux_authorize_passes_only_the_faux_validator(keys: Path, tmp_path: Path) -> None:
    out, root = tmp_path / "faux.json", tmp_path / "runs" / "f1"
    code, _, err = _invoke(*_authorize_args(Path(f"{keys}.key"), out, root, "--faux"),
                           env={"EFOLD_ACCOUNT_ID": ACCOUNT})
    assert code == 0, err
    trusted = [load_public_key(f"{keys}.pub")]
    verify_faux_authorization(out.read_bytes(), trusted_keys=trusted,
                              expected=_bindings(root), account_id=ACCOUNT)
    code, _, err = _invoke("verify-authorization", str(out), "--trust", f"{keys}.pub")
    assert code != 0 and "authorization_domain_mismatch" in err


def test_verify_refuses_untrusted_key_and_tampered_file(keys: Path, tmp_path: Path) -> None:
    out = tmp_path / "auth.json"
    _invoke(*_authorize_args(Path(f"{keys}.key"), out, tmp_path / "r"),
            env={"EFOLD_ACCOUNT_ID": ACCOUNT})
    _invoke("keygen", "--out", str(tmp_path / "stranger"))
    code, _, err = _invoke("verify-authorization", str(out), "--trust",
                           str(tmp_path / "stranger.pub"))
    assert code != 0 and err.startswith(f"refused: authorization_untrusted ({out}: ")
    data = out.read_bytes().replace(b'"cap_units":78400000', b'"cap_units":78400001')
    os.unlink(out)
    out.write_bytes(data)
    os.chmod(out, 0o600)
    code, _, err = _invoke("verify-authorization", str(out), "--trust", f"{keys}.pub")
    assert code != 0 and err.startswith(f"refused: authorization_invalid ({out}: ")


def test_authorize_refuses_a_group_or_other_readable_key(keys: Path, tmp_path: Path) -> None:
    os.chmod(f"{keys}.key", 0o640)
    out = tmp_path / "auth.json"
    code, _, err = _invoke(*_authorize_args(Path(f"{keys}.key"), out, tmp_path / "r"),
                           env={"EFOLD_ACCOUNT_ID": ACCOUNT})
    assert code != 0 and "private_read_refused" in err
    assert not out.exists()


def test_authorize_refuses_bad_bindings_and_existing_output(keys: Path, tmp_path: Path) -> None:
    out = tmp_path / "auth.json"
    env = {"EFOLD_ACCOUNT_ID": ACCOUNT}
    args = _authorize_args(Path(f"{keys}.key"), out, tmp_path / "r")
    bad = [a if a != "EFOLD_FICTIONAL_KEY" else "sk-live-value" for a in args]
    code, _, err = _invoke(*bad, env=env)
    assert code != 0 and "authorization_invalid" in err and not out.exists()
    assert _invoke(*args, env=env)[0] == 0
    before = out.read_bytes()
    code, _, err = _invoke(*args, env=env)
    assert code != 0 and "publish_target_exists" in err
    assert out.read_bytes() == before


def test_commands_run_as_a_real_subprocess(keys: Path, tmp_path: Path) -> None:
    out = tmp_path / "auth.json"
    env = {**os.environ, "EFOLD_ACCOUNT_ID": ACCOUNT}
    cmd = [sys.executable, "-m", "efold.controller"]
    subprocess.run(cmd + _authorize_args(Path(f"{keys}.key"), out, tmp_path / "r"),
                   env=env, check=True, capture_output=True)
    proc = subprocess.run([*cmd, "verify-authorization", str(out), "--trust", f"{keys}.pub"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("valid: efold-real-authorization-v1")
