"""Errors of the corpus layer: a trace, a probe file or a suite request was refused.

Whose fault: the *author* of a trace or probe file (schema, shape, placement and leak
rules), or the *caller* (an unknown suite, a seed outside the allowed range). The code
names the rule; ``detail`` is for a human at the terminal and never enters a report.
"""

from __future__ import annotations

from efold.errors import EfoldError


class CorpusError(EfoldError):
    """A trace, probe file or suite request broke a corpus rule; ``code`` says which."""
