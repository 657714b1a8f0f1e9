"""``efold-controller analyze [FILE | --run RUN --arms REF,CAND [--corpus NAME] | --manifest FILE]``.

Deterministic, no model call, writes nothing but ``--write``'s new file. FILE is a
comparison set (``report.comparison_set``: strict, at most 8 MiB and 10,000 runs);
``--run`` makes one from a run's receipts (``report.comparison_export``), with
``--corpus`` over exactly a bundled corpus's tasks (``report.comparison_corpus``),
``--manifest`` from the runs, roles and tasks a manifest names
(``report.comparison_manifest``), and ``--write`` keeps it. The analysis is ``report.analyze``. Without any: a usage error, or
with ``--skip-if-empty`` ``SKIP`` (exit 0).
"""

from __future__ import annotations

from pathlib import Path

import click
import msgspec

from efold import __version__
from efold.controller.commands._options import echo_report, refusal_for, resolve_run
from efold.controller.rundirs.cluster_collect import read_any_run
from efold.digests import sha256_hex
from efold.errors import Code, EfoldError
from efold.registry.files import publish_exclusive
from efold.report.analyze import analyze, render_analysis_text
from efold.report.comparison_corpus import CORPORA, corpus_comparison, load_corpus
from efold.report.comparison_export import comparison_from_receipts
from efold.report.comparison_manifest import MAX_BYTES as MANIFEST_MAX_BYTES
from efold.report.comparison_manifest import collect, decode_manifest
from efold.report.comparison_set import (
    MAX_BYTES,
    ComparisonSet,
    Provenance,
    decode_comparison,
    encode_comparison,
)
from efold.report.errors import ReportError


def _read(path: Path) -> bytes:
    """At most one byte past the bound, so an oversized file is refused unread."""
    with path.open("rb") as f:
        return f.read(MAX_BYTES + 1)


def _arm_names(arms: str) -> list[str]:
    names = [a.strip() for a in arms.split(",")]
    if len(names) != 2 or not all(names):
        raise click.UsageError("--arms takes two roles: REFERENCE,CANDIDATE")
    return names


def _from_run(run: str, arms: str, attest: bool) -> tuple[ComparisonSet, str]:
    names = _arm_names(arms)
    view = read_any_run(run)
    models = sorted({view.reader, *view.summarisers.values()})
    provenance = Provenance(source="efold-run", efold_version=__version__, models=models,
                            registration_sha256=view.plan.registration_sha256, faux=view.faux)
    data, left = comparison_from_receipts(view.receipts, names[0], names[1],
                                          provenance=provenance, representative=attest)
    note = (f"from {run}: {len(data.runs) // 2} pairs of {names[0]} and {names[1]}; left out "
            f"{left.unscored} pairs with a slot not completed and scored, {left.alone} "
            "slots without a counterpart")
    return data, note


def _from_corpus(name: str, run: str, arms: str, attest: bool) -> tuple[ComparisonSet, str]:
    """The set of two roles of ``run`` over the corpus ``name``'s tasks, and the note
    naming every corpus task left without a scored pair."""
    names = _arm_names(arms)
    corpus = load_corpus(name)
    view = read_any_run(run)
    collected = corpus_comparison(
        corpus, view.receipts, names[0], names[1], run=run,
        registration_sha256=view.plan.registration_sha256, efold_version=__version__,
        models=[view.reader, *view.summarisers.values()], faux=view.faux,
        representative=attest)
    missing = collected.missing
    total = len(corpus.versions)
    note = (f"from {run}, the {name} corpus (lock sha256 {corpus.lock_sha256}): "
            f"{len(collected.data.runs) // 2} pairs of {names[0]} and {names[1]} over "
            f"{total - len(missing)} of its {total} tasks"
            + (f"; no scored pair for {len(missing)}: {', '.join(missing)}" if missing
               else ""))
    return collected.data, note


def _from_manifest(path: Path) -> tuple[ComparisonSet, str]:
    """The set a manifest names: each run read (and verified) where the manifest says,
    relative to the manifest's own directory, and its registration checked."""
    try:
        with path.open("rb") as f:
            raw = f.read(MANIFEST_MAX_BYTES + 1)
    except OSError as exc:
        raise click.UsageError(f"{path}: {exc.strerror}") from exc
    manifest = decode_manifest(raw)
    views = []
    for entry in manifest.runs:
        run = path.parent / entry.run
        if not (run / "journal.sqlite").is_file():
            raise ReportError(Code.COMPARISON_INVALID, f"run {entry.run}: not a run directory")
        view = read_any_run(run)
        if view.plan.registration_sha256 != entry.registration_sha256:
            raise ReportError(Code.COMPARISON_INVALID,
                              f"run {entry.run}: registered as "
                              f"{view.plan.registration_sha256}, not the manifest's "
                              f"{entry.registration_sha256}")
        views.append(view)
    collected = collect(
        manifest, sha256_hex(raw), [v.receipts for v in views], efold_version=__version__,
        models=[m for v in views for m in (v.reader, *v.summarisers.values())],
        faux=any(v.faux for v in views))
    missing = collected.missing
    note = (f"from {path}: {len(collected.data.runs) // 2} pairs over "
            f"{len(manifest.tasks) - len(missing)} of its {len(manifest.tasks)} tasks"
            + (f"; no scored pair for {len(missing)}: {', '.join(missing[:5])}"
               + (" ..." if len(missing) > 5 else "") if missing else ""))
    return collected.data, note


