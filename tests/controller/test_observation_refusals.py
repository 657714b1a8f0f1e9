"""Observation commands refuse in the documented form, and leave a run as they found it.

``recover`` on something that is not a run says so (``refused: CODE (what, where)``, and
under ``--json`` one JSON object on stdout too); ``recover`` creates no SQLite side file
in a run; ``verify-authorization`` names the file that failed. All through the real CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from efold_test_kit import SAMPLE_DIGESTS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pilot"))

from efold_pilot_kit import small_registration

from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir

CLI = [sys.executable, "-m", "efold.controller"]


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={**os.environ, **(env or {})})


def _private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


# -- recover: refusals -----------------------------------------------------------------


def _refusal(out: subprocess.CompletedProcess[str], *, as_json: bool) -> tuple[str, str]:
    """The (code, detail) of a refusal, checked to be in the documented form."""
    assert out.returncode == 2, (out.stdout, out.stderr)
    (line,) = out.stderr.splitlines()
    assert line.startswith("refused: ") and line.endswith(")"), line
    code, _, detail = line.removeprefix("refused: ").partition(" (")
    detail = detail.removesuffix(")")
    if as_json:
        (doc,) = [json.loads(x) for x in out.stdout.splitlines()]
        assert doc == {"refused": code, "detail": detail}
    else:
        assert out.stdout == ""
    return code, detail


@pytest.mark.parametrize("as_json", [False, True])
def test_recover_refuses_what_is_not_a_run(tmp_path: Path, as_json: bool) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "garbage").mkdir()
    _private(tmp_path / "garbage" / "journal.sqlite", b"not sqlite at all\n" * 64)
    flag = ["--json"] if as_json else []
    cases = {
        "empty": "empty is not a run directory: no journal.sqlite",
        "missing": "missing is not a run directory: no such directory",
        "a-file": "a-file is not a run directory: not a directory",
        "garbage": "garbage/journal.sqlite: file is not a database",
    }
    for name, detail in cases.items():
        out = _cli("recover", name, *flag, cwd=tmp_path)
        code = "journal_invalid" if name == "garbage" else "run_not_found"
        assert _refusal(out, as_json=as_json) == (code, detail)
    # Nothing was created while refusing.
    assert sorted(os.listdir(tmp_path / "empty")) == []
    assert sorted(os.listdir(tmp_path / "garbage")) == ["journal.sqlite"]


def test_recover_refuses_a_symlinked_run_path(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    _private(tmp_path / "real" / "journal.sqlite", b"")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    out = _cli("recover", "link", "--json", cwd=tmp_path)
    code, detail = _refusal(out, as_json=True)
    assert code == "path_refused" and detail.startswith("link: ")


# -- recover: observation leaves no file behind ------------------------------------------


def _listing(run: Path) -> dict[str, int]:
    return {entry.name: entry.stat(follow_symlinks=False).st_mtime_ns
            for entry in os.scandir(run)}


def test_recover_creates_no_sqlite_side_files_in_a_closed_run(tmp_path: Path) -> None:
    reg, raw = small_registration()
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run)
    assert out.stop_code is None
    before = _listing(run)
    assert "journal.sqlite" in before
    assert not {"journal.sqlite-wal", "journal.sqlite-shm"} & before.keys()
    for extra in ([], ["--json"]):
        report = _cli("recover", str(run), *extra, cwd=tmp_path)
        assert report.returncode == 0, report.stderr  # a finished faux pilot: reconciled
        assert _listing(run) == before
    assert json.loads(report.stdout)["reconciled"] is True


def test_recover_reads_the_wal_a_dead_controller_left(tmp_path: Path) -> None:
    """With a ``-wal`` present the reader must read it (``immutable`` would not): a
    controller SIGKILLed after committing leaves its rows only in the WAL."""
    reg, raw = small_registration()
    run = claim_run_dir(tmp_path / "run")
    run_pilot(reg, raw, run)
    code = (
        "import os, sys\n"
        "from efold.registry.journal import JournalWriter\n"
        "from efold.registry.lease import acquire_lease\n"
        "lease = acquire_lease(sys.argv[1])\n"
        "writer = JournalWriter(sys.argv[1], lease)\n"
        "writer._conn.execute('PRAGMA wal_autocheckpoint=0')\n"
        "writer.record_stop(epoch=1, code='integrity_stop_fictional', slot=None, sticky=True)\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(run)], check=True, timeout=60)
    assert (run / "journal.sqlite-wal").stat().st_size > 0
    report = _cli("recover", str(run), "--json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["sticky_stop"] == "integrity_stop_fictional"


# -- verify-authorization: every refusal names its file -----------------------------------


@pytest.fixture
def auth_dir(tmp_path: Path) -> Path:
    for name in ("approver", "stranger"):
        assert _cli("keygen", "--out", name, cwd=tmp_path).returncode == 0
    for out, extra in (("auth.json", []), ("faux.json", ["--faux"])):
        args = ["authorize", "--key", "approver.key", "--out", out]
        for name, value in SAMPLE_DIGESTS.items():
            args += [f"--{name.replace('_', '-')}", value]
        args += ["--reader", "faux-reader", "--effort", "low", "--cap-units", "78400000",
                 "--deadline", "probe_s=600", "--deadline", "run_s=3600",
                 "--output-root", str(tmp_path / "runs" / "r1"),
                 "--credential-env", "EFOLD_FICTIONAL_KEY",
                 "--approver", "approver@example.invalid", "--approval-reference", "appr-9",
                 *extra]
        done = _cli(*args, cwd=tmp_path, env={"EFOLD_ACCOUNT_ID": "acct-fictional"})
        assert done.returncode == 0, done.stderr
    signed = (tmp_path / "auth.json").read_bytes()
    tampered = signed.replace(b'"cap_units":78400000', b'"cap_units":78400001')
    assert tampered != signed
    _private(tmp_path / "tampered.json", tampered)
    _private(tmp_path / "notjson.json", b"hello\n")
    _private(tmp_path / "bad.pub", b"not a key\n")
    return tmp_path


@pytest.mark.parametrize(("args", "expected"), [
    (["missing.json", "--trust", "approver.pub"],
     "refused: private_file_missing (missing.json: no such file)"),
    (["notjson.json", "--trust", "approver.pub"],
     "refused: authorization_invalid (notjson.json: not a signed authorization (malformed))"),
    (["faux.json", "--trust", "approver.pub"],
     "refused: authorization_domain_mismatch (faux.json: a faux authorization, checked as "
     "a real one (pass --faux for a faux one))"),
    (["auth.json", "--trust", "approver.pub", "--faux"],
     "refused: authorization_domain_mismatch (auth.json: a real authorization, checked as "
     "a faux one (--faux))"),
    (["auth.json", "--trust", "stranger.pub"],
     "refused: authorization_untrusted (auth.json: signed by a key that is none of "
     "--trust stranger.pub)"),
    (["tampered.json", "--trust", "approver.pub"],
     "refused: authorization_invalid (tampered.json: signature does not verify against "
     "the trusted key with its key id)"),
    (["auth.json", "--trust", "approver.pub", "--trust", "bad.pub"],
     "refused: approver_key_invalid (trust key bad.pub: not a PEM public key)"),
    (["auth.json", "--trust", "nokey.pub"],
     "refused: private_file_missing (trust key nokey.pub: no such file)"),
])
def test_verify_authorization_names_the_file_that_failed(
        auth_dir: Path, args: list[str], expected: str) -> None:
    out = _cli("verify-authorization", *args, cwd=auth_dir)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [expected]
    # Content-free still: nothing of the authorization's content is echoed.
    for secret in ("approver@example.invalid", "faux-reader", "acct-fictional", "r1"):
        assert secret not in out.stderr


def test_verify_authorization_still_accepts_a_good_file(auth_dir: Path) -> None:
    out = _cli("verify-authorization", "auth.json", "--trust", "approver.pub", cwd=auth_dir)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("valid: efold-real-authorization-v1\nid: auth-")
