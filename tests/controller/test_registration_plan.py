"""Campaign validation, registration digests, the seeded schedule and the estimate."""

from __future__ import annotations

from pathlib import Path

import pytest

from efold.controller.campaign import bundled_campaign, parse_campaign
from efold.controller.errors import CampaignError
from efold.controller.plan import Estimate, estimate, plan_for
from efold.controller.registration import (
    RegistrationError,
    compute_registration,
    encode_registration,
    load_registration,
    write_registration,
)
from efold.errors import Code
from efold.registry.errors import RegistryError

BASE = """
name = "t"
suite = "original"
roles = ["native", "cold-rebuild", "ceiling"]
probe_limit = 3
selection_seed = 11
schedule_seed = 5
cap_usd = "50"
"""


def reg_of(text: str = BASE):  # type: ignore[no-untyped-def]
    return compute_registration(parse_campaign(text), text.encode())


@pytest.mark.parametrize(("edit", "needle"), [
    ('suite = "nowhere"', "suite"),
    ('roles = ["native", "native"]', "distinct"),
    ('roles = ["telepathy"]', "unknown arm"),
    ("repeats = 0", "repeats"),
    ('cap_usd = "-1"', "cap_usd"),
    ("concurrency = 2", "concurrency"),
    ("surprise = 1", "surprise"),
])
def test_invalid_campaigns_refuse_with_a_named_field(edit: str, needle: str) -> None:
    key = edit.split(" = ")[0]
    lines = [line for line in BASE.strip().splitlines() if not line.startswith(f"{key} =")]
    with pytest.raises(CampaignError) as err:
        parse_campaign("\n".join([*lines, edit]))
    assert err.value.code is Code.CAMPAIGN_INVALID
    assert needle in err.value.detail


def test_registration_is_deterministic_and_binds_every_digest(tmp_path: Path) -> None:
    a, b = reg_of(), reg_of()
    assert encode_registration(a) == encode_registration(b)
    path, sha = write_registration(a, tmp_path / "reg")
    loaded = load_registration(path, sha)
    assert loaded.registration == a and loaded.data == path.read_bytes()
    with pytest.raises(RegistrationError) as err:
        load_registration(path, "0" * 64)
    assert err.value.code is Code.REGISTRATION_DIGEST_MISMATCH
    with pytest.raises(RegistryError) as taken:  # never overwritten
        write_registration(a, tmp_path / "reg")
    assert taken.value.code is Code.PUBLISH_TARGET_EXISTS
    # A different selection seed is a different registration.
    other = reg_of(BASE.replace("selection_seed = 11", "selection_seed = 12"))
    assert other.digests.selection != a.digests.selection


def test_a_changed_build_refuses_the_registration(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import efold.controller.registration as registration

    path, sha = write_registration(reg_of(), tmp_path / "reg")
    monkeypatch.setattr(registration, "build_digest", lambda root=None: "e" * 64)
    with pytest.raises(RegistrationError) as err:
        load_registration(path, sha)
    assert err.value.code is Code.REGISTRATION_DIGEST_MISMATCH


def test_schedule_interleaves_every_role_inside_each_block() -> None:
    plan = plan_for(reg_of())
    roles = 3
    assert len(plan.slots) == 4 * 3 * roles
    for i in range(0, len(plan.slots), roles):
        block = plan.slots[i:i + roles]
        assert len({(s.trace_id, s.probe_id) for s in block}) == 1
        assert {s.role for s in block} == {"native", "cold-rebuild", "ceiling"}
    # seeded: the same registration always gives the same schedule digest
    assert plan_for(reg_of()).schedule_sha256 == plan.schedule_sha256
    reseeded = plan_for(reg_of(BASE.replace("schedule_seed = 5", "schedule_seed = 6")))
    assert reseeded.schedule_sha256 != plan.schedule_sha256
    # probe_limit keeps three probes per trace
    assert {len({s.probe_id for s in plan.slots if s.trace_id == t})
            for t in {s.trace_id for s in plan.slots}} == {3}


def test_ceiling_on_the_original_suite_is_inventory_infeasible() -> None:
    plan = plan_for(reg_of())
    assert {s.eligible for s in plan.slots if s.arm == "ceiling"} == {False}
    assert {s.eligible for s in plan.slots if s.arm != "ceiling"} == {True}


def test_native_on_a_hard_trace_is_found_infeasible_by_its_prep_child() -> None:
    """The plan runs no fold code, so it cannot know; the contained prep children that
    build the checkpoints (``plan``, ``preflight``, ``pilot``) find the native
    checkpoint's first request above the input envelope."""
    from efold.controller.preflight import run_preflight
    from efold.controller.registration import encode_registration

    text = BASE.replace('suite = "original"', 'suite = "hard"\nseeds = [101]').replace(
        '"ceiling"]', '"store"]')
    reg = reg_of(text)
    plan = plan_for(reg)
    assert {s.eligible for s in plan.slots} == {True}
    report = run_preflight(reg, encode_registration(reg))
    native = {s.checkpoint for s in plan.slots if s.arm == "native"}
    assert native and report.infeasible() == native
    est = estimate(plan, expected_units_per_slot=1, max_requests=10,
                   infeasible=report.infeasible())
    assert est.skipped_slots == sum(1 for s in plan.slots if s.arm == "native")


def test_estimate_is_exact_integer_arithmetic() -> None:
    reg, _ = bundled_campaign("default")
    plan = plan_for(compute_registration(reg, b""))
    est = estimate(plan, expected_units_per_slot=2_312_172, max_requests=10)
    assert est.eligible_slots == 260 and est.expected_units == 260 * 2_312_172
    assert est.rmax_units == 78_400_000
    assert est.full_upfront_units == 260 * 10 * 78_400_000
    assert est.cap_minus_rmax_units == plan.cap_units - 78_400_000
    scaled = plan.cap_units * 1_000_000 // est.expected_units
    assert est.cap_over_expected == f"{scaled // 1_000_000}.{scaled % 1_000_000:06d}"
    # A cap below Rmax is refused at register, so the plan no longer reports one.
    assert "admits_nothing" not in Estimate.__struct_fields__


def test_a_hand_edited_and_rehashed_registration_refuses(tmp_path: Path) -> None:
    """Raising the cap in the file and re-hashing it is not a registration."""
    import hashlib
    import json

    path, _ = write_registration(reg_of(), tmp_path / "reg")
    doc = json.loads(path.read_bytes())
    doc["cap_units"] = 10**15
    forged = tmp_path / "forged.json"
    forged.write_bytes(json.dumps(doc).encode())
    with pytest.raises(RegistrationError) as err:
        load_registration(forged, hashlib.sha256(forged.read_bytes()).hexdigest())
    assert err.value.code is Code.REGISTRATION_DIGEST_MISMATCH
