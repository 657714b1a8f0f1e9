"""The likeliest operator mistakes, each run as the operator types it: a clear sentence
and a code that names the real problem, never a traceback. Usage errors (a wrong
combination of options) read as click's ``Usage:`` / ``Error:``; refusals as
``refused: CODE (detail)``. Both exit 2."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from efold_pilot_kit import small_registration

from efold.controller.campaigns.registration import write_registration
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir


def efold(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "efold.controller", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def refused(done: subprocess.CompletedProcess[str], code: str, *words: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"refused: {code} ("), done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def usage_error(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "refused:" not in done.stderr
    assert "Usage: " in done.stderr and "Error: " in done.stderr, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


@pytest.mark.parametrize("campaign", ["defualt", "nope.toml", "campaigns/missing.toml"])
def test_a_campaign_that_is_not_there(tmp_path: Path, campaign: str) -> None:
    done = efold("register", campaign, "--output", "r", cwd=tmp_path)
    refused(done, "campaign_not_found", repr(campaign), "default, original, hard")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("args", "words"), [
    (("--faux", "--real"), ("choose one of --faux",)),
    (("--local", "--real"), ("choose one of --faux",)),
    (("--faux", "--runs", "a", "--run-dir", "b"), ("--run-dir and --runs are exclusive",)),
    (("--faux", "--keep-answers"), ("--keep-answers applies to --real runs",)),
    (("--faux", "--registration", "README.md"), ("--registration and --sha256 go together",)),
])
def test_pilot_option_combinations_are_usage_errors(tmp_path: Path, args: tuple[str, ...],
                                                    words: tuple[str, ...]) -> None:
    (tmp_path / "README.md").write_text("x")
    usage_error(efold("pilot", *args, cwd=tmp_path), *words)


def test_a_sha256_that_is_not_one_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "registration.json").write_text("{}")
    done = efold("plan", "--registration", "registration.json", "--sha256", "abc", cwd=tmp_path)
    usage_error(done, "'abc' is not a sha256 (64 hex digits")


@pytest.mark.parametrize(("content", "words"), [
    (b"", ("registration.json is empty",)),
    (b"  \n", ("registration.json is empty",)),
    (b'{"campaign": 1}', ("registration.json is not a registration: ",)),
])
def test_a_registration_that_is_not_one(tmp_path: Path, content: bytes,
                                        words: tuple[str, ...]) -> None:
    (tmp_path / "registration.json").write_bytes(content)
    done = efold("plan", "--registration", "registration.json", "--sha256",
                 hashlib.sha256(content).hexdigest(), cwd=tmp_path)
    refused(done, "registration_invalid", *words)


def test_aggregate_into_an_existing_directory(tmp_path: Path) -> None:
    reg, raw = small_registration()
    run = tmp_path / "run"
    run_pilot(reg, raw, claim_run_dir(run))
    (tmp_path / "out").mkdir()
    refused(efold("aggregate", str(run), "--output", "out", cwd=tmp_path), "output_exists",
            "out exists: aggregate writes its reports into a new directory")
    assert list((tmp_path / "out").iterdir()) == []
    written = efold("aggregate", str(run), "--output", "fresh", cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "fresh" / "results.json").exists()


def test_a_registration_written_then_edited_names_the_file(tmp_path: Path) -> None:
    reg, _ = small_registration()
    path, sha = write_registration(reg, tmp_path / "reg")
    Path(path).write_bytes(Path(path).read_bytes() + b" ")
    refused(efold("plan", "--registration", str(path), "--sha256", sha, cwd=tmp_path),
            "registration_digest_mismatch", f"{path}: its sha256 is not {sha}")


@pytest.mark.parametrize(("cap", "status", "code", "exit_code"), [
    ("60.00", "complete", None, 0),
    ("3.92", "stopped", "not_admitted_cap", 3),  # one maximum reservation: then the cap
])
def test_pilot_json_ends_with_one_machine_readable_line(
        tmp_path: Path, cap: str, status: str, code: str | None, exit_code: int) -> None:
    reg, _ = small_registration(cap)
    path, sha = write_registration(reg, tmp_path / "reg")
    done = efold("pilot", "--faux", "--registration", str(path), "--sha256", sha,
                 "--run-dir", "run", "--no-progress", "--json", cwd=tmp_path)
    assert done.returncode == exit_code, done.stdout + done.stderr
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert last["status"] == status and last["code"] == code
    assert last["run"] == str(tmp_path / "run") and last["faux"] is True
    assert last["planned"] == 16 and last["results"] == str(tmp_path / "run" / "results.json")
    assert last["visited"] == last["planned"]
    assert Decimal(last["settled_usd"]) <= Decimal(last["cap_usd"]) == Decimal(cap)


def test_plan_reads_as_a_plan_with_faux_money_labelled_and_warnings(tmp_path: Path) -> None:
    # The default campaign's arms with a cap above one reservation (3.92) but below the
    # expected spend (about 30): worth a warning.
    (tmp_path / "c.toml").write_text('name = "tight"\nsuite = "original"\n'
                                     'roles = ["native", "cold-rebuild", "compaction", '
                                     '"compaction-2", "pack"]\ncap_usd = "20.00"\n')
    registered = efold("register", "c.toml", "--output", "reg", cwd=tmp_path)
    assert registered.returncode == 0, registered.stderr
    sha = registered.stdout.split("sha256: ")[1].strip()
    done = efold("plan", "--registration", "reg/registration.json", "--sha256", sha,
                 cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("campaign tight: 260 slots, 260 eligible, 0 skipped")
    assert "money (faux reader: faux units, no money is spent):" in out
    assert "{'" not in out and "estimate." not in out  # no dict dump, no raw keys
    names = ("expected", "cap", "one reservation", "cap - Rmax", "full upfront")
    money = [line for line in out.splitlines() if line[2:18].rstrip() in names]
    assert [line[2:18].rstrip() for line in money] == list(names)
    # the whole part of every amount ends in one column (decimal points aligned)
    ends = set()
    for line in money:
        amount = line[18:].split()[0]
        ends.add(line.index(amount, 18) + len(amount.split(".")[0]))
    assert len(ends) == 1, money
    assert "the cap is below the expected spend" in out
