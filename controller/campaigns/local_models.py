"""Models on the command line: ``pilot --reader URL --model NAME [--summariser URL
--summariser-model NAME] [--server PRESET]`` on a bundled campaign or a ``--campaign``,
without writing a TOML or a catalog (the way ``inspect eval --model`` works).

Each model given becomes a profile of provider ``local`` (priced at zero by the bundled
catalog's wildcard entry: a loopback server bills nothing) with the server preset's API,
streaming and reply-limit field (``profiles.SERVER_PRESETS``; ``openai-compatible`` by
default, as for a local endpoint in a campaign file). The campaign's own profile for that caller is replaced; everything else of
the campaign stays, and the registration records the result (its ``campaign_sha256``
stays the file's, as a subset's does). A URL that is not loopback refuses: a model on
another machine is a paid route's business (a campaign file, ``register``, ``smoke``,
``pilot --real``).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from efold.controller.campaigns.campaign import Campaign, validate_campaign
from efold.controller.campaigns.profiles import (
    DEFAULT_LOCAL_SERVER,
    LOCAL_PROVIDER,
    ProfileTable,
    SummariserProfile,
    is_loopback_url,
    profile_from_table,
)
from efold.controller.errors import CampaignError
from efold.errors import Code


@dataclass(frozen=True)
class LocalModels:
    """The models given on the command line (None: the campaign's own)."""

    reader: tuple[str, str] | None = None  # (base URL, model name)
    summariser: tuple[str, str] | None = None
    server: str | None = None  # a preset name; None: openai-compatible

    def __bool__(self) -> bool:
        return self.reader is not None or self.summariser is not None


def _profile_table(url: str, model: str, server: str | None, what: str) -> ProfileTable:
    if not is_loopback_url(url):
        raise CampaignError(Code.CAMPAIGN_INVALID,
                            f"--{what} {url}: a model given on the command line must be on "
                            "this machine (127.0.0.0/8, ::1 or localhost); a remote or paid "
                            "model goes in a campaign file and runs with --real")
    return ProfileTable(provider=LOCAL_PROVIDER, model=model, base_url=url,
                        server=server or DEFAULT_LOCAL_SERVER)


def with_local_models(campaign: Campaign, models: LocalModels) -> Campaign:
    """``campaign`` with the command line's models in place of its own, validated as a
    campaign file would be."""
    changes: dict[str, object] = {}
    if models.reader is not None:
        changes["reader"] = profile_from_table(
            _profile_table(*models.reader, models.server, "reader"), "reader", None)
    if models.summariser is not None:
        summariser = profile_from_table(
            _profile_table(*models.summariser, models.server, "summariser"), "summariser", None)
        assert isinstance(summariser, SummariserProfile)
        changes["summariser"] = summariser
    changed = msgspec.structs.replace(campaign, **changes)
    validate_campaign(changed)
    return changed
