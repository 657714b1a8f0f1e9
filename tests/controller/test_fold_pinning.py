"""Fold pinning: a registration binds the code of every role's fold, not only efold's.

A plugin here is really installed (tests/kit/plugin_kit.py: the venv's
site-packages), so a prep child started with ``python -I -m efold.worker`` imports it
exactly as an operator's would.
"""

from __future__ import annotations

import hashlib
import secrets
import sys
import textwrap
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import msgspec
import pytest
from plugin_kit import installed_plugin
from proc_harness import FAST, Run, make_assignment, welcome

from efold.controller.campaigns.campaign import (
    DEFAULT_INSTRUCTIONS,
    Role,
    bundled_campaign,
    parse_campaign,
)
from efold.controller.campaigns.registration import (
    Registration,
    RegistrationError,
    compute_registration,
    load_registration,
    registration_sha256,
    write_registration,
)
from efold.controller.errors import CampaignError
from efold.controller.pilot.preparation import prep_task
from efold.digests import canonical_json
from efold.errors import Code, EfoldError
from efold.folds.external import DEFAULT_TIMEOUT_S
from efold.folds.pinning import fold_identity, fold_sha256
from efold.protocol.tasks import PrepTask

PLUGIN_SOURCE = '''
from efold.folds.checkpoint import BoundaryEvidence, Checkpoint, ReaderMessage
from efold.folds.fold import build_receipt

VARIANT = 1


class Fold:
    """Keeps only the owner's last message."""

    name = {name!r}

    def build(self, prefix):
        owner = [e for e in prefix.events if e.role == "user"]
        messages = [ReaderMessage(role="user", content=owner[-1].content)]
        receipt = build_receipt(arm=self.name, prefix=prefix, messages=messages, tools=[],
                                boundary=BoundaryEvidence(kind="external", verified=True),
                                pressure=[])
        return Checkpoint(arm=self.name, trace_id=prefix.trace_id, messages=messages,
                          tools=[], receipt=receipt)
'''

SCRIPT = """
import json, sys
request = json.load(sys.stdin)
owner = [e for e in request["events"] if e["role"] == "user"]
json.dump({"protocol": "efold-fold-v1",
           "messages": [{"role": "user", "content": owner[-1]["content"]}],
           "tools": [], "boundary_crossed": True}, sys.stdout)
"""


def campaign_text(roles: list[str], tables: str = "", extra: str = "") -> str:
    return (f'name = "pins"\nsuite = "original"\nroles = {roles!r}\nprobe_limit = 1\n'
            f'cap_usd = "60"\n{extra}\n'.replace("'", '"') + textwrap.dedent(tables))


def register(text: str, out: Path) -> tuple[Registration, Path, str]:
    reg = compute_registration(parse_campaign(text), text.encode())
    path, sha = write_registration(reg, out)
    return reg, path, sha


def refused(path: Path, sha: str) -> RegistrationError:
    with pytest.raises(RegistrationError) as err:
        load_registration(path, sha)
    return err.value


def arm_name() -> str:
    return f"pin-{secrets.token_hex(3)}"


@pytest.fixture
def plugin() -> Iterator[tuple[str, Path]]:
    name = arm_name()
    with installed_plugin(name, PLUGIN_SOURCE.format(name=name)) as module:
        yield name, module


def script(tmp_path: Path, body: str = SCRIPT) -> Path:
    path = tmp_path / "fold.py"
    path.write_text(body)
    return path


def command_tables(argv: list[str], extra: str = "") -> str:
    return f"[role.cmd]\ncommand = {msgspec.json.encode(argv).decode()}\n{extra}"


# -- entry-point plugins ------------------------------------------------------------------


def test_an_edited_plugin_module_refuses_the_registration(tmp_path: Path,
                                                          plugin: tuple[str, Path]) -> None:
    name, module = plugin
    reg, path, sha = register(campaign_text(["native", name]), tmp_path / "reg")
    identity = fold_identity(reg.campaign.roles[1])
    assert identity["kind"] == "entry_point" and identity["name"] == name
    assert identity["version"] == "1.0" and str(identity["distribution"]).startswith("efold-test-plugin-")
    assert load_registration(path, sha).registration == reg
    module.write_text(module.read_text().replace("VARIANT = 1", "VARIANT = 2"))
    err = refused(path, sha)
    assert err.code is Code.REGISTRATION_DIGEST_MISMATCH and "folds" in err.detail


