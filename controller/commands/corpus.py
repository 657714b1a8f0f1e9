"""``efold-controller corpus generate | validate | show``: write, check and inspect traces.

A trace on disk is ``<trace_id>.jsonl`` with its evaluator-only probes next to it in
``<trace_id>.probes.json``. ``show`` never prints an expected answer, a rubric or the
secret unless ``--evaluator`` is given.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from pathlib import Path

import click

from efold.controller.commands._corpus_import import import_command
from efold.controller.commands._options import refuse
from efold.corpus import (
    CorpusError,
    SuiteItem,
    corpus_digest,
    dump_probes,
    dump_trace,
    estimate_tokens,
    load_probes,
    load_suite,
    load_trace,
    trace_digest,
    validate,
)
from efold.corpus.digest import item_digest
from efold.corpus.forms import is_owner_turn, is_text_message
from efold.corpus.probe_files import JSONL_SUFFIX, TOML_SUFFIX
from efold.corpus.user_suite import (
    SuiteReport,
    check_suite_dir,
    check_trace_file,
    probe_files_beside,
)
from efold.errors import Code, EfoldError
from efold.input_files import PROBES_LIMIT, TRACE_LIMIT, InputFileError, read_input
from efold.registry.files import NOT_WRITABLE_ERRNOS, not_writable, publish_exclusive

PROBES_SUFFIX = ".probes.json"
_SEED_RANGE = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")


def parse_seeds(text: str) -> list[int]:
    """``101-108`` or ``101,103,110-112`` -> seeds in the order given."""
    seeds: list[int] = []
    for part in text.split(","):
        match = _SEED_RANGE.fullmatch(part)
        if match is None:
            raise click.BadParameter(f"not a seed or range: {part!r}")
        first = int(match.group(1))
        last = int(match.group(2) or first)
        if last < first:
            raise click.BadParameter(f"empty range: {part!r}")
        seeds.extend(range(first, last + 1))
    return seeds


def _probes_path(trace_path: Path) -> Path:
    return trace_path.with_name(trace_path.name.removesuffix(".jsonl") + PROBES_SUFFIX)


def _read_item(trace_path: Path) -> SuiteItem:
    """A trace file and its probes beside it, each a regular file within its bound
    (``input_files.read_input``: a FIFO or a device refuses with its own code)."""
    try:
        trace_data = read_input(trace_path, what="trace", limit=TRACE_LIMIT)
        probe_data = read_input(_probes_path(trace_path), what="probe file", limit=PROBES_LIMIT)
    except InputFileError as exc:
        if exc.code is not Code.INPUT_FILE_UNREADABLE:
            raise
        raise CorpusError(Code.TRACE_SCHEMA_INVALID, exc.detail) from exc
    return SuiteItem(trace=load_trace(trace_data), probes=load_probes(probe_data))


@click.group("corpus")
def command() -> None:
    """Generate, validate and inspect traces and their probes.

    Exit status: 0 done, 2 usage error, refused, or (validate) something rejected."""


def _make_out(out: Path) -> None:
    """``--out`` and its missing parents (as ``mkdir -p``); a directory this user may
    not create in refuses with ``path_not_writable`` naming it."""
    missing = [p for p in (out, *out.parents) if not p.exists()][::-1]
    for path in missing:
        try:
            path.mkdir(exist_ok=True)
        except OSError as exc:
            if exc.errno in NOT_WRITABLE_ERRNOS:
                raise not_writable(path.parent, path.name, exc) from exc
            raise CorpusError(Code.PATH_REFUSED,
                              f"cannot create {path}: {exc.strerror}") from exc


@command.command("generate")
@click.option("--suite", type=click.Choice(["hard", "hard-distractors", "original"]),
              default="hard", show_default=True)
@click.option("--seeds", metavar="RANGES", default=None,
              help="Hard seeds, e.g. 101-108 or 101,104,110-112 (default 101-108).")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write <trace_id>.jsonl and <trace_id>.probes.json into.")
def generate(suite: str, seeds: str | None, out: Path) -> None:
    """Generate (or export) a suite, validate it and write each trace once."""
    try:
        items = load_suite(suite, parse_seeds(seeds) if seeds is not None else None)
        _make_out(out)
        for item in items:
            trace_id = item.trace.header.trace_id
            data = dump_trace(item.trace)
            publish_exclusive(out, f"{trace_id}.jsonl", data, mode=0o644)
            publish_exclusive(out, trace_id + PROBES_SUFFIX, dump_probes(item.probes), mode=0o644)
            click.echo(f"{trace_id:<28} {len(data):>9} bytes  sha256 {trace_digest(item.trace)}")
        click.echo(f"corpus sha256 {corpus_digest(items)}  ({len(items)} traces)")
    except EfoldError as exc:
        refuse(exc)


def _user_trace(path: Path) -> Path | None:
    """The trace a user-format argument names: the trace beside a ``.probes.toml`` or
    ``.probes.jsonl`` file, or a ``.jsonl`` trace with one beside it; None otherwise
    (the bundled format: ``.jsonl`` with ``.probes.json``)."""
    for suffix in (TOML_SUFFIX, JSONL_SUFFIX):
        if path.name.endswith(suffix):
            return path.with_name(path.name.removesuffix(suffix) + ".jsonl")
    user_files = [p for p in probe_files_beside(path) if not p.name.endswith(PROBES_SUFFIX)]
    return path if path.name.endswith(".jsonl") and user_files else None


def _echo_user_report(report: SuiteReport, suite: Path | None) -> bool:
    """Print every problem (``FILE:LINE: code: detail``, stderr), then one ``ok`` line per
    good item; for a clean directory suite, its corpus digest. True if anything failed."""
    for problem in report.problems:
        click.echo(problem.render(), err=True)
    for item in report.items:
        click.echo(f"ok  {item.trace.header.trace_id:<28} sha256 {item_digest(item)}  "
                   f"{len(item.probes.probes)} probes")
    if suite is not None and not report.problems:
        click.echo(f"suite {suite}  {len(report.items)} items  "
                   f"corpus sha256 {corpus_digest(report.items)}")
    return bool(report.problems)


@command.command("validate")
@click.argument("paths", nargs=-1, required=True,
                type=click.Path(exists=True, path_type=Path))
def validate_command(paths: tuple[Path, ...]) -> None:
    """Validate trace files (each with its .probes.json beside it), directory suites,
    and user probe files (.probes.toml / .probes.jsonl, with their trace beside them).

    Exit 2 on any rejection."""
    rejected = 0
    for directory in sorted(p for p in paths if p.is_dir()):
        rejected += _echo_user_report(check_suite_dir(directory), directory)
    files = [p for p in paths if not p.is_dir()]
    user = {p: _user_trace(p) for p in files}
    for trace in sorted({t for t in user.values() if t is not None}):
        rejected += _echo_user_report(check_trace_file(trace), None)
    bundled = [p for p in files if user[p] is None]
    traces = sorted({p for p in bundled if not p.name.endswith(PROBES_SUFFIX)}
                    | {p.with_name(p.name.removesuffix(PROBES_SUFFIX) + ".jsonl")
                       for p in bundled if p.name.endswith(PROBES_SUFFIX)})
    for path in traces:
        try:
            item = _read_item(path)
            validate(item)
        except EfoldError as exc:
            rejected += 1
            click.echo(f"rejected: {exc.code.value}  {path}" + (f" ({exc.detail})"
                                                                if exc.detail else ""), err=True)
            continue
        click.echo(f"ok  {item.trace.header.trace_id:<28} sha256 {trace_digest(item.trace)}")
    if rejected:
        raise SystemExit(2)


@command.command("show")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--evaluator", is_flag=True,
              help="Also print expected answers, superseded values and sources.")
def show(path: Path, evaluator: bool) -> None:
    """A readable summary of one trace: sessions, turns, tool records, sizes, probes."""
    try:
        item = _read_item(path)
    except EfoldError as exc:
        refuse(exc)
    header, events = item.trace.header, item.trace.events
    tools = [e for e in events if e.role == "tool"]
    sizes = sorted(len(e.content.encode()) for e in tools)
    lines = [
        f"trace      {header.trace_id}  ({header.suite}, family {header.family}"
        + (f", seed {header.seed}" if header.seed is not None else "") + ")",
        f"title      {header.title}",
        f"fictional  {header.fictional}",
        f"sessions   {header.sessions}  (days {events[0].day}-{events[-1].day})",
        f"turns      {sum(is_owner_turn(e) for e in events)} owner, "
        f"{sum(e.steer for e in events)} steers, {sum(is_text_message(e) for e in events)} "
        f"text messages, {len(events)} events",
        f"tools      {len(tools)} records: " + ", ".join(
            f"{k} {n}" for k, n in sorted(Counter(str(e.source) for e in tools).items())),
    ]
    if sizes:
        lines.append(
            f"sizes      {sum(sizes)} bytes of tool output; per record min {sizes[0]}, "
            f"median {int(statistics.median(sizes))}, max {sizes[-1]}; "
            f"{sum(s > 16 * 1024 for s in sizes)} over 16 KiB")
    lines.append(f"estimate   {estimate_tokens(events)} tokens (chars/4)")
    lines.append(f"sha256     {trace_digest(item.trace)}")
    categories = Counter(str(p.category) for p in item.probes.probes)
    lines.append(f"probes     {len(item.probes.probes)}: " + ", ".join(
        f"{c} {n}" for c, n in sorted(categories.items())))
    if evaluator:
        for p in item.probes.probes:
            values = [f"expected={p.expected}"] if p.expected else []
            values += [f"superseded={p.superseded}"] if p.superseded else []
            values += [f"forbidden={p.forbidden}"] if p.forbidden else []
            values += [f"secret={p.secret}"] if p.secret else []
            values += [f"mode={p.mode}"] if p.mode else []
            lines.append(f"  {p.id}  {p.category}  label={p.label!r}  "
                         + "  ".join(values) + f"  source={p.source_event}")
    click.echo("\n".join(lines))


command.add_command(import_command)
