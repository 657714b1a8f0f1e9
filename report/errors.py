"""Errors of the report layer."""

from __future__ import annotations

from efold.errors import EfoldError


class ReportError(EfoldError):
    """The plan or the receipts handed to the report are not a consistent, content-free
    record of one run. The fault lies with whoever produced them (the controller or a
    tampered run directory), never with the reader being measured. ``code`` says which
    rule: ``receipt_duplicate``, ``receipt_unplanned`` or ``report_input_invalid``."""