def test_a_bumped_plugin_version_refuses_the_registration(tmp_path: Path) -> None:
    name = arm_name()
    dist = f"efold-test-plugin-{secrets.token_hex(4)}"
    source = PLUGIN_SOURCE.format(name=name)
    with installed_plugin(name, source, version="1.0", dist=dist):
        _, path, sha = register(campaign_text([name]), tmp_path / "reg")
        load_registration(path, sha)
    with installed_plugin(name, source, version="1.1", dist=dist):  # same module bytes
        err = refused(path, sha)
    assert err.code is Code.REGISTRATION_DIGEST_MISMATCH and "folds" in err.detail


def test_a_listed_file_gone_missing_cannot_be_pinned(plugin: tuple[str, Path]) -> None:
    name, module = plugin
    role = Role(name="p", arm=name, instructions=DEFAULT_INSTRUCTIONS)
    fold_sha256(role)
    module.unlink()
    with pytest.raises(EfoldError) as err:
        fold_sha256(role)
    assert err.value.code is Code.FOLD_PLUGIN_INVALID and "missing" in err.value.detail


def test_plugin_roles_validate_against_the_installed_plugins(plugin: tuple[str, Path]) -> None:
    name, _ = plugin
    campaign = parse_campaign(campaign_text(["p"], f'[role.p]\narm = "{name}"\n'))
    assert campaign.roles[0].arm == name and campaign.roles[0].command is None
    with pytest.raises(CampaignError) as missing:
        parse_campaign(campaign_text(["p"], '[role.p]\narm = "no-such-plugin"\n'))
    assert missing.value.code is Code.CAMPAIGN_INVALID and "no-such-plugin" in missing.value.detail
    # the same entry point name from a second distribution: both are rejected
    with installed_plugin(name, PLUGIN_SOURCE.format(name=name)):
        with pytest.raises(CampaignError) as rejected:
            parse_campaign(campaign_text(["p"], f'[role.p]\narm = "{name}"\n'))
    assert rejected.value.code is Code.CAMPAIGN_INVALID
    assert name in rejected.value.detail and "rejected" in rejected.value.detail


# -- external commands --------------------------------------------------------------------


def test_an_edited_command_script_refuses_the_registration(tmp_path: Path) -> None:
    fold = script(tmp_path)
    text = campaign_text(["native", "cmd"], command_tables([sys.executable, str(fold)]))
    reg, path, sha = register(text, tmp_path / "reg")
    identity = fold_identity(reg.campaign.roles[1])
    assert identity == {
        "kind": "command", "argv": [sys.executable, str(fold)],
        "executable_sha256": hashlib.sha256(Path(sys.executable).read_bytes()).hexdigest(),
        "argument_files": {str(fold): hashlib.sha256(fold.read_bytes()).hexdigest()},
    }
    load_registration(path, sha)
    fold.write_text(SCRIPT + "\n# edited\n")
    err = refused(path, sha)
    assert err.code is Code.REGISTRATION_DIGEST_MISMATCH and "folds" in err.detail


def test_an_edited_command_program_refuses_the_registration(tmp_path: Path) -> None:
    program = tmp_path / "fold-cli"
    program.write_text(f"#!{sys.executable}\n{SCRIPT}")
    program.chmod(0o700)
    _, path, sha = register(campaign_text(["cmd"], command_tables([str(program), "--fast"])),
                            tmp_path / "reg")
    load_registration(path, sha)
    program.write_text(f"#!{sys.executable}\n{SCRIPT}\n# edited\n")
    assert refused(path, sha).code is Code.REGISTRATION_DIGEST_MISMATCH


