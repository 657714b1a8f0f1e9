"""The command table of ``efold-controller``: complete, true to each command, and lazy."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from efold.controller import cli, commands
from efold.controller.cli import COMMANDS, load_command, main


def _command_modules() -> dict[str, click.Command]:
    found = {}
    for info in pkgutil.iter_modules(commands.__path__):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        command = getattr(module, "command", None)
        if isinstance(command, click.Command):
            found[info.name] = command
    return found


def test_the_table_names_every_command_module_with_its_own_help_line() -> None:
    modules = _command_modules()
    assert sorted(module for module, _ in COMMANDS.values()) == sorted(modules)
    for name, (module, help_line) in COMMANDS.items():
        command = modules[module]
        assert command.name == name
        assert command.get_short_help_str(limit=1000) == help_line
        assert load_command(name) is command


def test_help_lists_every_command_without_importing_one() -> None:
    code = ("import sys\nfrom efold.controller.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('efold.controller.commands')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    *help_lines, imported = done.stdout.strip().splitlines()
    assert imported == "[]"
    listed = "\n".join(help_lines)
    assert all(f"  {name}  " in listed for name in COMMANDS)


def test_an_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["nope"])
    assert result.exit_code == 2 and "No such command 'nope'" in result.output


def test_every_command_states_its_exit_statuses() -> None:
    top = CliRunner().invoke(main, ["--help"])
    assert "Exit status" in top.output and "usage error" in top.output
    for name in COMMANDS:
        help_text = CliRunner().invoke(main, [name, "--help"], terminal_width=200).output
        assert re.search(r"Exit status|Exits? \d|exits \d", help_text), name


def _declares_exit_one(help_text: str) -> bool:
    """Whether a command's own --help lists exit status 1 (``1  meaning``, ``Exits 1``,
    ``1 not reconciled``...), read after its first exit-status phrase."""
    found = re.search(r"Exit status|Exits? \d", help_text)
    if found is None:
        return False
    tail = help_text[found.start():].split("Options:")[0]
    return re.search(r"(?<![\w.$-])1(?:\s+|,\s*)[a-z]", tail) is not None


def test_the_top_level_exit_one_line_names_exactly_the_commands_that_exit_1() -> None:
    declaring = {name for name in COMMANDS
                 if _declares_exit_one(CliRunner().invoke(main, [name, "--help"],
                                                          terminal_width=200).output)}
    assert {"certify", "prune", "recover"} <= declaring  # the reader itself works
    top = CliRunner().invoke(main, ["--help"], terminal_width=200).output
    exit_one = re.search(r"\n\s+1\s+(a check found a problem:.*?)\n\s+2\s", top, re.S)
    assert exit_one is not None
    named = " ".join(exit_one.group(1).split())
    assert {name for name in COMMANDS if re.search(rf"\b{name} \(", named)} == declaring
    readme = (Path(__file__).resolve().parents[2] / "docs" / "commands.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| 1 |"))
    assert {name for name in COMMANDS if f"`{name}" in row} == declaring


def _interrupt(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


def _at_a_prompt(self: click.Group, ctx: click.Context) -> None:
    try:
        raise KeyboardInterrupt  # as Ctrl-C at ``click.confirm``
    except KeyboardInterrupt:
        raise click.Abort() from None


def _end_of_input(self: click.Group, ctx: click.Context) -> None:
    try:
        raise EOFError
    except EOFError:
        raise click.Abort() from None


@pytest.mark.parametrize(("where", "patch", "status", "said"), [
    ("the arguments being parsed", ("make_context", _interrupt), 130, "interrupted"),
    ("a command without handling of its own", ("invoke", _interrupt), 130, "interrupted"),
    ("the context closing after the command", ("close", _interrupt), 130, "interrupted"),
    ("a prompt", ("invoke", _at_a_prompt), 130, "interrupted"),
    ("end of input at a prompt", ("invoke", _end_of_input), 1, "Aborted!"),
])
def test_ctrl_c_anywhere_in_click_is_130_and_end_of_input_stays_aborted(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], where: str,
        patch: tuple[str, object], status: int, said: str) -> None:
    """The program (``cli.run``) ends Ctrl-C with 130 and "interrupted" wherever click
    would have said "Aborted!" and 1; end of input keeps click's word and status."""
    name, replacement = patch
    # The SIGINT disposition it sets on its way out is this test process's own.
    monkeypatch.setattr(cli.signal, "signal", lambda *args: None)
    owner = click.Context if name == "close" else type(main)
    monkeypatch.setattr(owner, name, replacement)
    monkeypatch.setattr(sys, "argv", ["efold-controller", "--help" if name == "close" else "runs"])
    assert cli._standalone() == status, where
    err = capsys.readouterr().err
    assert said in err and ("Aborted!" in err) == (said == "Aborted!"), err
