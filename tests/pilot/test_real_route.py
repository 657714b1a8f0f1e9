"""The real route through the operator's commands, against a scripted loopback provider.

authorize (``--registration``), smoke, pilot --real run as separate processes, as an
operator runs them; the provider is a scripted Chat Completions server on loopback (the
real HTTP seam: ``tests/kit/loopback_chat.py``). A canary credential is planted in the
controller's environment and looked for in every child process while it sends, and in
every file the commands leave.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback_chat import CATALOG, Server, serve_chat
from ordinary_user import REAL_RUN_FLAGS

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.registration import compute_registration, load_registration
from efold.controller.errors import ControllerError
from efold.controller.pilot.smoke import route_digest
from efold.controller.rundirs.authorize_run import check_real_route
from efold.errors import Code
from efold.registry.journal import JournalReader

CANARY_ENV = "EFOLD_TEST_CANARY_KEY"
PROFILE = """provider = "local"
model = "tiny"
api = "chat"
base_url = "{url}"
stream = {stream}
catalog = "catalog.toml"
"""


def campaign_text(url: str, *, credential: str | None = None, roles: str = '["compaction"]',
                  probes: int = 1, stream: bool = False, summariser: bool = True) -> str:
    """A one-trace campaign read by the scripted provider (and summarised by it)."""
    profile = PROFILE.format(url=url, stream=str(stream).lower())
    if credential is not None:
        profile += f'credential_env = "{credential}"\n'
    text = (f'name = "loopback"\nsuite = "original"\ntraces = ["orig-archive-scan"]\n'
            f'probe_limit = {probes}\nroles = {roles}\ncap_usd = "5.00"\n'
            f"[reader]\n{profile}")
    return text + (f"[summariser]\n{profile.replace('stream = true', 'stream = false')}"
                   if summariser else "")


EFOLD = str(Path(sys.executable).with_name("efold-controller"))


@pytest.fixture
def server() -> Iterator[Server]:
    with serve_chat() as state:
        yield state


class Operator:
    """One operator's directory: a key pair, a registered campaign, and the commands."""

    def __init__(self, tmp: Path, server: Server, *, credential: str | None,
                 **campaign: Any) -> None:
        self.tmp = tmp
        self.env = {k: v for k, v in os.environ.items() if k != "CI"}
        self.env["EFOLD_ACCOUNT_ID"] = "acct-fictional"
        if credential is not None:
            self.env[CANARY_ENV] = credential
        (tmp / "catalog.toml").write_bytes(CATALOG)
        (tmp / "campaign.toml").write_text(campaign_text(
            server.base_url, credential=CANARY_ENV if credential is not None else None,
            **campaign))
        assert self.run("keygen", "--out", "approver").returncode == 0
        done = self.run("register", "campaign.toml", "--output", "reg")
        assert done.returncode == 0, done.stderr
        self.sha = done.stdout.split("sha256: ")[1].strip()
        self.runs = tmp / "runs"
        self.runs.mkdir(mode=0o700)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([EFOLD, *args], cwd=self.tmp, env=self.env, capture_output=True,
                              text=True, timeout=600)

    def authorize(self, run: str, *extra: str, out: str | None = None) -> str:
        out = out or f"{run}-auth.json"
        done = self.run("authorize", "--registration", "reg/registration.json", "--sha256",
                        self.sha, *extra, "--key", "approver.key", "--out", out,
                        "--output-root", str(self.runs / run), "--approver", "ops",
                        "--approval-reference", "appr-1")
        assert done.returncode == 0, done.stderr
        return out

    def real(self, command: str, run: str, auth: str, *extra: str,
             ) -> subprocess.CompletedProcess[str]:
        flag = ["--real"] if command == "pilot" else []
        return self.run(command, *flag, "--registration", "reg/registration.json",
                        "--sha256", self.sha, "--run-dir", str(self.runs / run),
                        "--authorization", auth, "--trust", "approver.pub", "--no-progress",
                        *REAL_RUN_FLAGS, *extra)