def test_a_changed_argv_is_another_registration(tmp_path: Path) -> None:
    fold = script(tmp_path)
    a, path, sha = register(campaign_text(["cmd"], command_tables([sys.executable, str(fold)])),
                            tmp_path / "a")
    b, _, _ = register(campaign_text(["cmd"], command_tables([sys.executable, str(fold), "-v"])),
                       tmp_path / "b")
    assert a.digests.folds != b.digests.folds
    assert registration_sha256(a) != registration_sha256(b)
    assert load_registration(path, sha).registration == a  # the first one still stands


def test_command_role_validation() -> None:
    ok = parse_campaign(campaign_text(["cmd"], command_tables(["python3", "-c", "pass"],
                                                               "timeout_seconds = 30\n")))
    assert ok.roles[0] == Role(name="cmd", arm="cmd", instructions=DEFAULT_INSTRUCTIONS,
                               command=["python3", "-c", "pass"], timeout_seconds=30.0)
    cases = [
        (["cmd"], '[role.cmd]\narm = "native"\ncommand = ["/bin/sh"]\n', "exclusive"),
        (["cmd"], command_tables(["bin/no-such-fold"]), "no-such-fold"),
        (["cmd"], command_tables(["no-such-fold-xyz"]), "PATH"),
        (["cmd"], command_tables([]), "non-empty"),
        (["cmd"], command_tables([sys.executable], "timeout_seconds = 121\n"), "prep_seconds"),
        (["cmd"], command_tables([sys.executable], "timeout_seconds = 0\n"), "between 0.001"),
        (["native"], '[role.native]\ncommand = ["/bin/sh"]\n', "built-in"),
        (["p"], '[role.p]\narm = "native"\ntimeout_seconds = 5\n', "command roles only"),
    ]
    for roles, tables, needle in cases:
        with pytest.raises(CampaignError) as err:
            parse_campaign(campaign_text(roles, tables))
        assert err.value.code is Code.CAMPAIGN_INVALID, tables
        assert needle in err.value.detail, (tables, err.value.detail)
    # the default timeout counts against the prep deadline too
    with pytest.raises(CampaignError) as err:
        parse_campaign(campaign_text(["cmd"], command_tables([sys.executable]),
                                     "[deadlines]\nprep_seconds = 30"))
    assert "default timeout" in err.value.detail


def test_a_command_role_may_not_take_a_plugin_name(plugin: tuple[str, Path]) -> None:
    name, _ = plugin
    with pytest.raises(CampaignError) as err:
        parse_campaign(campaign_text([name], f'[role.{name}]\ncommand = ["/bin/sh"]\n'))
    assert err.value.code is Code.CAMPAIGN_INVALID and "installed plugin" in err.value.detail


# -- compatibility ------------------------------------------------------------------------


def test_roles_and_tasks_without_commands_encode_as_before() -> None:
    campaign, _ = bundled_campaign("default")
    assert canonical_json(campaign.roles[0]) == (
        b'{"arm":"native","instructions":' + msgspec.json.encode(DEFAULT_INSTRUCTIONS)
        + b',"name":"native"}')
    task = PrepTask(arm="native", trace_file="t.jsonl", trace_sha256="a" * 64)
    assert canonical_json(task) == (
        b'{"arm":"native","task":"prep","trace_file":"t.jsonl","trace_sha256":"' + b"a" * 64 + b'"}')
    assert fold_identity(campaign.roles[0]) == {"kind": "builtin", "arm": "native"}


# -- the prep task and the prep child -----------------------------------------------------


