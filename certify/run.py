"""``certify(FOLD)``: run the certification child contained, then check what it wrote.

The fold's code runs only in the child (``certify.child``), started by the contained
runner in a private temporary directory that is removed afterwards: its own session and
process group, a minimal environment, nothing left alive when it exits or times out.
This process never imports the fold. A built-in arm or an installed entry point may be
certified; the name is resolved without loading any plugin.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Final

import msgspec

from efold.boundary.runner import run_contained
from efold.certify.checks import check_endurance, check_maximal, read_bounded
from efold.certify.child import FoldFacts
from efold.certify.report import REPORT_FORMAT, CertificationReport, PartNotRun
from efold.errors import Code, EfoldError
from efold.folds.errors import FoldError
from efold.folds.registry import BUILTIN_ARMS, makes_opaque, plugin_arms

DEFAULT_TIMEOUT_S: Final = 900.0
_NOT_YET: Final = "not part of this build's certification yet"


class CertifyError(EfoldError):
    """The certification could not be made (the child did not finish, or its files do not
    read back); no verdict on the fold."""


def fold_kind(name: str) -> str:
    """``built-in arm`` or ``installed entry point``; ``fold_unknown`` otherwise, and
    ``certify_not_applicable`` for a provider-compaction arm, whose summary is opaque
    provider items that no check can read."""
    if makes_opaque(name):
        raise CertifyError(Code.CERTIFY_NOT_APPLICABLE,
                           f"{name} keeps its summary as opaque provider items: certification "
                           "reads what a reader is shown, and this fold shows none of it")
    if name in BUILTIN_ARMS:
        return "built-in arm"
    if name in plugin_arms()[0]:
        return "installed entry point"
    raise FoldError(Code.FOLD_UNKNOWN, f"no built-in arm or installed entry point named {name!r}")


def _facts(out: Path) -> FoldFacts:
    try:
        return msgspec.json.decode(read_bounded(out / "fold.json"), type=FoldFacts)
    except msgspec.DecodeError as exc:
        raise CertifyError(Code.CERTIFY_SESSION_INVALID, f"fold.json: {exc}") from exc


def certify(name: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> CertificationReport:
    """Certify the fold ``name`` (module docstring)."""
    kind = fold_kind(name)
    with tempfile.TemporaryDirectory(prefix="efold-certify-") as tmp:
        out = Path(tmp)
        result = run_contained(["python", "-I", "-m", "efold.certify.child", name, str(out)],
                               out, timeout_s=timeout_s)
        if result.timed_out or result.exit_code != 0 or not (out / "fold.json").is_file():
            status = "timed out" if result.timed_out else f"exit {result.exit_code}"
            raise CertifyError(Code.CERTIFY_CHILD_FAILED,
                               f"the certification child did not finish ({status}): "
                               f"{result.stdout[-2000:].strip()}")
        facts = _facts(out)
        if not facts.loaded:
            raise FoldError(Code(facts.error_code or Code.FOLD_PLUGIN_INVALID.value),
                            facts.error or f"{name} does not load")
        endurance = check_endurance(out, facts.derives_from_source)
        maximal = check_maximal(out)
    failed = [c.name for c in endurance.checks if not c.passed]
    if not endurance.sizes.passed:
        failed.append("growth")
    failed += [f"fixture:{f.shape}" for f in endurance.fixtures if f.status != "passed"]
    if not maximal.passed:
        failed.append("maximal")
    return CertificationReport(
        format=REPORT_FORMAT, fold=name, kind=kind, passed=not failed, complete=False,
        failed=failed, endurance=endurance, maximal=maximal,
        memory=PartNotRun(status="not_run", reason=_NOT_YET),
        continuation=PartNotRun(status="not_run", reason=_NOT_YET))
