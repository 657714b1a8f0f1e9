"""Errors of the boundary layer: a case directory, its sidecar or the lock was refused.

Whose fault: the *author* of a case (its sidecar breaks the closed schema or a rule of
docs/boundary.md §2, a file it names is missing, its directory holds something that is no
regular file) or the *curator* of the lock (a case changed without a new version, a
version went back, a case is not locked yet). The code names the rule; ``detail`` names
the file and the field path (``$.oracle.success[1].type``) for a human at the terminal
and never enters a report.
"""

from __future__ import annotations

from efold.errors import EfoldError


class BoundaryError(EfoldError):
    """A boundary case or the lock broke a rule; ``code`` says which."""
