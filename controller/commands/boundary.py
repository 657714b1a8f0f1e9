"""``efold-controller boundary validate | lock | show``: boundary cases and their lock.

A cases root holds one directory per case (docs/boundary.md §1) and ``boundary.lock``.
ROOT defaults to the bundled cases, ``efold/boundary/cases``. ``validate`` loads every
case and checks the lock, one line per case (and per locked case that is gone);
``lock`` records every case as it is now (all must be valid; a changed case is never
re-locked at its old version); ``show`` prints one case's sidecar summary and the
environment identity its fixture fixes; ``run --faux`` runs the cases offline with the
faux agent on built-in arms, in this process (built-in folds only: any other fold, a
contained child per slot and the real route are a campaign's ``[boundary]``).
``validate --variants`` also checks each case's metamorphic variants
(``boundary.metamorphic``, ``boundary.variant_checks``): one more line per variant,
and a stability table across ``--arms`` that is printed, never a refusal.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click
import msgspec

from efold.boundary.case import Case, case_dirs, check_unique, load_case, load_cases
from efold.boundary.identity import fixture_identity
from efold.boundary.lock import LOCK_NAME, lock_problems, write_lock
from efold.boundary.runner_check import require_runners, runner_problems
from efold.boundary.validate import ablation as run_ablation
from efold.boundary.validate import recall_problem, require_recall_needed, run_offline
from efold.boundary.variant_checks import STABILITY_ARMS, VariantReport, check_variants
from efold.controller.commands._options import fail, refusal_for, refuse
from efold.digests import build_digest, package_root
from efold.errors import Code, EfoldError
from efold.folds.registry import BUILTIN_ARMS
from efold.registry.files import publish_exclusive
from efold.report.boundary_results import boundary_results, judged_offline
from efold.report.boundary_table import short_of_regime


def bundled_cases_root() -> Path:
    return package_root() / "boundary" / "cases"


def _root(root: Path | None,
          refuse_: Callable[[str, str], NoReturn] | None = None) -> Path:
    """ROOT, or the bundled cases; a missing directory refuses (exit 2)."""
    chosen = root if root is not None else bundled_cases_root()
    if not chosen.is_dir():
        what = ("the bundled cases directory does not exist yet (no cases are bundled in "
                "this build); give ROOT" if root is None else "not a directory")
        (refuse_ or fail)(Code.BOUNDARY_CASE_INVALID.value, f"{chosen}: {what}")
    return chosen


@click.group("boundary")
def command() -> None:
    """Validate, lock, show and (offline) run boundary cases.

    Exit status: 0 done, 2 usage error, refused, or (validate) a case or the lock
    rejected."""


class _VariantLine(msgspec.Struct, frozen=True, omit_defaults=True):
    """One metamorphic variant of a case (``validate --variants``): ``native`` and
    ``minus_critical`` are the native arm's verdicts on it and on it without the critical
    events; ``stable`` says per arm whether its verdict equals the one on the original."""

    name: str
    kind: str
    applicable: bool
    note: str
    problems: list[str] = []
    native: bool | None = None
    minus_critical: bool | None = None
    verdicts: dict[str, bool | None] = {}
    stable: dict[str, bool] = {}


class _Line(msgspec.Struct, frozen=True, omit_defaults=True):
    id: str
    path: str | None = None
    version: int | None = None
    tier: str | None = None
    oracles: int | None = None
    code: str | None = None
    detail: str | None = None
    original: dict[str, bool | None] | None = None  # --variants: each arm's verdict
    variants: list[_VariantLine] | None = None

    @property
    def ok(self) -> bool:
        return self.code is None


def _text(line: _Line) -> str:
    head = f"{line.id:<36}"
    if line.version is not None:
        head += f" v{line.version:<3} {line.tier:<11} {line.oracles:>2} oracles"
    return f"{head}  " + ("OK" if line.ok else f"{line.code} ({line.detail})")


_VERDICT = {True: "PASS", False: "FAIL", None: "n/a"}


def _variant_text(variant: _VariantLine, original: dict[str, bool | None]) -> str:
    """A variant's line: its verdict, what changed, and the stability table's row."""
    head = f"  variant {variant.name:<27}"
    if not variant.applicable:
        return f"{head} n/a  ({variant.note})"
    verdict = "OK " if not variant.problems else "BROKEN"
    row = ", ".join(
        f"{arm} {'=' if same else 'changed'}"
        + ("" if same else f" ({_VERDICT[original.get(arm)]}->"
                           f"{_VERDICT[variant.verdicts.get(arm)]})")
        for arm, same in variant.stable.items())
    text = (f"{head} {verdict}  {variant.note}; native {_VERDICT[variant.native]}, minus "
            f"critical {_VERDICT[variant.minus_critical]}; stability: {row}")
    if variant.problems:
        text += f"; {'; '.join(variant.problems)}"
    return text


@command.command("validate")
@click.argument("root", required=False, type=click.Path(path_type=Path))
@click.option("--ablation", is_flag=True,
              help="Also prove each case: the faux agent passes with the full history and "
                   "fails with the history removed and with the critical events deleted.")
@click.option("--variants", is_flag=True,
              help="Also check each case's metamorphic variants: the faux agent still "
                   "passes on each and still fails without the critical events; a stability "
                   "table across --arms is printed (informational).")
@click.option("--arms", default=None,
              help="With --variants: the built-in arms of the stability table, "
                   f"comma-separated  [default: {','.join(STABILITY_ARMS)}]")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def validate(root: Path | None, ablation: bool, variants: bool, arms: str | None,
             as_json: bool) -> None:
    """Load every case under ROOT and check boundary.lock; one line per case (and, with
    --variants, one per variant).

    A case whose test commands cannot run here (the test runner, e.g. pytest, is not
    installed for this interpreter) is not valid: boundary_runner_unavailable.

    Exit 0 when every case is valid and locked (and, with --ablation, proven; with
    --variants, unbroken by every variant), 2 otherwise."""
    refuse_ = refusal_for(as_json)
    chosen = _root(root, refuse_)
    if arms is not None and not variants:
        raise click.UsageError("--arms applies only with --variants")
    names = list(dict.fromkeys(a.strip() for a in (arms or ",".join(STABILITY_ARMS)).split(",")
                               if a.strip()))
    unknown = [name for name in names if name not in BUILTIN_ARMS]
    if not names or unknown:
        refuse_(Code.BOUNDARY_CASE_INVALID.value,
                f"--arms: {', '.join(unknown)} not a built-in arm" if unknown
                else "--arms names no arm")
    lines: dict[str, _Line] = {}
    cases: list[Case] = []
    failed = 0
    try:
        dirs = case_dirs(chosen)
    except EfoldError as exc:
        refuse_(exc.code.value, exc.detail)
    for path in dirs:
        try:
            case = load_case(path)
        except EfoldError as exc:
            failed += 1
            lines[f"~{path.name}"] = _Line(id=path.name, path=str(path), code=exc.code.value,
                                           detail=exc.detail)
            continue
        cases.append(case)
        lines[case.id] = _Line(id=case.id, path=str(path), version=case.version,
                               tier=case.sidecar.tier, oracles=len(case.sidecar.oracle.success))
    try:
        cases = check_unique(cases)
        problems = lock_problems(chosen, cases, complete=not failed)
    except EfoldError as exc:
        refuse_(exc.code.value, exc.detail)
    for case_id, problem in problems:
        base = lines.get(case_id, _Line(id=case_id))
        lines[case_id] = msgspec.structs.replace(base, code=problem.code.value,
                                                 detail=problem.detail)
    for case in cases:  # a case whose checks cannot run here is not valid here
        if lines[case.id].ok and (runner := runner_problems(case)):
            lines[case.id] = msgspec.structs.replace(
                lines[case.id], code=Code.BOUNDARY_RUNNER_UNAVAILABLE.value,
                detail="; ".join(runner))
        if lines[case.id].ok and (visible := recall_problem(case)):
            lines[case.id] = msgspec.structs.replace(
                lines[case.id], code=Code.BOUNDARY_CASE_INVALID.value, detail=visible)
    if ablation:
        for case in cases:
            if lines[case.id].ok:
                lines[case.id] = _proven(lines[case.id], case)
    if variants:
        for case in cases:
            if lines[case.id].ok:
                lines[case.id] = _varied(lines[case.id], case, names)
    ordered = [lines[key] for key in sorted(lines, key=lambda k: k.lstrip("~"))]
    ok = all(line.ok for line in ordered)
    if as_json:
        click.echo(msgspec.json.encode({"root": str(chosen), "ok": ok,
                                        "cases": ordered}).decode())
    else:
        for line in ordered:
            click.echo(_text(line))
            for variant in line.variants or ():
                click.echo(_variant_text(variant, line.original or {}))
        valid = sum(line.ok for line in ordered)
        click.echo(f"{valid} of {len(ordered)} valid and locked  ({chosen / LOCK_NAME})")
    if not ok:
        raise SystemExit(2)


def _proven(line: _Line, case: Case) -> _Line:
    """``line`` with the case's ablation verdict (docs/boundary.md §7)."""
    try:
        problem = run_ablation(case).problem
    except EfoldError as exc:
        return msgspec.structs.replace(line, code=exc.code.value, detail=exc.detail)
    if problem is None:
        return line
    return msgspec.structs.replace(line, code=Code.BOUNDARY_CASE_INVALID.value,
                                   detail=f"ablation: {problem}")


