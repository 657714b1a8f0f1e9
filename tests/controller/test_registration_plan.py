"""Campaign validation, registration digests, the seeded schedule and the estimate."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from efold.controller.campaigns.campaign import bundled_campaign, parse_campaign
from efold.controller.campaigns.plan import Estimate, estimate, plan_for
from efold.controller.campaigns.registration import (
    RegistrationError,
    compute_registration,
    encode_registration,
    load_registration,
    write_registration,
)
from efold.controller.errors import CampaignError
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
    ("concurrency = 0", "concurrency"),
    ("concurrency = 33", "concurrency"),
    ("surprise = 1", "surprise"),
])
def test_invalid_campaigns_refuse_with_a_named_field(edit: str, needle: str) -> None:
    key = edit.split(" = ")[0]
    lines = [line for line in BASE.strip().splitlines() if not line.startswith(f"{key} =")]
    with pytest.raises(CampaignError) as err:
        parse_campaign("\n".join([*lines, edit]))
    assert err.value.code is Code.CAMPAIGN_INVALID
    assert needle in err.value.detail


@pytest.mark.parametrize("n", [1, 32])
def test_concurrency_accepts_one_to_thirty_two_and_binds_the_policy(n: int) -> None:
    lines = [line for line in BASE.strip().splitlines() if not line.startswith("concurrency =")]
    text = "\n".join([*lines, f"concurrency = {n}"])
    reg = compute_registration(parse_campaign(text), text.encode())
    assert reg.campaign.concurrency == n
    # The approver signs the policy, concurrency included; the schedule never moves.
    assert (reg.digests.policy == reg_of().digests.policy) is (n == 1)


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
    import efold.controller.campaigns.registration as registration

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
    from efold.controller.campaigns.registration import encode_registration
    from efold.controller.pilot.preflight import run_preflight

    text = BASE.replace('suite = "original"', 'suite = "hard"\nseeds = [101]').replace(
        '"ceiling"]', '"pack"]')
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
    reg, _ = bundled_campaign("original")
    plan = plan_for(compute_registration(reg, b""))
    est = estimate(plan, expected_units_per_slot=2_312_172, max_requests=10)
    assert est.eligible_slots == 208 and est.expected_units == 208 * 2_312_172
    assert est.rmax_units == 78_400_000
    assert est.full_upfront_units == 208 * 10 * 78_400_000
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


# A summarising role (compaction-2: two summary requests per checkpoint), one that never
# summarises (native) and one ineligible on the original suite (ceiling), with a
# summariser model and the faux judge.
SUMMARISED = BASE.replace('"cold-rebuild"', '"compaction-2"') + """
[summariser]
provider = "openai"
model = "gpt-5-mini"
base_url = "https://api.openai.com/v1"
credential_env = "OPENAI_API_KEY"
[judge]
provider = "faux"
"""


def _reader_units_per_slot(reg) -> int:  # type: ignore[no-untyped-def]
    from efold.controller.campaigns.profiles import profile_catalog
    from efold.guard.estimate import expected_slot_units

    reader = reg.campaign.reader
    return expected_slot_units(reader.provider, reader.model, catalog=profile_catalog(reader))


def test_the_estimate_sums_a_reader_a_summariser_and_a_judge_line() -> None:
    from efold.controller.campaigns.plan import (
        SUMMARY_INPUT_TOKENS,
        SUMMARY_OUTPUT_TOKENS,
        judge_input_tokens,
        plan_estimate,
    )
    from efold.controller.campaigns.profiles import profile_catalog
    from efold.guard.estimate import ASSUMED_SCENARIO, expected_request_units

    reg = reg_of(SUMMARISED)
    c = reg.campaign
    assert c.summariser is not None and c.judge is not None
    plan = plan_for(reg)
    est = plan_estimate(reg, plan)
    lines = est.expected_lines()
    assert list(lines) == ["reader", "summariser", "judge"]
    assert sum(lines.values()) == est.expected_units
    # reader: as before, every eligible slot (ceiling is not) at the reader's E
    per_slot = _reader_units_per_slot(reg)
    eligible = [s for s in plan.slots if s.eligible]
    assert est.eligible_slots == len(eligible) == 4 * 3 * 2
    assert lines["reader"] == len(eligible) * per_slot == est.reader_units
    # summariser: two requests per distinct eligible compaction-2 checkpoint (4 traces)
    summary_entry = profile_catalog(c.summariser).entry("openai", "gpt-5-mini")
    per_request = expected_request_units(summary_entry, input_tokens=SUMMARY_INPUT_TOKENS,
                                         output_tokens=SUMMARY_OUTPUT_TOKENS)
    checkpoints = {s.checkpoint for s in eligible if s.arm == "compaction-2"}
    assert (est.summary_checkpoints, est.summary_requests) == (len(checkpoints), 8)
    assert lines["summariser"] == 2 * len(checkpoints) * per_request
    # judge: one request per eligible slot on the faux judge's route
    judge_entry = profile_catalog(c.judge).entry(c.judge.provider, c.judge.model)
    per_judge = expected_request_units(
        judge_entry, input_tokens=judge_input_tokens(c.judge.rubric),
        output_tokens=ASSUMED_SCENARIO.output_tokens_per_round)
    assert lines["judge"] == len(eligible) * per_judge == est.judge_units
    # cap / expected is over the total: less headroom than the reader alone claims
    reader_only = estimate(plan, per_slot, max_requests=10)
    assert reader_only.expected_units == lines["reader"] < est.expected_units
    scaled = plan.cap_units * 1_000_000 // est.expected_units
    assert est.cap_over_expected == f"{scaled // 1_000_000}.{scaled % 1_000_000:06d}"
    assert est.cap_over_expected != reader_only.cap_over_expected
    # A checkpoint found infeasible is not asked (no reader, no judge request) but was
    # built, so its summaries were paid.
    dropped = sorted(checkpoints)[0]
    asked = sum(1 for s in eligible if s.checkpoint == dropped)
    fewer = plan_estimate(reg, plan, infeasible={dropped})
    assert fewer.expected_lines() == {
        "reader": lines["reader"] - asked * per_slot,
        "summariser": lines["summariser"],
        "judge": lines["judge"] - asked * per_judge,
    }


def test_without_a_summariser_or_a_judge_only_the_reader_line_applies() -> None:
    from efold.controller.campaigns.plan import plan_estimate

    reg = reg_of()
    plan = plan_for(reg)
    est = plan_estimate(reg, plan)
    assert est.expected_lines() == {"reader": est.expected_units}
    assert (est.summariser_units, est.judge_units) == (None, None)
    assert est == estimate(plan, _reader_units_per_slot(reg), max_requests=10)
    # A summariser no role calls adds no line either (native and cold-rebuild never
    # summarise; ceiling is not eligible here but would).
    unused = reg_of(SUMMARISED.replace('"compaction-2", "ceiling"', '"cold-rebuild"')
                    .split("[judge]")[0])
    assert unused.campaign.summariser is not None
    assert list(plan_estimate(unused, plan_for(unused)).expected_lines()) == ["reader"]


def test_one_request_is_priced_by_the_slot_formula_with_nothing_cached() -> None:
    """``expected_request_units``: one round, no lookup, no allowance, all input
    uncached, rounded up once."""
    from fractions import Fraction

    from efold.guard.catalog import bundled_catalog
    from efold.guard.estimate import expected_request_units
    from efold.guard.money import ceil_units

    entry = bundled_catalog().entry("openai", "gpt-5-mini")
    rates = entry.rates_for_input(25_000)
    exact = 25_000 * rates["input"] + 2_000 * rates["output"]
    assert expected_request_units(entry, input_tokens=25_000, output_tokens=2_000) \
        == ceil_units(Fraction(exact))


def test_plan_lists_the_expected_lines_in_json_and_for_a_person(tmp_path: Path) -> None:
    """``plan --json`` carries ``estimate.expected_lines_usd`` (only the lines that
    apply); the human output lists them under ``expected`` with what each means."""
    import json

    from click.testing import CliRunner

    from efold.controller.cli import main
    from efold.controller.commands.plan import describe_plan

    (tmp_path / "c.toml").write_text(
        'name = "judged"\nsuite = "original"\ntraces = ["orig-archive-scan"]\n'
        'probe_limit = 2\nroles = ["compaction"]\ncap_usd = "20"\n[judge]\nprovider = "faux"\n')
    runner = CliRunner()
    registered = runner.invoke(main, ["register", str(tmp_path / "c.toml"),
                                      "--output", str(tmp_path / "reg")])
    assert registered.exit_code == 0, registered.output
    sha = registered.output.split("sha256: ")[1].strip()
    args = ["plan", "--registration", str(tmp_path / "reg" / "registration.json"),
            "--sha256", sha]
    planned = runner.invoke(main, [*args, "--json"])
    assert planned.exit_code == 0, planned.output
    costs = json.loads(planned.stdout)["estimate"]  # stderr names the private root
    assert list(costs["expected_lines_usd"]) == ["reader", "judge"]
    assert sum(Decimal(v) for v in costs["expected_lines_usd"].values()) \
        == Decimal(costs["expected_usd"])
    human = runner.invoke(main, args)
    assert human.exit_code == 0, human.output
    out = human.output.splitlines()
    at = next(i for i, line in enumerate(out) if line[2:18].rstrip() == "expected")
    assert "the sum of" in out[at]
    assert out[at + 1][2:18].strip() == "reader" and "eligible slots" in out[at + 1]
    assert out[at + 2][2:18].strip() == "judge" and "per answered slot" in out[at + 2]
    assert "money (faux reader: faux units, no money is spent):" in human.output
    # A real reader with a summariser: the summariser line says what it counts; a faux
    # judge beside a real reader is labelled as faux units.
    summary = {"campaign": "c", "slots": 2, "eligible": 2, "skipped_inventory_infeasible": 0,
               "roles": ["compaction"], "traces": 1, "repeats": 1, "checkpoints": 1,
               "probe_mode": "recall-only",
               "checkpoints_unprepared": 0, "schedule_sha256": "0" * 64,
               "estimate": {"expected_per_slot_usd": "1", "expected_usd": "3.5",
                            "expected_lines_usd": {"reader": "2", "summariser": "1",
                                                   "judge": "0.5"},
                            "rmax_usd": "0.5", "full_upfront_usd": "10", "cap_usd": "20",
                            "cap_minus_rmax_usd": "19.5", "cap_over_expected": "5.714285"}}
    lines = describe_plan(summary, {}, faux=False, parts={
        "summary_checkpoints": 1, "summary_requests": 2, "summary_per_request_usd": "0.5",
        "judge_per_slot_usd": "0.25",
        "faux_lines": {"reader": False, "summariser": False, "judge": True}})
    text = "\n".join(lines)
    assert "summary requests of the prep children: 2 over 1 checkpoints x 0.5 each" in text
    assert "one request per answered slot, 2 x 0.25 each (faux units" in text
    assert "money (USD):" in text


def test_a_ledger_role_is_priced_at_its_three_extraction_allowances() -> None:
    """Each ledger checkpoint's extractions are three requests at the reference's
    reservations (128k, 64k and 64k input tokens, 4,096 output each), beside the
    compaction-2 role's two summary requests; the line then has no single price."""
    from efold.controller.campaigns.plan import (
        SUMMARY_INPUT_TOKENS,
        SUMMARY_OUTPUT_TOKENS,
        plan_estimate,
    )
    from efold.controller.campaigns.profiles import profile_catalog
    from efold.guard.estimate import expected_request_units

    reg = reg_of(SUMMARISED.replace('"ceiling"', '"ledger-cold"'))
    c = reg.campaign
    assert c.summariser is not None
    plan = plan_for(reg)
    est = plan_estimate(reg, plan)
    entry = profile_catalog(c.summariser).entry("openai", "gpt-5-mini")
    per_summary = expected_request_units(entry, input_tokens=SUMMARY_INPUT_TOKENS,
                                         output_tokens=SUMMARY_OUTPUT_TOKENS)
    per_ledger = sum(expected_request_units(entry, input_tokens=tokens, output_tokens=4_096)
                     for tokens in (128_000, 64_000, 64_000))
    eligible = [s for s in plan.slots if s.eligible]
    summarised = {s.checkpoint for s in eligible if s.arm == "compaction-2"}
    ledgers = {s.checkpoint for s in eligible if s.arm == "ledger-cold"}
    assert summarised and ledgers
    assert est.summary_requests == 2 * len(summarised) + 3 * len(ledgers)
    assert est.summariser_units == 2 * len(summarised) * per_summary + len(ledgers) * per_ledger
    assert est.summary_units_per_request is None
