"""The ``efold-controller`` command: one thin click group; each command lives in its own
module and registers itself here."""

from __future__ import annotations

import click

from efold import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="efold-controller")
def main() -> None:
    """efold: measure what an agent still knows after its context is folded."""


def _register_commands() -> None:
    # Each command module adds itself to `main`; imported here so the group stays thin.
    import importlib
    import pkgutil

    from efold.controller import commands

    for info in pkgutil.iter_modules(commands.__path__):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        command = getattr(module, "command", None)
        if isinstance(command, click.Command):
            main.add_command(command)


_register_commands()
