"""The command table of ``efold-controller``: complete, true to each command, and lazy."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys

import click
from click.testing import CliRunner

from efold.controller import commands
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
