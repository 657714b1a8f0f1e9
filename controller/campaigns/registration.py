"""Registration: freeze a campaign into ``registration.json`` and bind every digest.

Every later command takes ``--registration FILE --sha256 SHA`` and re-verifies: the file's
bytes hash to SHA, and the corpus, build, catalog, policy, reader, selection and folds
digests recomputed *now* equal the registered ones. A changed module, catalog or trace
is a new registration, never a silent drift; so is a changed fold that is not efold's
own code (an entry-point plugin's installed files or version, an external command's
program or script): ``folds`` pins every role's fold (``efold.folds.pinning``).

A registration may be a **subset** of its campaign (``controller.campaigns.subset``): it then
records the subset, holds the campaign with only the kept roles, and selects only the
kept traces, probes and schedule blocks; ``campaign_sha256`` stays the campaign file's.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import msgspec
from msgspec import UNSET, UnsetType

from efold.boundary.suite import cases_digest, is_case
from efold.controller.campaigns import stops
from efold.controller.campaigns.campaign import (
    Campaign,
    campaign_cases,
    campaign_items,
    cap_units,
    validate_campaign,
)
from efold.controller.campaigns.design import check_build_digests, check_design
from efold.controller.campaigns.judge_profile import judge_document
from efold.controller.campaigns.profiles import profile_catalog, profile_rmax_units
from efold.controller.campaigns.subset import Subset, merge, narrow_campaign, narrow_selection
from efold.controller.errors import CampaignError
from efold.corpus import SuiteItem, corpus_digest, trace_digest
from efold.digests import build_digest, canonical_json, digest_of, sha256_hex
from efold.errors import Code, EfoldError
from efold.folds.errors import FoldError
from efold.folds.pinning import fold_identity
from efold.folds.probe_modes import RECALL_ONLY
from efold.guard import contract_policy
from efold.input_files import REGISTRATION_LIMIT, InputFileError, read_input
from efold.protocol.records import DesignRecord
from efold.registry import make_private_dir, publish_exclusive
from efold.worker import faux_reader

REGISTRATION_VERSION = 1
REGISTRATION_NAME = "registration.json"
SELECTION_ALGORITHM = "seeded-sha256-rank-v1"


class RegistrationError(EfoldError):
    """A registration is missing, altered, or no longer matches the code or corpus."""


class Digests(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    corpus: str
    build: str
    catalog: str
    policy: str
    reader: str
    selection: str
    folds: str  # digest of every role's fold identity, in role order (folds_document)


class SelectedTrace(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    trace_id: str
    trace_sha256: str
    probe_ids: list[str]


class Registration(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    campaign: Campaign
    campaign_sha256: str  # of the raw campaign file bytes
    digests: Digests
    cap_units: int
    rmax_units: int
    selection: list[SelectedTrace]
    selection_algorithm: str = SELECTION_ALGORITHM
    version: int = REGISTRATION_VERSION
    # Invariant: UNSET (never encoded) unless this is a subset, so that a registration
    # without one keeps the bytes it had before subsets existed. With one, ``campaign``
    # holds only the kept roles and ``selection`` only the kept traces and probes.
    subset: Subset | UnsetType = UNSET
    # The campaign's declared comparisons as checked at register, with their digests
    # (``controller.campaigns.design``); UNSET (never encoded) without a design.
    design: list[DesignRecord] | UnsetType = UNSET


def subset_of(reg: Registration) -> Subset | None:
    """The registration's subset, or None when it registers its whole campaign."""
    return reg.subset if isinstance(reg.subset, Subset) else None


def rank_key(seed: int, *parts: str) -> str:
    """The seeded ordering used for selection and schedule: sha256 of ``seed:parts``."""
    return hashlib.sha256(":".join([str(seed), *parts]).encode()).hexdigest()


def select_probes(campaign: Campaign, items: Sequence[SuiteItem]) -> list[SelectedTrace]:
    """The campaign's traces (``traces``, else every trace of the suite), each with its
    probes (the seeded ``probe_limit`` of them, when given). A named trace the suite
    does not have refuses with ``campaign_invalid``, naming the ones it has."""
    ids = [item.trace.header.trace_id for item in items]
    unknown = [t for t in campaign.traces if t not in ids]
    if unknown:
        raise CampaignError(Code.CAMPAIGN_INVALID, f"traces {unknown} are not in suite "
                            f"{campaign.suite!r} (its traces: {', '.join(ids)})")
    selected: list[SelectedTrace] = []
    for item in items:
        trace_id = item.trace.header.trace_id
        probe_ids = [p.id for p in item.probes.probes]
        if is_case(item):  # a boundary case: always, its one continuation
            selected.append(SelectedTrace(trace_id, trace_digest(item.trace), probe_ids))
            continue
        if campaign.traces and trace_id not in campaign.traces:
            continue
        if campaign.probe_limit is not None:
            ranked = sorted(probe_ids, key=lambda pid: rank_key(campaign.selection_seed, trace_id, pid))
            keep = set(ranked[: campaign.probe_limit])
            probe_ids = [pid for pid in probe_ids if pid in keep]
        selected.append(SelectedTrace(trace_id, trace_digest(item.trace), probe_ids))
    return selected


