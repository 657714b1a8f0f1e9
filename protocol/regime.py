"""A boundary case's fold regime as a prep task carries it (``efold.folds.regime`` folds
by it; a case's sidecar ``fold`` block names it)."""

from __future__ import annotations

from typing import Final, Literal

import msgspec

# As ``efold.folds.regime`` spells them (a layer beside this one, so not imported:
# tests/boundary/test_regime.py holds the two equal).
FoldMode = Literal["leaf", "root"]
FoldTarget = Literal["whole", "oldest-safe-span"]
LEAF: Final = "leaf"
WHOLE: Final = "whole"


class Regime(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``mode`` leaf (one fold) or root (a rebase); ``target`` whole (the whole session)
    or oldest-safe-span (its oldest span that closes cleanly, the rest kept verbatim)."""

    mode: FoldMode = "leaf"
    target: FoldTarget = "whole"

    @property
    def plain(self) -> bool:
        """Whether this is the plain regime: one fold of the whole session."""
        return self.mode == LEAF and self.target == WHOLE
