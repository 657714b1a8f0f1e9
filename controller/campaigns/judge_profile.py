"""The optional judge profile (a campaign's ``[judge]``): who scores the answers besides
the deterministic scorer, on which rubric, and what it may cost.

A judge is a provider profile (``controller.campaigns.profiles``: the faux provider or an
OpenAI-compatible endpoint, priced by its catalog) plus ``rubric`` (the dimensions it
scores, each 0-5; default the field's six, ``worker.judge.DEFAULT_RUBRIC``) and
``pass_threshold`` (an answer passes when its mean score is at least this, 1-5).

Invariants:
- It makes exactly one request per answered slot (``JUDGE_MAX_REQUESTS``), a caller of
  its own route (``judge_terms``), admitted under the campaign's one cap; the cap must
  fit its Rmax as it fits the reader's (``campaign.cap_units``).
- Its profile, its catalog's digest, its template's sha256 and its rubric are part of
  the registration's ``reader`` digest (``judge_document``), present only when a judge
  is configured, so a registration without one keeps its bytes.
- The judge never replaces the deterministic score: it adds a column beside it.

Every refusal is ``campaign_invalid`` naming the field (an unpriced model:
``lookup_invalid_rate``), as for the other profiles.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import msgspec

from efold.controller.campaigns.profiles import (
    FAUX_PROVIDER,
    Profile,
    ProfileTable,
    caller_terms,
    profile_catalog,
    profile_from_table,
    validate_profile,
)
from efold.controller.errors import CampaignError
from efold.digests import sha256_hex
from efold.errors import Code
from efold.guard.ledger import CallerTerms
from efold.worker import judge
from efold.worker.judge import DEFAULT_RUBRIC, JUDGE_TEMPLATE_VERSION, SCORE_MAX, template_sha256

JUDGE_MAX_REQUESTS: Final = 1  # one judge request per answered slot
DEFAULT_PASS_THRESHOLD: Final = 3
MAX_DIMENSIONS: Final = 12
# A dimension is an id in every report: lowercase, digits and _ (an ``OPAQUE_ID``).
_DIMENSION = re.compile(r"[a-z][a-z0-9_]{0,39}")


class JudgeProfile(Profile, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The judge model's profile: a route like the reader's, with its rubric."""

    rubric: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_RUBRIC))
    pass_threshold: int = DEFAULT_PASS_THRESHOLD


class JudgeTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A ``[judge]`` table as written: a profile table's keys (``[reader]``'s), plus
    ``rubric`` and ``pass_threshold``."""

    provider: str
    model: str | None = None
    api: str = "responses"
    base_url: str | None = None
    effort: str | None = None
    stream: bool = True
    credential_env: str | None = None
    catalog: str | None = None
    max_output_tokens: int | None = None
    max_tokens_field: str = "max_completion_tokens"
    rubric: list[str] | None = None
    pass_threshold: int | None = None


def _invalid(detail: str) -> CampaignError:
    return CampaignError(Code.CAMPAIGN_INVALID, detail)


def judge_from_table(table: JudgeTable | None, base_dir: Path | None) -> JudgeProfile | None:
    """A written ``[judge]`` table, resolved (None: no judge)."""
    if table is None:
        return None
    fields = msgspec.structs.asdict(table)
    rubric = fields.pop("rubric")
    threshold = fields.pop("pass_threshold")
    profile = profile_from_table(ProfileTable(**fields), "judge", base_dir)
    assert profile is not None  # a table was given
    return JudgeProfile(**msgspec.structs.asdict(profile),
                        rubric=list(DEFAULT_RUBRIC) if rubric is None else list(rubric),
                        pass_threshold=DEFAULT_PASS_THRESHOLD if threshold is None else threshold)


def validate_judge(p: JudgeProfile) -> None:
    """A judge names a priced route, a rubric of distinct dimension ids and a threshold
    within the score range."""
    validate_profile(p, "judge")
    if not 1 <= len(p.rubric) <= MAX_DIMENSIONS:
        raise _invalid(f"judge.rubric must name 1-{MAX_DIMENSIONS} dimensions")
    if len(set(p.rubric)) != len(p.rubric):
        raise _invalid("judge.rubric dimensions must be distinct")
    for dim in p.rubric:
        if not _DIMENSION.fullmatch(dim):
            raise _invalid(f"judge.rubric: {dim!r} is not a dimension id (lowercase "
                           "letters, digits and _, starting with a letter, max 40)")
    if not 1 <= p.pass_threshold <= SCORE_MAX:
        raise _invalid(f"judge.pass_threshold must be 1-{SCORE_MAX}")


def judge_document(p: JudgeProfile) -> dict[str, object]:
    """What the registration binds of a judge (part of the ``reader`` digest): the
    profile, its catalog's digest, the template's version and sha256, the rubric and
    threshold written out in full (defaults included), and the faux judge's code when
    the judge is faux (its scores are that code's)."""
    doc: dict[str, object] = {
        "judge": msgspec.to_builtins(p),
        "judge_catalog_sha256": profile_catalog(p).digest,
        "judge_template": JUDGE_TEMPLATE_VERSION,
        "judge_template_sha256": template_sha256(),
        "judge_rubric": list(p.rubric),
        "judge_pass_threshold": p.pass_threshold,
    }
    if p.provider == FAUX_PROVIDER:
        doc["faux_judge_sha256"] = sha256_hex(Path(judge.__file__).read_bytes())
    return doc


def judge_terms(p: JudgeProfile) -> CallerTerms:
    """What the permit source holds the judge's requests of one slot to: its Rmax, one
    request, its catalog's prices (a ledger key of its own: ``<slot>#judge``)."""
    return caller_terms(p, JUDGE_MAX_REQUESTS)
