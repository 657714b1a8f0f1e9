"""Errors of the controller.

::

    ControllerError     (efold.errors.EfoldError)  registration, plan, pilot, launch,
                        containment; ``code`` says which rule refused
    CampaignError       (efold.errors.EfoldError)  the campaign file (or a profile in it)
                        is not a valid campaign
"""

from __future__ import annotations

from efold.errors import EfoldError


class ControllerError(EfoldError):
    """The controller refused or failed; ``code`` is the fixed code a report prints."""


class CampaignError(EfoldError):
    """The campaign file is not a valid campaign (the operator's input)."""