def _children_holding(needle: bytes) -> list[str]:
    """Every efold child process alive now whose environment or argv holds ``needle``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"efold.worker" not in cmdline:
                continue
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue  # gone already
        if needle in cmdline or needle in environ:
            found.append(pid)
    return found


def _files_holding(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_a_credential_reaches_only_the_children_that_send_and_is_written_nowhere(
        tmp_path: Path, server: Server) -> None:
    canary = "efold-canary-" + secrets.token_hex(12)
    seen: list[list[str]] = []
    server.on_request = lambda: seen.append(_children_holding(canary.encode()))
    op = Operator(tmp_path, server, credential=canary)

    smoke = op.real("smoke", "smoke", op.authorize("smoke", "--smoke"))
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert "smoke: passed (1 slots, one per role)" in smoke.stdout
    pilot = op.real("pilot", "pilot", op.authorize("pilot"), "--keep-answers")
    assert pilot.returncode == 0, pilot.stdout + pilot.stderr

    # Smoke and pilot: each a summary (the compaction prep child) and an answer (the
    # probe child), every one sent with exactly the credential.
    assert len(server.requests) == 4
    assert {r["authorization"] for r in server.requests} == {f"Bearer {canary}"}
    assert seen == [[]] * 4  # no child's environment or argv held it while it sent
    assert _files_holding(tmp_path, canary.encode()) == []
    results = json.loads((op.runs / "pilot" / "results.json").read_text())
    assert results["reader"] == "local/tiny" and results["execution"]["completed"] == 1


def test_a_route_without_a_credential_sends_none(tmp_path: Path, server: Server) -> None:
    op = Operator(tmp_path, server, credential=None)
    smoke = op.real("smoke", "smoke", op.authorize("smoke", "--smoke"))
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert [r["authorization"] for r in server.requests] == [None, None]


def test_pilot_real_needs_a_passing_smoke_and_consumes_nothing_until_then(
        tmp_path: Path, server: Server) -> None:
    op = Operator(tmp_path, server, credential=None)
    pilot_auth = op.authorize("pilot")
    refused = op.real("pilot", "pilot", pilot_auth)
    assert refused.returncode == 2 and "no smoke record" in refused.stderr
    assert "refused: lookup_pilot_real_route_unavailable" in refused.stderr
    assert not (op.runs / "pilot").exists() and server.requests == []

    server.status = 500  # the smoke fails: nothing opens
    failed = op.real("smoke", "smoke", op.authorize("smoke", "--smoke"))
    assert failed.returncode == 3 and "smoke: did not pass" in failed.stdout
    assert "lookup_http_status" in failed.stdout
    still = op.real("pilot", "pilot", pilot_auth)
    assert still.returncode == 2 and "did not pass" in still.stderr

    server.status = 200  # a passing smoke of the same registration opens the route
    assert op.real("smoke", "smoke2", op.authorize("smoke2", "--smoke")).returncode == 0
    ran = op.real("pilot", "pilot", pilot_auth)
    assert ran.returncode == 0, ran.stdout + ran.stderr

    # Single use: the same run directory made anew cannot consume it again.
    (op.runs / "pilot").rename(op.runs / "pilot-1")
    again = op.real("pilot", "pilot", pilot_auth)
    assert again.returncode == 2 and "authorization_consumed" in again.stderr


def _real_run(op: Operator, command: str, run: str, auth: str, trust: str = "approver.pub",
              **env: str | None) -> subprocess.CompletedProcess[str]:
    """``op.real`` with another key or environment (a value None: the variable unset)."""
    saved = dict(op.env)
    for name, value in env.items():
        if value is None:
            op.env.pop(name, None)
        else:
            op.env[name] = value
    try:
        flag = ["--real"] if command == "pilot" else []
        return op.run(command, *flag, "--registration", "reg/registration.json",
                      "--sha256", op.sha, "--run-dir", str(op.runs / run),
                      "--authorization", auth, "--trust", trust, "--no-progress",
                      *REAL_RUN_FLAGS)
    finally:
        op.env = saved


def test_a_refusal_before_consumption_leaves_no_run_directory_so_the_retry_runs(
        tmp_path: Path, server: Server) -> None:
    op = Operator(tmp_path, server, credential=None)
    assert op.run("keygen", "--out", "other").returncode == 0  # a key nobody trusts
    smoke_auth = op.authorize("smoke", "--smoke")
    refused = _real_run(op, "smoke", "smoke", smoke_auth, trust="other.pub")
    assert refused.returncode == 2 and "refused: authorization_untrusted" in refused.stderr
    assert os.listdir(op.runs) == []
    assert _real_run(op, "smoke", "smoke", smoke_auth).returncode == 0
    before, sent = sorted(os.listdir(op.runs)), len(server.requests)

    auth = op.authorize("pilot")
    # Each refusal that comes before the consumption, in the order they are checked.
    for why, code, refusal in [
        ("no authorization file", "lookup_pilot_real_route_unavailable",
         _real_run(op, "pilot", "pilot", "missing-auth.json")),
        ("no account id", "lookup_pilot_real_route_unavailable",
         _real_run(op, "pilot", "pilot", auth, EFOLD_ACCOUNT_ID=None)),
        ("a key not trusted", "authorization_untrusted",
         _real_run(op, "pilot", "pilot", auth, trust="other.pub")),
        ("bound to another run directory", "authorization_binding_mismatch",
         _real_run(op, "pilot", "pilot", op.authorize("elsewhere"))),
        ("the smoke's authorization", "authorization_binding_mismatch",
         _real_run(op, "pilot", "pilot", op.authorize("pilot", "--smoke", out="s.json"))),
        ("another account", "authorization_binding_mismatch",
         _real_run(op, "pilot", "pilot", auth, EFOLD_ACCOUNT_ID="acct-other")),
    ]:
        assert refusal.returncode == 2, why
        assert refusal.stderr.startswith(f"refused: {code} "), (why, refusal.stderr)
        assert sorted(os.listdir(op.runs)) == before, why  # no run directory left
    assert len(server.requests) == sent  # nothing was sent for a refused run

    ran = _real_run(op, "pilot", "pilot", auth)  # the corrected retry: not run_root_exists
    assert ran.returncode == 0, ran.stdout + ran.stderr

    # An authorization already consumed refuses before a new directory exists either.
    (op.runs / "pilot").rename(op.runs / "pilot-1")
    again = _real_run(op, "pilot", "pilot", auth)
    assert again.returncode == 2 and again.stderr.startswith("refused: authorization_consumed")
    assert not (op.runs / "pilot").exists()


def _smoke_record(op: Operator, **fields: Any) -> dict[str, Any]:
    """A record as the smoke writes one (main's version 1 shape), for this registration."""
    loaded = load_registration(str(op.tmp / "reg" / "registration.json"), op.sha)
    return {"version": 1, "registration_sha256": op.sha,
            "route_digest": route_digest(loaded.registration),
            "run_dir": str(op.runs / "smoke"), "slots": 1, "completed": 1, "passed": True,
            "finished_at": int(time.time()), **fields}


def _plant(directory: Path, name: str, data: bytes, mode: int = 0o600) -> Path:
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return path


def test_a_hand_written_or_edited_smoke_record_is_refused_and_opens_nothing(
        tmp_path: Path, server: Server) -> None:
    op = Operator(tmp_path, server, credential=None)
    auth = op.authorize("pilot")
    records = op.runs / ".efold-smoke-v1"
    name = f"{op.sha}-smoke.json"
    for why, record in [
        ("the old shape, no MAC", _smoke_record(op)),
        ("a MAC that does not verify", _smoke_record(op, version=2, mac="0" * 64)),
    ]:
        planted = _plant(records, name, json.dumps(record).encode())
        refused = op.real("pilot", "pilot", auth)
        assert refused.returncode == 2, (why, refused.stdout + refused.stderr)
        assert refused.stderr.startswith(f"refused: smoke_record_invalid ({planted}: "), why
        assert not (op.runs / "pilot").exists() and server.requests == []
        planted.unlink()

    # A real smoke that did not pass, its record edited to say it did.
    server.status = 500
    failed = op.real("smoke", "smoke", op.authorize("smoke", "--smoke"))
    assert failed.returncode == 3, failed.stdout + failed.stderr
    (written,) = records.iterdir()
    assert json.loads(written.read_bytes())["passed"] is False
    still = op.real("pilot", "pilot", auth)
    assert still.returncode == 2 and "did not pass" in still.stderr
    edited = json.loads(written.read_bytes()) | {"passed": True}
    _plant(records, written.name, json.dumps(edited).encode())
    forged = op.real("pilot", "pilot", auth)
    assert forged.stderr.startswith(f"refused: smoke_record_invalid ({written}: its MAC "
                                    "does not verify"), forged.stderr
    assert not (op.runs / "pilot").exists()
    written.unlink()

    # A passing smoke's own record opens the route; read as a private file only.
    server.status = 200
    assert op.real("smoke", "smoke2", op.authorize("smoke2", "--smoke")).returncode == 0
    (passing,) = records.iterdir()
    passing.chmod(0o640)  # group-readable: not a private record
    shared = op.real("pilot", "pilot", auth)
    assert shared.stderr.startswith("refused: smoke_record_invalid ("), shared.stderr
    assert "private_read_refused (group/other-accessible)" in shared.stderr
    passing.chmod(0o600)
    ran = op.real("pilot", "pilot", auth)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_smoke_and_pilot_authorizations_are_not_interchangeable(
        tmp_path: Path, server: Server) -> None:
    op = Operator(tmp_path, server, credential=None)
    smoke_auth = op.authorize("run", "--smoke")
    refused = op.real("pilot", "run", smoke_auth)  # no smoke record yet, then the binding
    assert refused.returncode == 2
    assert op.real("smoke", "s", op.authorize("s", "--smoke")).returncode == 0
    wrong = op.real("pilot", "run", smoke_auth)
    assert wrong.returncode == 2 and "authorization_binding_mismatch" in wrong.stderr


@pytest.mark.parametrize(("base_url", "credential", "allowed"), [
    ("http://127.0.0.1:9/v1", None, True),
    ("http://localhost:9/v1", None, True),
    ("http://127.0.0.1:9/v1", "OPENAI_API_KEY", False),
    ("https://api.example.invalid/v1", None, False),
])
def test_where_ci_is_set_only_loopback_without_a_credential_dispatches(
        base_url: str, credential: str | None, allowed: bool) -> None:
    text = campaign_text(base_url, credential=credential).replace(
        'catalog = "catalog.toml"\n', "").replace(
        'provider = "local"\nmodel = "tiny"', 'provider = "openai"\nmodel = "gpt-5-mini"')
    reg = compute_registration(parse_campaign(text), text.encode())
    check_real_route(reg, {})  # without CI every profile may dispatch
    if allowed:
        check_real_route(reg, {"CI": ""})
        return
    with pytest.raises(ControllerError) as err:
        check_real_route(reg, {"CI": ""})
    assert err.value.code is Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE


def test_a_stream_without_usage_is_missing_usage_and_two_losses_stop_the_smoke(
        tmp_path: Path, server: Server) -> None:
    """Some servers stream no usage (llama.cpp's Python server): each answer is lost
    with ``lookup_missing_usage`` (its hold kept), and two consecutive losses stop the
    run (``lookup_repeated_loss``), so the smoke cannot pass on such a route."""
    op = Operator(tmp_path, server, credential=None, roles='["native", "cold-rebuild"]',
                  stream=True, summariser=False)
    smoke = op.real("smoke", "smoke", op.authorize("smoke", "--smoke"))
    assert smoke.returncode == 3, smoke.stdout + smoke.stderr
    assert "stopped: lookup_repeated_loss" in smoke.stdout
    assert smoke.stdout.count("incomplete (lookup_missing_usage)") == 2
    with JournalReader(op.runs / "smoke") as journal:
        holds = journal.rows("holds")
    assert [(h["state"], h["code"]) for h in holds] == [("lost", "lookup_missing_usage")] * 2
    assert all(h["settled_units"] is None and h["hold_units"] > 0 for h in holds)


def test_a_wrong_credential_is_a_sticky_stop_of_the_run(tmp_path: Path, server: Server) -> None:
    server.required_key = "the-right-key"
    op = Operator(tmp_path, server, credential="the-right-key", roles='["native"]', probes=3,
                  summariser=False)
    assert op.real("smoke", "smoke", op.authorize("smoke", "--smoke")).returncode == 0
    op.env[CANARY_ENV] = "a-wrong-key"
    pilot = op.real("pilot", "pilot", op.authorize("pilot"))
    assert pilot.returncode == 3 and "stopped: lookup_http_status" in pilot.stdout
    receipts = [json.loads(p.read_text()) for p in (op.runs / "pilot" / "receipts").iterdir()]
    assert sorted(r.get("code") for r in receipts) == [
        "lookup_http_status", "lookup_stopped", "lookup_stopped"]
    assert len(server.requests) == 2  # the smoke's answer, then the one refused with 401


def test_a_server_gone_mid_run_gives_losses_then_the_stop(tmp_path: Path, server: Server) -> None:
    """The server dies after the smoke and one answer of the run: each later request is
    lost (sent, no answer: its hold is kept), and two consecutive losses stop the run."""
    op = Operator(tmp_path, server, credential=None, roles='["native"]', probes=4,
                  summariser=False)
    assert op.real("smoke", "smoke", op.authorize("smoke", "--smoke")).returncode == 0
    server.answer_only = 2  # the smoke's answer and the run's first
    pilot = op.real("pilot", "pilot", op.authorize("pilot"))
    assert pilot.returncode == 3 and "stopped: lookup_repeated_loss" in pilot.stdout
    receipts = [json.loads(p.read_text()) for p in (op.runs / "pilot" / "receipts").iterdir()]
    assert sorted((r["status"], r.get("code")) for r in receipts) == [
        ("completed", None), ("incomplete", "lookup_stream_lost"),
        ("incomplete", "lookup_stream_lost"), ("unadmitted", "lookup_stopped")]
    with JournalReader(op.runs / "pilot") as journal:
        holds = journal.rows("holds")
    assert [h["state"] for h in holds] == ["settled", "lost", "lost"]
    assert all(h["hold_units"] > 0 and h["settled_units"] is None for h in holds[1:])


def test_a_real_continuation_runs_only_on_its_own_authorization(
        tmp_path: Path, server: Server) -> None:
    op = Operator(tmp_path, server, credential=None, probes=3)
    assert op.real("smoke", "smoke", op.authorize("smoke", "--smoke")).returncode == 0
    # A first part, on an authorization of that part: the whole campaign's refuses.
    whole_part = op.real("pilot", "part", op.authorize("part", out="whole.json"),
                         "--slots", "0:1")
    assert whole_part.returncode == 2, whole_part.stderr
    assert "refused: authorization_binding_mismatch" in whole_part.stderr
    first = op.real("pilot", "part", op.authorize("part", "--slots", "0:1"), "--slots", "0:1")
    assert first.returncode == 0, first.stdout + first.stderr

    part, rest = str(op.runs / "part"), str(op.runs / "rest")

    def continuation(auth: str) -> subprocess.CompletedProcess[str]:
        return op.run("pilot", "--real", "--continue", part, "--run-dir", rest,
                      "--authorization", auth, "--trust", "approver.pub", "--no-progress",
                      *REAL_RUN_FLAGS)

    # The whole campaign's authorization for the continuation's very directory: the
    # schedule and cap it binds are not the continuation's.
    sent = len(server.requests)
    wrong = continuation(op.authorize("rest", out="whole-rest.json"))
    assert wrong.returncode == 2 and "authorization_binding_mismatch" in wrong.stderr
    assert not Path(rest).exists() and len(server.requests) == sent
    made = op.run("authorize", "--continue", part, "--key", "approver.key",
                  "--out", "rest-auth.json", "--output-root", rest, "--approver", "ops",
                  "--approval-reference", "appr-2")
    assert made.returncode == 0 and f"continuation of {part}" in made.stdout, made.stderr
    ran = continuation("rest-auth.json")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    plan = json.loads((op.runs / "rest" / "plan.json").read_text())
    assert len(plan["slots"]) == 2 and plan["link"]["previous"] == part
    done = op.run("aggregate", part, "--json")
    status = json.loads(done.stdout)["status"]
    assert status["verdict"] == "complete"
    assert [link["verdict"] for link in status["chain"]["links"]] == ["complete", "complete"]
    # The chain is whole: nothing is left for another continuation.
    again = op.run("pilot", "--real", "--continue", rest, "--run-dir", str(op.runs / "more"),
                   "--authorization", "rest-auth.json", "--trust", "approver.pub",
                   *REAL_RUN_FLAGS)
    assert again.returncode == 2 and "refused: nothing_to_continue" in again.stderr


@pytest.mark.parametrize("variable", ["PYTHONINSPECT", "EFOLD_ISOLATION_SIMULATE"])
def test_a_paid_run_refuses_while_a_debug_variable_is_set(
        tmp_path: Path, server: Server, variable: str) -> None:
    op = Operator(tmp_path, server, credential=None)
    auth = op.authorize("smoke", "--smoke")
    smoke = _real_run(op, "smoke", "smoke", auth, **{variable: ""})  # even empty
    assert smoke.returncode == 2, smoke.stdout + smoke.stderr
    assert smoke.stderr.startswith(f"refused: debug_environment ({variable} is set")
    assert os.listdir(op.runs) == [] and server.requests == []
    assert _real_run(op, "smoke", "smoke", auth).returncode == 0  # nothing was consumed
    pilot = _real_run(op, "pilot", "pilot", op.authorize("pilot"), **{variable: ""})
    assert pilot.returncode == 2 and "refused: debug_environment" in pilot.stderr
    assert not (op.runs / "pilot").exists()


def test_a_paid_run_refuses_under_an_interpreter_debug_option(
        tmp_path: Path, server: Server) -> None:
    op = Operator(tmp_path, server, credential=None)
    auth = op.authorize("smoke", "--smoke")
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-m", "efold.controller", "smoke", "--registration",
         "reg/registration.json", "--sha256", op.sha, "--run-dir", str(op.runs / "smoke"),
         "--authorization", auth, "--trust", "approver.pub", *REAL_RUN_FLAGS],
        cwd=op.tmp, env=op.env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "refused: debug_environment (python was started with -X dev" in done.stderr
    assert os.listdir(op.runs) == [] and server.requests == []


def test_a_breakpoint_hook_set_by_ray_does_not_stop_a_paid_run(
        tmp_path: Path, server: Server) -> None:
    """Ray sets PYTHONBREAKPOINT in every process of a cluster; efold calls no
    breakpoint(), so it is no debug variable here."""
    op = Operator(tmp_path, server, credential=None)
    smoke = _real_run(op, "smoke", "smoke", op.authorize("smoke", "--smoke"),
                      PYTHONBREAKPOINT="ray.util.rpdb.set_trace")
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