def test_prep_task_carries_the_command_timeout_and_pin(tmp_path: Path) -> None:
    fold = script(tmp_path)
    text = campaign_text(["native", "cmd"], command_tables([sys.executable, str(fold)]))
    reg = compute_registration(parse_campaign(text), text.encode())
    native, cmd = reg.campaign.roles
    task = prep_task(cmd, trace_file="t.jsonl", trace_sha256="a" * 64, registration=reg)
    assert (task.arm, task.command, task.timeout_seconds) == (
        "cmd", [sys.executable, str(fold)], DEFAULT_TIMEOUT_S)
    assert task.fold_sha256 == fold_sha256(cmd) == fold_sha256(task)
    plain = prep_task(native, trace_file="t.jsonl", trace_sha256="a" * 64)
    assert (plain.command, plain.timeout_seconds, plain.fold_sha256) == (
        None, None, fold_sha256(native))
    fold.write_text(SCRIPT + "\n# edited after load\n")
    with pytest.raises(RegistrationError) as err:  # against the registration: refused
        prep_task(native, trace_file="t.jsonl", trace_sha256="a" * 64, registration=reg)
    assert err.value.code is Code.REGISTRATION_DIGEST_MISMATCH


def _prep_assignment(run: Run, task: PrepTask):  # type: ignore[no-untyped-def]
    """A real prep assignment for the ``fold`` body: the run directory holds the
    registration and plan files its digests name, and the build is this one."""
    from efold.digests import build_digest

    digests = {}
    for name in ("registration.json", "plan.json"):
        data = b'{"' + name.encode() + b'": true}\n'
        Path(run.run_dir, name).write_bytes(data)
        digests[name] = hashlib.sha256(data).hexdigest()
    return msgspec.structs.replace(
        make_assignment(run, kind="prep"), body="fold", task=task,
        registration_digest=digests["registration.json"], plan_digest=digests["plan.json"],
        build_digest=build_digest())


async def _launch_prep(run: Run, task: PrepTask) -> tuple[bool, Code | None]:
    from efold.controller.processes.launcher import supervise
    from efold.ipc import Prepared

    a = _prep_assignment(run, task)
    prepared = False
    try:
        async with supervise(run.journal, a, policy=FAST) as handle:
            await handle.accept_hello(welcome(), timeout=20)
            prepared = isinstance(await handle.channel.receive(timeout=20), Prepared)
            await handle.acknowledge_done()
    except EfoldError:
        pass
    return prepared, (await handle.close(policy=FAST)).code


@pytest.mark.anyio
async def test_a_prep_child_refuses_a_plugin_changed_after_load(
        tmp_path: Path, run: Run, original_items) -> None:  # type: ignore[no-untyped-def]
    from efold.corpus import dump_trace, trace_digest

    trace = original_items[0].trace
    trace_file = Path(run.run_dir, "trace.jsonl")
    trace_file.write_bytes(dump_trace(trace))
    with ExitStack() as stack:
        name = arm_name()
        module = stack.enter_context(installed_plugin(name, PLUGIN_SOURCE.format(name=name)))
        _, path, sha = register(campaign_text([name]), tmp_path / "reg")
        role = load_registration(path, sha).registration.campaign.roles[0]
        task = prep_task(role, trace_file=str(trace_file), trace_sha256=trace_digest(trace))
        # The pinned plugin builds in a real child (python -I imports it from site-packages).
        assert await _launch_prep(run, task) == (True, None)
        module.write_text(module.read_text().replace("VARIANT = 1", "VARIANT = 3"))
        prepared, code = await _launch_prep(run, task)
    assert not prepared and code is Code.WORKER_DIGEST_MISMATCH


@pytest.mark.anyio
async def test_a_prep_child_builds_a_command_fold_and_refuses_an_edited_script(
        tmp_path: Path, run: Run, original_items) -> None:  # type: ignore[no-untyped-def]
    from efold.corpus import dump_trace, trace_digest

    trace = original_items[0].trace
    trace_file = Path(run.run_dir, "trace.jsonl")
    trace_file.write_bytes(dump_trace(trace))
    fold = script(tmp_path)
    role = Role(name="cmd", arm="cmd", instructions=DEFAULT_INSTRUCTIONS,
                command=[sys.executable, str(fold)], timeout_seconds=20.0)
    task = prep_task(role, trace_file=str(trace_file), trace_sha256=trace_digest(trace))
    assert await _launch_prep(run, task) == (True, None)
    fold.write_text(SCRIPT + "\n# edited\n")
    prepared, code = await _launch_prep(run, task)
    assert not prepared and code is Code.WORKER_DIGEST_MISMATCH