def _variant_lines(report: VariantReport) -> list[_VariantLine]:
    return [_VariantLine(name=c.variant.name, kind=c.variant.kind,
                         applicable=c.variant.applicable, note=c.variant.note,
                         problems=list(c.problems), native=c.full,
                         minus_critical=c.minus_critical, verdicts=dict(c.verdicts),
                         stable=dict(c.stable))
            for c in report.checks]


def _varied(line: _Line, case: Case, arms: list[str]) -> _Line:
    """``line`` with the case's variants (``boundary.variant_checks.check_variants``); a
    variant that breaks the case makes it ``boundary_case_invalid``, naming it."""
    try:
        report = check_variants(case, arms=arms)
    except EfoldError as exc:
        return msgspec.structs.replace(line, code=exc.code.value, detail=exc.detail)
    line = msgspec.structs.replace(line, original=dict(report.original),
                                   variants=_variant_lines(report))
    problem = report.problem
    if problem is None:
        return line
    return msgspec.structs.replace(line, code=Code.BOUNDARY_CASE_INVALID.value,
                                   detail=problem)


@command.command("lock")
@click.argument("root", required=False, type=click.Path(path_type=Path))
def lock(root: Path | None) -> None:
    """Record every case under ROOT in ROOT/boundary.lock (id, version, digest).

    Every case must be valid. A case changed at its locked version is refused: give it
    a new version or a new id. Entries of cases that are gone are dropped. Exit 0 done,
    2 refused (nothing written)."""
    chosen = _root(root)
    try:
        changes = write_lock(chosen, load_cases(chosen))
    except EfoldError as exc:
        refuse(exc)
    for change in changes:
        click.echo(f"{change.action:<9} {change.id:<36} v{change.version}  "
                   f"sha256 {change.sha256}")
    click.echo(f"{sum(c.action != 'dropped' for c in changes)} cases locked in "
               f"{chosen / LOCK_NAME}")


