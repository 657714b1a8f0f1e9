"""The summariser seam: what a compaction asks a summariser for, and what it gets back.

``compaction.compact`` replaces the older part of a context by one summary and keeps a
recent tail. Whoever writes that summary is a ``Summariser``: the deterministic offline
one (``summariser.summarise``, the default of every compaction arm) or a model-backed one
(``model_summary.model_summariser``). Both return a ``SummaryLike``.

Invariants every summariser keeps, which ``compact`` relies on for its stats:

* ``previous`` is the summary the compacted head starts with (None on a first
  compaction); the new summary folds it in, so at most one summary is ever live;
* ``elided`` and ``results_cut`` are cumulative: the new summary's counts include
  ``previous``'s, so a compaction's own counts are the difference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from efold.corpus.model import Event


class SummaryLike(Protocol):
    """A compaction summary, whoever wrote it: rendered as one owner-channel message."""

    @property
    def elided(self) -> int:
        """Summarised messages (or entries) dropped whole to keep a size bound."""
        ...

    @property
    def results_cut(self) -> int:
        """Tool results whose middle was dropped before summarising."""
        ...

    def render(self) -> str:
        """The reader-visible text of the summary message."""
        ...

    def tokens(self) -> int:
        """The chars/4 estimate of ``render()``."""
        ...


# ``summariser(events, previous)``: the summary of ``events`` (session order) after
# ``previous`` (see the module docstring). May raise an ``EfoldError``; ``compact`` lets
# it propagate.
Summariser = Callable[[Sequence[Event], SummaryLike | None], SummaryLike]
