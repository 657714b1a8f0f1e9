"""What a campaign declares of its design (``controller.campaigns.design`` checks it):
the guidance file a role's instructions come from, and the comparisons between roles,
with the checks of their shape that need nothing but the campaign file."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import msgspec

from efold.controller.errors import CampaignError
from efold.digests import sha256_hex
from efold.errors import Code


class Guidance(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where a role's instructions came from: the guidance file as the campaign named it
    (a report label) and the sha256 of its bytes, checked when the campaign was read."""

    path: str
    sha256: str


class DesignSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One declared comparison: ``roles`` = (base, treatment), what ``differs``, and for
    a build comparison the ``paths`` the treatment may change and its ``witness``."""

    roles: list[str]
    differs: Literal["build", "guidance"]
    paths: list[str] = []
    witness: str | None = None


MAX_GUIDANCE_BYTES = 64 * 1024


def read_guidance(named: str, sha256: str, base_dir: Path | None) -> tuple[str, Guidance]:
    """A role's instructions from the guidance file ``named`` (relative: to the campaign
    file's directory): UTF-8 text, not empty, at most ``MAX_GUIDANCE_BYTES``, whose bytes
    have the sha256 the campaign gives (else ``guidance_digest_mismatch``: a frozen
    prompt that moved is never run as if it had not)."""
    sha256 = sha256.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise CampaignError(Code.CAMPAIGN_INVALID,
                            f"guidance_sha256 {sha256!r}: 64 lowercase hex digits")
    path = (base_dir or Path.cwd()) / named
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_GUIDANCE_BYTES + 1)
    except OSError as exc:
        raise CampaignError(Code.CAMPAIGN_INVALID,
                            f"guidance {named!r}: cannot read {path} ({exc.strerror})") from exc
    if len(data) > MAX_GUIDANCE_BYTES:
        raise CampaignError(Code.CAMPAIGN_INVALID,
                            f"guidance {named!r}: over {MAX_GUIDANCE_BYTES} bytes")
    actual = sha256_hex(data)
    if actual != sha256:
        raise CampaignError(Code.GUIDANCE_DIGEST_MISMATCH,
                            f"guidance {named!r} ({path}) has sha256 {actual}, the campaign "
                            f"says {sha256}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CampaignError(Code.CAMPAIGN_INVALID, f"guidance {named!r}: not UTF-8") from exc
    if not text.strip() or "\0" in text:
        raise CampaignError(Code.CAMPAIGN_INVALID,
                            f"guidance {named!r} is empty or holds a NUL (not a prompt)")
    return text, Guidance(path=named, sha256=sha256)


def _inside(path: str) -> bool:
    """A relative, normalised file path that stays inside its tree."""
    return (bool(path) and "\0" not in path and not path.startswith("/")
            and posixpath.normpath(path) == path and not path.startswith(".."))


def validate_design(role_names: Sequence[str], design: Sequence[DesignSpec]) -> None:
    """The declarations' shape (``campaign_invalid``): two distinct roles of the campaign,
    ``paths`` given for a build and only there, and no pair declared twice."""
    names = set(role_names)
    seen: set[tuple[str, str]] = set()
    for spec in design:
        where = f"design {spec.roles}"
        if len(spec.roles) != 2 or spec.roles[0] == spec.roles[1]:
            raise CampaignError(Code.CAMPAIGN_INVALID, f"{where}: two distinct roles")
        unknown = [r for r in spec.roles if r not in names]
        if unknown:
            raise CampaignError(Code.CAMPAIGN_INVALID, f"{where}: not roles of the campaign: "
                                                       f"{unknown}")
        pair = (min(spec.roles), max(spec.roles))
        if pair in seen:
            raise CampaignError(Code.CAMPAIGN_INVALID, f"{where}: declared twice")
        seen.add(pair)
        if spec.differs == "build":
            if not spec.paths or not all(_inside(p) for p in spec.paths):
                raise CampaignError(Code.CAMPAIGN_INVALID,
                                    f"{where}: a build comparison names the files the "
                                    "treatment may change (paths: files relative to its "
                                    "build, as keep.py or sub/fold.py, never leaving it)")
            if spec.witness is not None and not spec.witness.strip():
                raise CampaignError(Code.CAMPAIGN_INVALID, f"{where}: an empty witness")
        elif spec.paths or spec.witness is not None:
            raise CampaignError(Code.CAMPAIGN_INVALID,
                                f"{where}: paths and witness belong to a build comparison")