def _summary(case: Case) -> dict[str, Any]:
    s = case.sidecar
    return {
        "id": s.id, "version": s.version, "tier": s.tier, "workload": s.workload,
        "path": str(case.path),
        "session": {"file": s.source.session, "format": s.source.format,
                    "boundary": s.source.boundary, "events": len(case.trace.events),
                    "before_boundary": case.boundary},
        "fold": msgspec.to_builtins(s.fold),
        "continuation": msgspec.to_builtins(s.continuation),
        "tools": msgspec.to_builtins(s.tools),
        "oracles": msgspec.to_builtins(s.oracle.success),
        "behavior": msgspec.to_builtins(s.behavior),
        "recall": msgspec.to_builtins(s.recall),
        "classification": msgspec.to_builtins(s.classification),
        "identity": msgspec.to_builtins(fixture_identity(case)),
    }


@command.command("show")
@click.argument("case_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
def show(case_dir: Path, as_json: bool) -> None:
    """One case: its sidecar summary and the environment identity its fixture fixes
    (the tool catalog, system prompt and route are recorded per run).

    Exit 0, or 2 refused (the case is invalid)."""
    refuse_ = refusal_for(as_json)
    try:
        case = load_case(case_dir)
        summary = _summary(case)
    except EfoldError as exc:
        refuse_(exc.code.value, exc.detail)
    if as_json:
        click.echo(msgspec.json.encode(summary).decode())
        return
    s, ident = case.sidecar, fixture_identity(case)
    tools = ["read", "search"] + (["edit"] if s.tools.edit else []) + (
        [f"test ({len(s.tools.test.commands)} commands, {s.tools.test.timeout_seconds}s)"]
        if s.tools.test is not None else [])
    lines = [
        f"case        {s.id}  v{s.version}  ({s.tier}, {s.workload})",
        f"session     {s.source.session} ({s.source.format}), {len(case.trace.events)} "
        f"events, boundary {s.source.boundary}: {case.boundary} before it",
        f"fold        {s.fold.mode} x{s.fold.repeat}, target {s.fold.target}"
        + (", then a restart" if s.fold.restart else ""),
        f"stimulus    {len(s.continuation.input)} messages, at most "
        f"{s.continuation.max_actions} actions",
        f"tools       {', '.join(tools)}",
        f"oracles     {len(s.oracle.success)}: "
        + ", ".join(str(o.__struct_config__.tag) for o in s.oracle.success),
        "duplicates  " + (", ".join(r.family for r in s.behavior.duplicate_rules) or "none"),
        "recall      " + ("required" if s.recall.required else "not required"),
        f"capability  {', '.join(s.classification.expected_capability)}",
        "signatures  " + (", ".join(s.classification.failure_signatures) or "none"),
        f"sha256      {ident.case_sha256}",
        f"workspace   {ident.workspace_sha256}",
    ]
    lines.append("oracle files" + ("" if ident.oracle_files else "  none"))
    lines += [f"  {digest:<64}  {rel}" for rel, digest in ident.oracle_files.items()]
    click.echo("\n".join(lines))


@command.command("run")
@click.argument("root", required=False, type=click.Path(path_type=Path))
@click.option("--faux", "faux", is_flag=True, required=True,
              help="Run offline with the faux agent, in this process, on built-in arms "
                   "(any fold, contained children or a real model: a campaign's "
                   "[boundary]).")
@click.option("--arms", default="native,cold-rebuild,compaction,pack", show_default=True,
              help="Built-in arms, comma-separated; the first is the reference of the "
                   "contrasts and incidents.")
@click.option("--out", "out", type=click.Path(path_type=Path), default=None,
              help="Also write the results as JSON to this new file (complete or absent).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
def run(root: Path | None, faux: bool, arms: str, out: Path | None, as_json: bool) -> None:
    """Run every case under ROOT on each arm with the faux agent: each case's verdict
    per arm, then per arm the pass rate (Wilson 95%), actions and duplicates, the
    Recall Trigger Rate on required-recall cases, the contrasts against the first arm
    and the incidents (an arm failing a case the first arm passes). A case whose test
    commands cannot run here refuses the whole run before any case runs
    (boundary_runner_unavailable).

    Exit 0 done, 2 refused."""
    del faux  # required: the real route runs cases in campaigns (not yet)
    refuse_ = refusal_for(as_json)
    chosen = _root(root, refuse_)
    names = list(dict.fromkeys(a.strip() for a in arms.split(",") if a.strip()))
    if not names:
        refuse_(Code.BOUNDARY_CASE_INVALID.value, "--arms names no arm")
    try:
        cases = load_cases(chosen)
        require_runners(cases)  # before any case runs: nothing judged by a missing runner
        require_recall_needed(cases)  # nor a required-recall case whose answer is in view
        judged = [judged_offline(case, run_offline(case, case.prefix, arm))
                  for case in cases for arm in names]
        results = boundary_results(judged, names, build=build_digest())
        if out is not None:
            publish_exclusive(out.parent, out.name, msgspec.json.encode(results))
    except EfoldError as exc:
        refuse_(exc.code.value, exc.detail)
    if as_json:
        click.echo(msgspec.json.encode(results).decode())
        return
    for row in results.runs:
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[row.passed]
        failed = [kind for kind, said in row.oracles if said == "fail"]
        click.echo(f"{row.case:<32} {row.arm:<14} {verdict}  {len(row.actions)} actions"
                   + (f", failed: {', '.join(failed)}" if failed else "")
                   + (f", {row.folds} of {row.repeat} folds" if short_of_regime(row) else ""))
    for ex in results.excluded:
        click.echo(f"{ex.case:<32} {ex.arm:<14} excluded  {ex.excluded}")
    for s in results.arms:
        ci = s.passed.wilson95
        interval = f" (95% CI {ci.lower:.0%}-{ci.upper:.0%})" if ci is not None else ""
        recall = ("" if s.recall_trigger is None else
                  f", recall triggered {s.recall_trigger.successes}/{s.recall_trigger.trials}")
        median, per_pass = (("-" if n is None else f"{n:,}")
                            for n in (s.tokens_per_task_median, s.tokens_per_pass))
        click.echo(f"{s.arm:<14} passed {s.passed.successes} of {s.passed.trials}{interval}, "
                   f"{s.actions} actions, {s.duplicates} duplicate{recall}; tokens per task "
                   f"{median} (median), per pass {per_pass}")
    for c in results.contrasts:
        click.echo(f"{c.arm} vs {c.reference}: {c.counts.c} won, {c.counts.b} lost over "
                   f"{c.counts.pairs} cases")
    click.echo(f"incidents: {len(results.incidents)}"
               + "".join(f"\n  {i.case_id} {i.failing_arm}: {i.category}"
                         for i in results.incidents))
