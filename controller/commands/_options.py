"""Options shared by several commands (click decorators)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def registration_options(required: bool = True) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        f = click.option(
            "--sha256", "sha256", required=required, metavar="SHA",
            help="The sha256 that `register` printed for the registration file.",
        )(f)
        f = click.option(
            "--registration", "registration", required=required,
            type=click.Path(exists=True, dir_okay=False), metavar="FILE",
            help="A registration.json written by `register`.",
        )(f)
        return f

    return decorate


def fail(code: str, detail: str = "") -> None:
    """Print a refusal (fixed code first) to stderr and exit 2."""
    click.echo(f"refused: {code}" + (f" ({detail})" if detail else ""), err=True)
    raise SystemExit(2)
