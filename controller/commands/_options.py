"""What several commands share: click decorators, the refusal, a report's two forms."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, NoReturn, TypeVar

import click
import msgspec

from efold.controller.run_index import latest_run
from efold.controller.runroot import DEFAULT_RUNS_ROOT
from efold.errors import EfoldError

F = TypeVar("F", bound=Callable[..., Any])


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _sha256(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A usage error unless ``value`` is 64 hex digits (surrounding spaces and case
    aside), before anything reads the registration."""
    if value is not None and not _SHA256.fullmatch(value.strip().lower()):
        raise click.BadParameter(f"{value!r} is not a sha256 (64 hex digits, as `register` "
                                 "printed it)")
    return value


def registration_options(required: bool = True) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        f = click.option(
            "--sha256", "sha256", required=required, metavar="SHA", callback=_sha256,
            help="The sha256 that `register` printed for the registration file.",
        )(f)
        f = click.option(
            "--registration", "registration", required=required,
            type=click.Path(exists=True, dir_okay=False), metavar="FILE",
            help="A registration.json written by `register`.",
        )(f)
        return f

    return decorate


def run_report_options(f: F) -> F:
    """``RUN_DIR`` and ``--json``: the arguments of a command that reports on a run."""
    f = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")(f)
    return click.argument("run_dir", type=click.Path(exists=True, file_okay=False))(f)


def latest_run_report_options(f: F) -> F:
    """``run_report_options`` with RUN_DIR optional, and ``latest_options``: resolve the
    run with ``resolve_run(run_dir, latest, root)``."""
    f = latest_options(f)
    f = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")(f)
    return click.argument("run_dir", required=False,
                          type=click.Path(exists=True, file_okay=False))(f)


def latest_options(f: F) -> F:
    """``--latest`` and ``--root``: take the newest run under ROOT instead of RUN (see
    ``resolve_run``). The command's RUN argument must be optional (``required=False``)."""
    f = click.option("--root", "root", default=None, type=click.Path(), metavar="ROOT",
                     help=f"Where --latest looks (default: ./{DEFAULT_RUNS_ROOT}).")(f)
    return click.option("--latest", is_flag=True,
                        help="Use the newest run under --root instead of RUN.")(f)


def resolve_run(run: str | None, latest: bool, root: str | None,
                on_refusal: Callable[[str, str], NoReturn] | None = None) -> str:
    """RUN as given, or with ``--latest`` the newest run under ``root``. RUN with
    ``--latest``, neither, or ``--root`` without ``--latest`` is a usage error; no run
    under ``root`` (or no ``root``) a refusal, through ``on_refusal(code, detail)``
    (default: ``fail``)."""
    if run is not None and latest:
        raise click.UsageError("RUN and --latest are exclusive")
    if root is not None and not latest:
        raise click.UsageError("--root applies to --latest")
    if run is not None:
        return run
    if not latest:
        raise click.UsageError("give RUN, or --latest for the newest run")
    try:
        return latest_run(root if root is not None else DEFAULT_RUNS_ROOT)
    except EfoldError as exc:
        (on_refusal or fail)(exc.code.value, exc.detail)


def echo_report(report: msgspec.Struct, *, as_json: bool, text: Iterable[str]) -> None:
    """Print ``report`` as one line of JSON, or as its ``text`` lines."""
    if as_json:
        click.echo(msgspec.json.encode(report).decode())
    else:
        for line in text:
            click.echo(line)


def fail(code: str, detail: str = "") -> NoReturn:
    """Print a refusal (fixed code first) to stderr and exit 2."""
    click.echo(f"refused: {code}" + (f" ({detail})" if detail else ""), err=True)
    raise SystemExit(2)


def refuse(exc: EfoldError) -> NoReturn:
    """``fail`` with an error's fixed code and detail."""
    fail(exc.code.value, exc.detail)


def real_route_options(f: F) -> F:
    """``--authorization`` and ``--trust``: what a real run (``pilot --real``, ``smoke``)
    verifies and consumes."""
    f = click.option("--trust", multiple=True, type=click.Path(dir_okay=False),
                     help="A trusted approver public key (repeatable).")(f)
    return click.option("--authorization", default=None, type=click.Path(dir_okay=False),
                        help="A signed authorization file (consumed once).")(f)
