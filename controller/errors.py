"""Errors of the controller.

::

    ControllerError     (efold.errors.EfoldError)  registration, plan, pilot, launch,
                        containment; ``code`` says which rule refused
"""

from __future__ import annotations

from efold.errors import EfoldError


class ControllerError(EfoldError):
    """The controller refused or failed; ``code`` is the fixed code a report prints."""
