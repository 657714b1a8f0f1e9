"""Errors of the durable-state layer."""

from __future__ import annotations

from efold.errors import EfoldError


class RegistryError(EfoldError):
    """Durable files, the run lease, the journal, authorizations or the burn registry
    refused. ``code`` says which rule."""
