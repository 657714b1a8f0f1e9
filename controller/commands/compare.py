"""``efold-controller compare RUN_A RUN_B [--json]``: two runs side by side.

Read-only, like ``show``: each run's results are built from its own records
(``read_run`` + ``build_run_results``, refusing what ``aggregate`` refuses), and its
registration digests are read from the ``registration.json`` its plan names (the bytes
must still hash to the plan's ``registration_sha256``). The comparison itself is
``efold.report.compare``. Exit status: 0 compared, 2 usage error or refused.
"""

from __future__ import annotations

import os
from pathlib import Path

import click
import msgspec

from efold.controller.campaigns.registration import REGISTRATION_NAME, Registration
from efold.controller.commands._options import (
    journal_refusal,
    latest_options,
    refusal_for,
    resolve_run,
)
from efold.controller.errors import ControllerError
from efold.controller.rundirs.aggregate import build_run_results
from efold.controller.rundirs.chain import chain_links, is_chained
from efold.controller.rundirs.cluster_collect import read_any_run
from efold.controller.rundirs.run_index import is_run_dir
from efold.digests import sha256_hex
from efold.errors import Code, EfoldError
from efold.registry.journal import JOURNAL_NAME
from efold.report import Results
from efold.report.compare import (
    RegistrationFacts,
    compare_results,
    render_comparison_json,
    render_comparison_text,
)


def _run(path: str) -> tuple[Results, RegistrationFacts]:
    """The run's results and its registration's digests; refuses like ``show``."""
    if not is_run_dir(path):
        raise ControllerError(Code.JOURNAL_INVALID,
                              f"{path} is not a run directory: no {JOURNAL_NAME}")
    try:
        results = build_run_results(read_any_run(path))
        data = (Path(path) / REGISTRATION_NAME).read_bytes()
    except EfoldError as exc:  # which of the two runs' journals refused
        named = journal_refusal(path, exc)
        if named is None:
            raise
        raise ControllerError(exc.code, named) from exc
    except OSError as exc:  # a record that vanished or cannot be read meanwhile
        raise ControllerError(Code.RUN_RECORDS_INVALID,
                              f"{path}: {exc.strerror or 'unreadable'}") from exc
    # read_run checked these bytes against the plan; a registration replaced since then
    # is no longer the run's.
    if sha256_hex(data) != results.registration_sha256:
        raise ControllerError(Code.RUN_RECORDS_INVALID,
                              f"{path}: registration.json changed while it was read")
    try:
        reg = msgspec.json.decode(data, type=Registration)
    except msgspec.DecodeError as exc:
        raise ControllerError(Code.RUN_RECORDS_INVALID,
                              f"{path}: registration.json unreadable") from exc
    digests = {name: str(getattr(reg.digests, name)) for name in reg.digests.__struct_fields__}
    return results, RegistrationFacts(run=path, digests=digests)


@click.command("compare")
@click.argument("run_a", type=click.Path())
@click.argument("run_b", required=False, type=click.Path())
@click.option("--json", "as_json", is_flag=True,
              help="Print the comparison as one canonical JSON document.")
@latest_options
def command(run_a: str, run_b: str | None, latest: bool, root: str | None,
            as_json: bool) -> None:
    """Compare two runs slot by slot: what changed, paired accuracy, flips. Writes nothing.

    Slots are paired by slot id (repeat, role, trace, probe); slots in one plan only are
    counted, not compared. Per role and category: accuracy of A and B over the slots
    scored in both, the paired counts and the delta B - A in percentage points. Then the
    slots that flipped and the slots whose status changed (the text shows the first 20
    of each; --json lists them all). `--latest` takes the newest run under --root
    (./efold-runs) as RUN_B.

    \b
    Exit status:
      0  compared (whatever either run's status)
      2  usage error or refused: a RUN is not a run or its records refuse, --latest
         found none, or the two plans share no slot (compare_no_common_slots)
    """
    refuse_ = refusal_for(as_json)
    run_a = resolve_run(run_a, False, None, refuse_)
    run_b = resolve_run(run_b, latest, root, refuse_)
    try:
        results_a, facts_a = _run(os.fspath(run_a))
        results_b, facts_b = _run(run_b)
        comparison = compare_results(results_a, results_b, facts_a, facts_b)
    except EfoldError as exc:
        refuse_(exc.code.value, exc.detail)
    if as_json:
        click.echo(render_comparison_json(comparison).decode())
    else:
        for line in render_comparison_text(comparison):
            click.echo(line)
    if _one_chain(os.fspath(run_a), run_b):
        click.echo("note: both runs are links of one chain, each read as the whole chain: "
                   "they are the same results (`aggregate --no-chain` reads one link)",
                   err=True)


def _one_chain(run_a: str, run_b: str) -> bool:
    """Whether the two runs are links of one chain (``pilot --continue``)."""
    try:
        return is_chained(Path(run_a)) and chain_links(run_a) == chain_links(run_b)
    except EfoldError:
        return False
