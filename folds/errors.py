"""Errors of the fold layer: arms, plugins, the history store, the meter and snapshots.

Tree::

    EfoldError
    └── FoldError            every refusal of folds/; ``.code`` says which rule
        └── PluginError      a third-party fold (entry point or external command) misbehaved:
                             the plugin's fault, never efold's; the cause is in ``__cause__``

A lookup *response* error (bad cursor, unknown record) is not raised to the reader
loop: it becomes a fixed JSON error object the reader sees (see ``lookup.py``). These
classes are for the prep child, the probe child and the evaluator.
"""

from __future__ import annotations

from efold.errors import EfoldError


class FoldError(EfoldError):
    """A fold arm, the history store, the meter or a checkpoint snapshot refused."""


class PluginError(FoldError):
    """A plugin fold broke its contract (bad output, timeout, too much output, crash)."""
