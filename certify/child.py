"""The certification child: ``python -I -m efold.certify.child FOLD OUT``.

Started by ``efold-controller certify`` through the contained runner
(``boundary.runner.run_contained``: its own session and process group, a minimal
environment, swept when it exits), in a private temporary directory ``OUT``. It loads
the fold (a built-in arm or an installed ``efold.folds`` entry point: the only place its
code runs), runs the endurance cycles and the maximal source (``endurance``) and writes
``fold.json`` last: the fold's declaration, or the code that refused to load it. It
decides nothing; the controller checks what it wrote.

Exit 0 when it wrote ``fold.json``; any other status means it did not finish.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from efold.certify.endurance import run_endurance, run_maximal
from efold.errors import EfoldError
from efold.folds.registry import get_fold


class FoldFacts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``fold.json``: what the child learnt of the fold."""

    name: str
    loaded: bool
    derives_from_source: bool = False  # the fold's own declaration
    error_code: str | None = None
    error: str | None = None


def declares_source_only(fold: object) -> bool:
    """Whether a fold declares that it derives its output from the source events only
    (``derives_from_source = True``), never from ``TracePrefix.prior``."""
    return getattr(fold, "derives_from_source", False) is True


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -I -m efold.certify.child FOLD OUT", file=sys.stderr)
        return 2
    name, out = argv[0], Path(argv[1])
    try:
        fold = get_fold(name)
    except EfoldError as exc:
        facts = FoldFacts(name=name, loaded=False, error_code=exc.code.value, error=str(exc))
    else:
        run_endurance(fold, out)
        run_maximal(fold, out)
        facts = FoldFacts(name=name, loaded=True, derives_from_source=declares_source_only(fold))
    (out / "fold.json").write_bytes(msgspec.json.encode(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
