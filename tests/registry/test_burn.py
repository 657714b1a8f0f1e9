"""The burn registry: single use across crashes, renames, reformatting and recreated
run roots; real files, real leases and real killed processes."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from efold_test_kit import hex_digest, real_artifact, sample_bindings

from efold.errors import Code
from efold.registry.authorization import (
    AuthorizationBindings,
    AuthorizationDomain,
    mint_faux_authorization,
    verify_real_authorization,
)
from efold.registry.burn import (
    CLAIM_NAME,
    CONSUMED_MARKER,
    FAUX_REGISTRY_NAME,
    consume_authorization,
    real_registry_root,
    registry_key,
    verify_consumption,
)
from efold.registry.errors import RegistryError
from efold.registry.files import make_private_dir
from efold.registry.lease import Lease, acquire_lease

KEY = Ed25519PrivateKey.generate()
ACCOUNT = "acct-fictional-0001"
CREDENTIAL_ENV = "EFOLD_TEST_FICTIONAL_CREDENTIAL_FILE"


def _bindings(output_root: Path) -> AuthorizationBindings:
    return sample_bindings(output_root, credential_env_var=CREDENTIAL_ENV)


def _artifact(output_root: Path, authorization_id: str = "auth-burn-test-0001") -> bytes:
    import time

    return real_artifact(_bindings(output_root), KEY, authorization_id=authorization_id,
                         account=ACCOUNT, now=int(time.time()))


@dataclass
class Setup:
    run_root: Path
    registry: Path
    artifact: bytes

    def consume(self, lease: Lease, artifact: bytes | None = None, **kw: Any) -> Any:
        args: dict[str, Any] = {
            "domain": AuthorizationDomain.REAL, "trusted_keys": [KEY.public_key()],
            "expected": _bindings(self.run_root), "account_id": ACCOUNT, "lease": lease,
            "run_id": "run-1", "registry_root": self.registry,
        }
        args.update(kw)
        return consume_authorization(artifact or self.artifact, **args)

    def verify(self, lease: Lease, **kw: Any) -> Any:
        args: dict[str, Any] = {
            "domain": AuthorizationDomain.REAL, "authorization_id": "auth-burn-test-0001",
            "artifact_sha256": hashlib.sha256(self.artifact).hexdigest(), "run_id": "run-1",
            "controller": lease.holder, "registry_root": self.registry,
        }
        args.update(kw)
        return verify_consumption(self.run_root, **args)

    def recreate_root(self) -> None:
        shutil.rmtree(self.run_root)
        make_private_dir(self.run_root)


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    run_root = tmp_path / "runs" / "r1"
    make_private_dir(run_root, parents=True)
    return Setup(run_root=run_root, registry=tmp_path / "home" / "consumed-v1",
                 artifact=_artifact(run_root))


def _code_of(call: Any) -> Code:
    with pytest.raises(RegistryError) as info:
        call()
    return info.value.code


def test_consume_writes_the_pair_and_verifies(setup: Setup) -> None:
    with acquire_lease(setup.run_root, epoch=2) as lease:
        record = setup.consume(lease)
        assert record.authorization_id == "auth-burn-test-0001"
        assert record.controller == lease.holder and record.controller.epoch == 2
        assert record.artifact_sha256 == hashlib.sha256(setup.artifact).hexdigest()
        entry = setup.registry / registry_key(AuthorizationDomain.REAL, "auth-burn-test-0001")
        assert os.stat(entry).st_mode & 0o777 == 0o700
        marker = (setup.run_root / CONSUMED_MARKER).read_bytes()
        claim = (entry / CLAIM_NAME).read_bytes()
        assert ACCOUNT.encode() not in marker + claim
        assert json.loads(marker)["kind"] != json.loads(claim)["kind"]
        assert setup.verify(lease) == record


def test_second_consumption_refuses_even_in_a_recreated_run_root(setup: Setup) -> None:
    with acquire_lease(setup.run_root) as lease:
        setup.consume(lease)
        # Same root: it is no longer fresh.
        assert _code_of(lambda: setup.consume(lease)) is Code.RUN_ROOT_IN_USE
    setup.recreate_root()
    with acquire_lease(setup.run_root) as lease:
        assert _code_of(lambda: setup.consume(lease)) is Code.AUTHORIZATION_CONSUMED
        assert not (setup.run_root / CONSUMED_MARKER).exists()


def test_renamed_or_reformatted_artifact_with_the_same_id_refuses(
    setup: Setup, tmp_path: Path
) -> None:
    with acquire_lease(setup.run_root) as lease:
        setup.consume(lease)
    setup.recreate_root()
    pretty = json.dumps(json.loads(setup.artifact), indent=1).encode()
    renamed = tmp_path / "other-name.auth"
    renamed.write_bytes(pretty)
    reformatted = renamed.read_bytes()
    assert hashlib.sha256(reformatted).digest() != hashlib.sha256(setup.artifact).digest()
    with acquire_lease(setup.run_root) as lease:
        assert _code_of(lambda: setup.consume(lease, reformatted)) \
            is Code.AUTHORIZATION_CONSUMED


def _kill_during_consume(setup: Setup, kill_at_publish: int) -> None:
    """Consume in a child that SIGKILLs itself at the n-th publish (1 = right after the
    registry entry exists, 2 = after the run-root marker)."""
    code = textwrap.dedent(f"""
        import os, signal, sys
        import efold.registry.burn as burn
        from efold.registry.authorization import AuthorizationDomain
        from efold.registry.lease import acquire_lease
        from cryptography.hazmat.primitives import serialization
        from efold.registry.authorization import AuthorizationBindings
        import msgspec
        real_publish, calls = burn.publish_exclusive, []
        def publish(*args, **kw):
            calls.append(1)
            if len(calls) == {kill_at_publish}:
                os.kill(os.getpid(), signal.SIGKILL)
            return real_publish(*args, **kw)
        burn.publish_exclusive = publish
        run_root, registry, artifact_path, key_path, bindings_path = sys.argv[1:6]
        key = serialization.load_pem_public_key(open(key_path, "rb").read())
        bindings = msgspec.json.decode(open(bindings_path, "rb").read(),
                                       type=AuthorizationBindings)
        lease = acquire_lease(run_root)
        burn.consume_authorization(
            open(artifact_path, "rb").read(), domain=AuthorizationDomain.REAL,
            trusted_keys=[key], expected=bindings, account_id={ACCOUNT!r}, lease=lease,
            run_id="run-1", registry_root=registry)
    """)
    from cryptography.hazmat.primitives import serialization

    work = setup.run_root.parent.parent / "work"
    work.mkdir(exist_ok=True)
    (work / "artifact").write_bytes(setup.artifact)
    (work / "key.pub").write_bytes(KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    (work / "bindings").write_bytes(msgspec.json.encode(_bindings(setup.run_root)))
    proc = subprocess.run(
        [sys.executable, "-c", code, str(setup.run_root), str(setup.registry),
         str(work / "artifact"), str(work / "key.pub"), str(work / "bindings")],
        capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


@pytest.mark.parametrize("kill_at_publish", [1, 2])
def test_process_killed_mid_consumption_leaves_the_id_burned_forever(
    setup: Setup, kill_at_publish: int
) -> None:
    _kill_during_consume(setup, kill_at_publish)
    entry = setup.registry / registry_key(AuthorizationDomain.REAL, "auth-burn-test-0001")
    assert entry.is_dir()
    assert not (entry / CLAIM_NAME).exists()
    assert (setup.run_root / CONSUMED_MARKER).exists() == (kill_at_publish == 2)
    with acquire_lease(setup.run_root) as lease:  # the dead holder's lease is retaken
        # The partial pair never verifies, and the id cannot be consumed again.
        assert _code_of(lambda: setup.verify(lease)) is Code.AUTHORIZATION_CLAIM_INVALID
        expected = Code.AUTHORIZATION_CONSUMED if kill_at_publish == 1 \
            else Code.RUN_ROOT_IN_USE
        assert _code_of(lambda: setup.consume(lease)) is expected
    setup.recreate_root()
    with acquire_lease(setup.run_root) as lease:
        assert _code_of(lambda: setup.consume(lease)) is Code.AUTHORIZATION_CONSUMED


def test_recreated_root_with_copied_back_marker_does_not_verify(setup: Setup) -> None:
    with acquire_lease(setup.run_root) as lease:
        setup.consume(lease)
    marker = (setup.run_root / CONSUMED_MARKER).read_bytes()
    setup.recreate_root()
    with acquire_lease(setup.run_root) as lease:
        path = setup.run_root / CONSUMED_MARKER
        path.write_bytes(marker)
        os.chmod(path, 0o600)
        # Same process, same epoch: only the run root and lease inodes tell them apart.
        assert _code_of(lambda: setup.verify(lease)) is Code.AUTHORIZATION_CLAIM_INVALID


def test_verification_binds_every_argument_and_the_live_lease(setup: Setup) -> None:
    with acquire_lease(setup.run_root) as lease:
        setup.consume(lease)
        other_holder = msgspec.structs.replace(lease.holder, epoch=lease.holder.epoch + 1)
        for change in ({"run_id": "run-2"}, {"artifact_sha256": hex_digest("other")},
                       {"controller": other_holder},
                       {"authorization_id": "auth-burn-test-0002"}):
            assert _code_of(lambda c=change: setup.verify(lease, **c)) \
                is Code.AUTHORIZATION_CLAIM_INVALID, change
        holder = lease.holder
    # Released lease: the pair no longer authorizes anything.
    assert _code_of(lambda: setup.verify(lease, controller=holder)) \
        is Code.AUTHORIZATION_CLAIM_INVALID


def test_marker_and_claim_must_agree(setup: Setup) -> None:
    with acquire_lease(setup.run_root) as lease:
        setup.consume(lease)
        path = setup.run_root / CONSUMED_MARKER
        document = json.loads(path.read_bytes())
        document["lease_ino"] += 1
        os.unlink(path)
        path.write_text(json.dumps(document))
        os.chmod(path, 0o600)
        assert _code_of(lambda: setup.verify(lease)) is Code.AUTHORIZATION_CLAIM_INVALID


def test_refusals_before_the_burn_do_not_burn(setup: Setup, tmp_path: Path) -> None:
    entry = setup.registry / registry_key(AuthorizationDomain.REAL, "auth-burn-test-0001")
    (setup.run_root / "stray").write_bytes(b"")
    with acquire_lease(setup.run_root) as lease:
        assert _code_of(lambda: setup.consume(lease)) is Code.RUN_ROOT_IN_USE
        os.unlink(setup.run_root / "stray")
        assert _code_of(lambda: setup.consume(lease, account_id="acct-other")) \
            is Code.AUTHORIZATION_BINDING_MISMATCH
        inside = setup.run_root / "registry"
        assert _code_of(lambda: setup.consume(lease, registry_root=inside)) \
            is Code.PATH_REFUSED
    assert _code_of(lambda: setup.consume(lease)) is Code.LEASE_NOT_HELD
    other = tmp_path / "runs" / "r2"
    make_private_dir(other)
    with acquire_lease(other) as lease:  # bound to r1, consumed in r2
        assert _code_of(lambda: setup.consume(lease)) is Code.AUTHORIZATION_BINDING_MISMATCH
    assert not entry.exists()
    with acquire_lease(setup.run_root) as lease:
        setup.consume(lease)


def test_faux_registry_lives_under_the_run_roots_parent(tmp_path: Path) -> None:
    run_root = tmp_path / "runs" / "faux1"
    make_private_dir(run_root, parents=True)
    bindings = _bindings(run_root)
    mint = mint_faux_authorization(bindings)
    args: dict[str, Any] = {"domain": AuthorizationDomain.FAUX,
                            "trusted_keys": [mint.trusted_key], "expected": bindings,
                            "account_id": "efold-faux-account", "run_id": "faux-run"}
    with acquire_lease(run_root) as lease:
        record = consume_authorization(mint.artifact, lease=lease, **args)
        assert record.domain is AuthorizationDomain.FAUX
    entry = tmp_path / "runs" / FAUX_REGISTRY_NAME / registry_key(
        AuthorizationDomain.FAUX, mint.authorization_id)
    assert (entry / CLAIM_NAME).exists()
    shutil.rmtree(run_root)
    make_private_dir(run_root)
    with acquire_lease(run_root) as lease:
        assert _code_of(lambda: consume_authorization(mint.artifact, lease=lease, **args)) \
            is Code.AUTHORIZATION_CONSUMED


def test_real_registry_comes_from_the_password_database_not_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    expected = os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".local", "state", "efold",
                            "consumed-v1")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert real_registry_root() == expected


def test_another_process_verifies_the_pair(setup: Setup) -> None:
    code = textwrap.dedent("""
        import sys, msgspec
        from efold.registry.burn import verify_consumption
        from efold.registry.lease import LeaseHolder
        from efold.registry.authorization import AuthorizationDomain
        holder = msgspec.json.decode(sys.argv[4], type=LeaseHolder)
        record = verify_consumption(sys.argv[1], domain=AuthorizationDomain.REAL,
            authorization_id="auth-burn-test-0001", artifact_sha256=sys.argv[3],
            run_id="run-1", controller=holder, registry_root=sys.argv[2])
        print(record.run_id)
    """)
    with acquire_lease(setup.run_root) as lease:
        setup.consume(lease)
        out = subprocess.run(
            [sys.executable, "-c", code, str(setup.run_root), str(setup.registry),
             hashlib.sha256(setup.artifact).hexdigest(),
             msgspec.json.encode(lease.holder).decode()],
            capture_output=True, text=True, check=True).stdout.strip()
    assert out == "run-1"


def test_credential_file_untouched_across_validate_consume_verify(
    setup: Setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    credential = tmp_path / "fictional-credential.json"
    credential.write_text('{"token": "fictional-expired-token", "account": "acct-fictional"}')
    os.chmod(credential, 0o600)
    os.utime(credential, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    monkeypatch.setenv(CREDENTIAL_ENV, str(credential))

    def witness() -> tuple[bytes, int, int, int]:
        st = os.stat(credential)
        return credential.read_bytes(), st.st_ino, st.st_mtime_ns, st.st_ctime_ns

    before = witness()
    verify_real_authorization(setup.artifact, trusted_keys=[KEY.public_key()],
                              expected=_bindings(setup.run_root), account_id=ACCOUNT)
    with acquire_lease(setup.run_root) as lease:
        setup.consume(lease)
        setup.verify(lease)
    assert witness() == before