def policy_document(campaign: Campaign) -> dict[str, object]:
    """Every rule a run is judged by, as data: its digest is the policy digest."""
    return {
        "guard": contract_policy(),
        "budgets": msgspec.to_builtins(campaign.budgets),
        "deadlines": msgspec.to_builtins(campaign.deadlines),
        "stops": {
            "repeated_loss": stops.REPEATED_LOSS_LIMIT,
            "invalid_rate_percent": stops.INVALID_RATE_LIMIT_PERCENT,
        },
        "concurrency": campaign.concurrency,
    }


def reader_document(campaign: Campaign) -> dict[str, object]:
    """The reader and summariser routes (profiles, the summariser's catalog digest: the
    reader's is ``Digests.catalog``), the roles' instructions, and the judge when the
    campaign has one (its profile, catalog digest, template sha256 and rubric:
    ``judge_profile.judge_document``)."""
    doc: dict[str, object] = {"reader": msgspec.to_builtins(campaign.reader)}
    doc["roles"] = [msgspec.to_builtins(r) for r in campaign.roles]
    if campaign.summariser is not None:
        doc["summariser"] = msgspec.to_builtins(campaign.summariser)
        doc["summariser_catalog_sha256"] = profile_catalog(campaign.summariser).digest
    if campaign.judge is not None:  # absent without a judge: those bytes stay as they were
        doc.update(judge_document(campaign.judge))
    if campaign.reader.provider == "faux":
        doc["faux_reader_sha256"] = sha256_hex(Path(faux_reader.__file__).read_bytes())
    return doc


def folds_document(campaign: Campaign) -> list[dict[str, object]]:
    """Per role, in order, the identity of the code its fold runs; a fold that cannot be
    pinned refuses with ``campaign_invalid`` naming the role."""
    doc: list[dict[str, object]] = []
    for role in campaign.roles:
        try:
            doc.append(fold_identity(role))
        except FoldError as exc:
            raise CampaignError(Code.CAMPAIGN_INVALID,
                                f"role {role.name!r}: cannot pin its fold: {exc.detail}") from exc
    return doc


def verify_fold_pins(reg: Registration) -> None:
    """``registration_digest_mismatch`` unless every role's fold still derives the
    registered ``folds`` digest (``campaign_invalid`` if a fold can no longer be pinned)."""
    if digest_of(folds_document(reg.campaign)) != reg.digests.folds:
        raise RegistrationError(Code.REGISTRATION_DIGEST_MISMATCH,
                                "folds digest changed since registration: a role's fold "
                                "code (its program, argument files or build tree) differs "
                                "from what was registered; restore it, or register again "
                                "to run the fold as it is now")


def compute_registration(campaign: Campaign, raw: bytes,
                         subset: Subset | None = None) -> Registration:
    """Freeze a campaign, or the ``subset`` of it (``controller.campaigns.subset``). It is
    validated again here, cap against Rmax included, so a ``Campaign`` built in code
    cannot register what a campaign file could not. A campaign built in code without a
    probe mode registers under the default, recall-only: a registration always says."""
    if isinstance(campaign.probe_mode, UnsetType):
        campaign = msgspec.structs.replace(campaign, probe_mode=RECALL_ONLY)
    validate_campaign(campaign)
    cases = campaign_cases(campaign)
    items = campaign_items(campaign, cases)  # every item validated by its loader
    selection = select_probes(campaign, items)
    if subset is not None:
        campaign, subset = narrow_campaign(campaign, subset)
        selection, subset = _narrow(campaign, selection, subset)
    check_build_digests(campaign.roles)
    design = check_design(campaign.roles, campaign.design)
    digests = Digests(
        corpus=corpus_digest(items) if campaign.boundary is None
        else digest_of([corpus_digest(items), cases_digest(cases)]),
        build=build_digest(),
        catalog=profile_catalog(campaign.reader).digest,
        policy=digest_of(policy_document(campaign)),
        reader=digest_of(reader_document(campaign)),
        selection=digest_of([SELECTION_ALGORITHM, campaign.selection_seed, selection]),
        folds=digest_of(folds_document(campaign)),
    )
    return Registration(
        campaign=campaign,
        campaign_sha256=sha256_hex(raw),
        digests=digests,
        cap_units=cap_units(campaign),
        rmax_units=profile_rmax_units(campaign.reader),
        selection=selection,
        subset=UNSET if subset is None else subset,
        design=design or UNSET,
    )