@click.command("analyze")
@click.argument("file", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--run", "run", default=None, type=click.Path(), metavar="RUN",
              help="Make the comparison set from this run's receipts (with --arms).")
@click.option("--arms", default=None, metavar="REF,CAND",
              help="With --run: the reference role and the candidate role.")
@click.option("--corpus", "corpus", default=None, type=click.Choice(sorted(CORPORA)),
              help="With --run: compare over exactly this bundled corpus's tasks (its "
                   "case ids); a task without a scored pair is named, never filled in.")
@click.option("--manifest", "manifest", default=None,
              type=click.Path(path_type=Path, dir_okay=False),
              help="Make the comparison set from the runs, roles and tasks this manifest "
                   "names (efold-comparison-manifest-v1, docs/results-schema.md).")
@click.option("--write", "write", default=None, type=click.Path(path_type=Path),
              help="With --run or --manifest: also write the comparison set to this new "
                   "file (complete or absent).")
@click.option("--attest-representative", is_flag=True,
              help="With --run: attest, as the operator, that the run's tasks represent "
                   "the decision at hand. Recorded as an attestation; efold cannot verify it.")
@click.option("--skip-if-empty", is_flag=True,
              help="Without FILE or --run, print SKIP and exit 0 (a script's optional "
                   "step); without this flag no input is a usage error.")
@click.option("--json", "as_json", is_flag=True, help="Print the analysis as one JSON object.")
def command(file: Path | None, run: str | None, corpus: str | None, manifest: Path | None,
            arms: str | None, write: Path | None, attest_representative: bool,
            skip_if_empty: bool, as_json: bool) -> None:
    """The paired comparison analyzer: a candidate arm against a reference arm over the
    same tasks, with a minimum evidence gate of 20 paired tasks (never lower).

    FILE is a comparison set (efold-comparison-v1 or -v2, docs/results-schema.md), or
    --run RUN --arms REF,CAND makes one from a run (questions and boundary cases paired
    by trace, probe and repeat; with --corpus contract over exactly the contract
    corpus's 20 tasks, each one without a scored pair named), or --manifest FILE from the runs, roles and tasks a
    manifest names (two roles of one run, or of two runs made apart). It prints the verdict (comparison_ready only when the gate
    is met), each arm's full acceptance with its Wilson 95% interval, checks, missed
    constraints, unsupported claims, tokens, cost and latency, and the paired wins, ties
    and losses on each. Without FILE or --run it is a usage error (a forgotten argument
    must not pass in a script), unless --skip-if-empty is given: then it prints SKIP.

    \b
    Exit status:
      0  comparison_ready, or SKIP (nothing given, with --skip-if-empty)
      1  analyzed, but the evidence gate is not met (insufficient_evidence)
      2  usage error or refused: comparison_invalid, comparison_too_large, a RUN that
         is no run or whose records refuse
    """
    refuse_ = refusal_for(as_json)
    if sum(x is not None for x in (file, run, manifest)) > 1:
        raise click.UsageError("give one of FILE, --run RUN or --manifest FILE")
    if corpus is not None and run is None:
        raise click.UsageError("--corpus goes with --run RUN --arms REF,CAND")
    if run is None and (arms is not None or attest_representative):
        raise click.UsageError("--arms and --attest-representative go with --run (a FILE "
                               "or a manifest carries its own attestation)")
    if write is not None and run is None and manifest is None:
        raise click.UsageError("--write goes with --run or --manifest")
    if file is None and run is None and manifest is None:
        if not skip_if_empty:
            raise click.UsageError("give FILE, or --run RUN --arms REF,CAND (or "
                                   "--skip-if-empty to print SKIP and exit 0 without one)")
        click.echo(msgspec.json.encode({"skip": "no comparison set given"}).decode()
                   if as_json else "SKIP: no comparison set given (analyze FILE, or "
                   "--run RUN --arms REF,CAND)")
        return
    note = None
    try:
        if run is not None:
            if arms is None:
                raise click.UsageError("--run needs --arms REF,CAND")
            resolved = resolve_run(run, False, None, refuse_)
            data, note = (_from_run(resolved, arms, attest_representative) if corpus is None
                          else _from_corpus(corpus, resolved, arms, attest_representative))
        elif manifest is not None:
            data, note = _from_manifest(manifest)
        else:
            assert file is not None
            try:
                raw = _read(file)
            except OSError as exc:
                raise click.UsageError(f"{file}: {exc.strerror}") from exc
            data = decode_comparison(raw)
        if write is not None:  # (--run or --manifest: checked above)
            publish_exclusive(write.parent, write.name, encode_comparison(data))
        analysis = analyze(data)
    except EfoldError as exc:
        refuse_(exc.code.value, exc.detail)
    text = render_analysis_text(analysis).splitlines()
    if as_json and corpus is not None and note is not None:
        click.echo(note, err=True)  # the corpus tasks left unpaired, named
    echo_report(analysis, as_json=as_json, text=text if note is None else [note, *text])
    if analysis.verdict != "comparison_ready":
        raise SystemExit(1)
