"""``efold-controller corpus import FORMAT FILE... --out DIR``: real transcripts as traces.

Every FILE must be a regular file of at most ``TRANSCRIPT_LIMIT`` bytes (a FIFO or a
device refuses, ``input_files``). Every FILE is converted (``efold.corpus.imports`` and
one reader per format) before anything is written; then each trace is published once as ``DIR/<trace_id>.jsonl``
(complete or absent; an existing file refuses). A trace id comes from the file stem, or
from ``--id`` with a single FILE; two inputs with one id refuse. The command prints one
line per trace and reminds the user that probes are theirs to write.
"""

from __future__ import annotations

from pathlib import Path

import click

from efold.controller.commands._options import refuse
from efold.corpus.codec import dump_trace
from efold.corpus.errors import CorpusError
from efold.corpus.import_formats import READERS
from efold.corpus.imports import Imported, check_trace_id, to_trace, trace_id_for
from efold.errors import Code, EfoldError
from efold.input_files import TRANSCRIPT_LIMIT, InputFileError, read_input
from efold.registry.files import publish_exclusive


def import_file(format_name: str, path: Path, trace_id: str | None = None) -> Imported:
    """The trace of one transcript file (nothing is written)."""
    try:
        data = read_input(path, what="transcript", limit=TRANSCRIPT_LIMIT)
    except InputFileError as exc:
        if exc.code is not Code.INPUT_FILE_UNREADABLE:
            raise  # a device, a FIFO, too large: its own code, before a byte is decoded
        raise CorpusError(Code.CORPUS_IMPORT_INVALID, exc.detail) from exc
    transcript = READERS[format_name](data, path.name)
    return to_trace(transcript, trace_id=trace_id if trace_id is not None else trace_id_for(path.stem),
                    family=format_name, title=path.name, name=path.name)


def import_files(format_name: str, paths: tuple[Path, ...], trace_id: str | None) -> list[Imported]:
    """Every file converted, ids checked unique; refuses before any write."""
    if trace_id is not None and len(paths) != 1:
        raise CorpusError(Code.CORPUS_IMPORT_INVALID, "--id needs exactly one FILE")
    explicit = check_trace_id(trace_id) if trace_id is not None else None
    imported: list[Imported] = []
    owners: dict[str, Path] = {}
    for path in paths:
        item = import_file(format_name, path, explicit)
        trace_id_ = item.trace.header.trace_id
        if trace_id_ in owners:
            raise CorpusError(Code.CORPUS_IMPORT_INVALID,
                              f"{owners[trace_id_]} and {path} both map to trace id {trace_id_!r}")
        owners[trace_id_] = path
        imported.append(item)
    return imported


def _summary(item: Imported) -> str:
    dropped = sum(item.dropped.values())
    kinds = ", ".join(f"{kind} {n}" for kind, n in item.dropped.items())
    return (f"{item.trace.header.trace_id}  {len(item.trace.events)} events  "
            f"{item.tool_calls} tool calls  "
            f"{item.redactions} redactions  {dropped} dropped" + (f" ({kinds})" if kinds else ""))


@click.command("import")
@click.argument("format_name", metavar="FORMAT", type=click.Choice(list(READERS)))
@click.argument("files", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write <trace_id>.jsonl into.")
@click.option("--id", "trace_id", default=None, metavar="ID",
              help="The trace id (only with one FILE; default: from the file name).")
def import_command(format_name: str, files: tuple[Path, ...], out: Path, trace_id: str | None) -> None:
    """Import real agent transcripts as traces (probes are yours to write).

    FORMAT: openai-chat, anthropic, claude-code, codex or pi.
    """
    try:
        imported = import_files(format_name, files, trace_id)
        targets = [out / f"{item.trace.header.trace_id}.jsonl" for item in imported]
        for target in targets:
            if target.exists() or target.is_symlink():
                raise CorpusError(Code.CORPUS_IMPORT_INVALID, f"{target} exists; nothing written")
        out.mkdir(parents=True, exist_ok=True)
        for item, target in zip(imported, targets, strict=True):
            publish_exclusive(out, target.name, dump_trace(item.trace), mode=0o644)
    except EfoldError as exc:
        refuse(exc)
    for item in imported:
        click.echo(_summary(item))
    click.echo("Imported traces have no probes: write <trace_id>.probes.toml next to each "
               "trace (its format: docs/conversations.md, section 2), then check the "
               f"directory with `efold-controller corpus validate {out}`.")