def _narrow(campaign: Campaign, selection: list[SelectedTrace],
            subset: Subset) -> tuple[list[SelectedTrace], Subset]:
    # The schedule's block order of repeat 1, exactly as ``plan.build_plan`` sorts it.
    seed = campaign.schedule_seed
    sha = {t.trace_id: t.trace_sha256 for t in selection}
    kept, subset = narrow_selection([(t.trace_id, t.probe_ids) for t in selection], subset,
                                    lambda t, p: rank_key(seed, "1", t, p), campaign.name)
    return [SelectedTrace(t, sha[t], probes) for t, probes in kept], subset


def subset_registration(reg: Registration, subset: Subset) -> Registration:
    """A new registration: the verified ``reg`` narrowed further by ``subset``, exactly
    what registering ``reg``'s campaign file with both subsets at once would make (same
    bytes, same sha256). ``subset``'s ids must be in ``reg`` (``subset_unknown``)."""
    merged = merge(subset_of(reg), [(t.trace_id, t.probe_ids) for t in reg.selection],
                   subset, reg.campaign.name)
    fresh = compute_registration(reg.campaign, b"", merged)
    return msgspec.structs.replace(fresh, campaign_sha256=reg.campaign_sha256)


def encode_registration(reg: Registration) -> bytes:
    return canonical_json(reg) + b"\n"


def write_registration(reg: Registration, output_dir: str | os.PathLike[str]) -> tuple[Path, str]:
    """Publish ``registration.json`` exclusively (never overwrite); returns path and sha256."""
    out = Path(output_dir)
    make_private_dir(out, parents=True)
    data = encode_registration(reg)
    publish_exclusive(out, REGISTRATION_NAME, data)
    return out / REGISTRATION_NAME, sha256_hex(data)


class LoadedRegistration(msgspec.Struct, frozen=True):
    """A verified registration and the exact bytes that were verified (read once)."""

    registration: Registration
    data: bytes


def load_registration(path: str | os.PathLike[str], sha256: str) -> LoadedRegistration:
    """Read a registration once, check its sha256, re-validate its campaign and re-derive
    *everything* it freezes (digests, selection, cap, Rmax): a registration edited and
    re-hashed by hand, or made stale by a code, catalog or corpus change, refuses."""
    name = os.fspath(path)
    try:
        data = read_input(path, what="registration", limit=REGISTRATION_LIMIT)
    except InputFileError as exc:
        if exc.code is not Code.INPUT_FILE_UNREADABLE:
            raise  # a device, a FIFO, a directory, too large: its own code
        raise RegistrationError(Code.REGISTRATION_INVALID, exc.detail) from exc
    if sha256_hex(data) != sha256.strip().lower():
        raise RegistrationError(Code.REGISTRATION_DIGEST_MISMATCH,
                                f"{name}: its sha256 is not {sha256.strip()}")
    if not data.strip():
        raise RegistrationError(Code.REGISTRATION_INVALID, f"{name} is empty")
    try:
        reg = msgspec.json.decode(data, type=Registration)
    except msgspec.DecodeError as exc:
        raise RegistrationError(Code.REGISTRATION_INVALID,
                                f"{name} is not a registration: {exc}") from exc
    try:
        validate_campaign(reg.campaign)
        # The folds first: a fold changed since registering (its program, its argument
        # files, its build tree) is a stale registration, whatever else it now breaks.
        verify_fold_pins(reg)
        fresh = compute_registration(reg.campaign, b"", subset_of(reg))
    except CampaignError as exc:
        raise RegistrationError(Code.REGISTRATION_INVALID, exc.detail) from exc
    for name in Digests.__struct_fields__:
        if getattr(fresh.digests, name) != getattr(reg.digests, name):
            raise RegistrationError(
                Code.REGISTRATION_DIGEST_MISMATCH, f"{name} digest changed since registration"
            )
    if msgspec.structs.replace(fresh, campaign_sha256=reg.campaign_sha256) != reg:
        raise RegistrationError(Code.REGISTRATION_DIGEST_MISMATCH,
                                "registration differs from what its campaign derives")
    return LoadedRegistration(reg, data)


def registration_sha256(reg: Registration) -> str:
    return sha256_hex(encode_registration(reg))
