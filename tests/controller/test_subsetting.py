"""Subsets (issue 14): ``register``/``pilot`` ``--roles``, ``--traces``, ``--probes`` and
``--limit`` make a new registration with its own sha256, whose plan holds exactly the
kept slots, while a registration without a subset keeps its bytes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import msgspec
import pytest

from efold.controller.campaigns.campaign import Campaign, bundled_campaign, parse_campaign
from efold.controller.campaigns.plan import plan_for
from efold.controller.campaigns.registration import (
    SELECTION_ALGORITHM,
    Digests,
    Registration,
    RegistrationError,
    SelectedTrace,
    compute_registration,
    encode_registration,
    load_registration,
    registration_sha256,
    subset_of,
    subset_registration,
    write_registration,
)
from efold.controller.campaigns.subset import Subset
from efold.controller.commands._options import pilot_registration
from efold.controller.errors import CampaignError, ControllerError
from efold.digests import canonical_json, sha256_hex
from efold.errors import Code

ROLES = ["native", "cold-rebuild", "compaction", "pack"]
TRACES = ["orig-stage-hire", "orig-workshop-move", "orig-cafe-fitout", "orig-archive-scan"]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "efold.controller", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def printed(out: str) -> dict[str, str]:
    """``key: value`` lines of a command's stdout."""
    return dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)


def same_but_build(a: bytes, b: bytes) -> bool:
    docs = [json.loads(a), json.loads(b)]
    if docs[0]["digests"]["build"] == docs[1]["digests"]["build"]:
        return a == b
    for doc in docs:
        doc["digests"]["build"] = ""
    return docs[0] == docs[1]


def default() -> tuple[Campaign, bytes]:
    """The original campaign: these tests name its hand-written traces and probes."""
    return bundled_campaign("original")


def registered(subset: Subset | None = None) -> Registration:
    spec, raw = default()
    return compute_registration(spec, raw, subset)


# -- a registration without a subset keeps its bytes ------------------------------------


class RegistrationBeforeSubsets(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``Registration`` exactly as it was before subsets existed (same fields, order and
    defaults). The build digest changes with every edit of the package, so a hard-coded
    sha256 could not stay true; encoding the same values through the old schema can."""

    campaign: Campaign
    campaign_sha256: str
    digests: Digests
    cap_units: int
    rmax_units: int
    selection: list[SelectedTrace]
    selection_algorithm: str = SELECTION_ALGORITHM
    version: int = 1


@pytest.mark.parametrize("name", ["default", "original", "hard"])
def test_a_registration_without_a_subset_keeps_its_bytes(name: str) -> None:
    spec, raw = bundled_campaign(name)
    reg = compute_registration(spec, raw)
    assert subset_of(reg) is None
    data = encode_registration(reg)
    assert b"subset" not in data
    old = RegistrationBeforeSubsets(**{f: getattr(reg, f) for f in
                                       RegistrationBeforeSubsets.__struct_fields__})
    assert data == canonical_json(old) + b"\n"
    # An old file decodes to a registration without a subset, and re-encodes the same.
    assert encode_registration(msgspec.json.decode(data, type=Registration)) == data


# -- register from the command line -----------------------------------------------------


def test_register_a_subset_from_the_command_line(tmp_path: Path) -> None:
    full = cli("register", "original", "--output", "full", cwd=tmp_path)
    assert full.returncode == 0, full.stderr
    one = cli("register", "original", "--output", "a", "--roles", "pack,native",
              "--limit", "3", cwd=tmp_path)
    # The same subset in another order and spelling: the same registration.
    two = cli("register", "original", "--output", "b", "--limit", "3", "--roles", "native",
              "--roles", " pack ", "--roles", "native", cwd=tmp_path)
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    f, a, b = printed(full.stdout), printed(one.stdout), printed(two.stdout)
    assert set(a) == {"registration", "sha256", "subset"} and set(f) == {"registration",
                                                                          "sha256"}
    assert a["subset"] == "roles=native,pack limit=3"
    assert a["sha256"] != f["sha256"]
    data = (tmp_path / a["registration"]).read_bytes()
    assert sha256_hex(data) == a["sha256"]
    # The same bytes, but for the build digest should another process have edited the
    # package between the two commands (then rerun: both shas are then equal too).
    assert same_but_build(data, (tmp_path / b["registration"]).read_bytes())
    doc, full_doc = json.loads(data), json.loads((tmp_path / f["registration"]).read_bytes())
    # Both come from the same campaign file; the subset is recorded, normalized.
    assert doc["campaign_sha256"] == full_doc["campaign_sha256"]
    assert doc["subset"] == {"roles": ["native", "pack"], "limit": 3}
    assert [r["name"] for r in doc["campaign"]["roles"]] == ["native", "pack"]
    # It verifies like any registration, and its plan holds six slots.
    loaded = load_registration(tmp_path / a["registration"], a["sha256"])
    assert len(plan_for(loaded.registration).slots) == 3 * 2


@pytest.mark.parametrize(("flags", "kind", "named", "listed"), [
    (["--roles", "native,nat,pak"], "roles", "nat, pak", "native, cold-rebuild"),
    (["--traces", "orig-nowhere"], "traces", "orig-nowhere", "orig-stage-hire"),
    (["--traces", "orig-stage-hire", "--probes", "orig-cafe-fitout-p01"], "probes",
     "orig-cafe-fitout-p01", "orig-stage-hire-p01"),
])
def test_unknown_ids_are_refused_naming_them_and_what_there_is(
        tmp_path: Path, flags: list[str], kind: str, named: str, listed: str) -> None:
    done = cli("register", "original", "--output", "out", *flags, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("refused: subset_unknown (")
    assert f"{kind} {named} not in" in done.stderr and listed in done.stderr
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.parametrize("flags", [["--limit", "0"], ["--limit", "-1"], ["--roles", ""],
                                   ["--probes", "orig-stage-hire-p01,"]])
def test_an_empty_or_nonpositive_selection_is_a_usage_error(tmp_path: Path,
                                                            flags: list[str]) -> None:
    done = cli("register", "original", "--output", "out", *flags, cwd=tmp_path)
    assert done.returncode == 2 and "Usage:" in done.stderr and "refused" not in done.stderr
    assert not (tmp_path / "out").exists()


# -- what the plan holds ----------------------------------------------------------------


def test_the_same_subset_is_the_same_registration() -> None:
    one = registered(Subset(roles=["pack", "native", "pack"], probes=[
        "orig-stage-hire-p02", "orig-stage-hire-p01"], limit=1))
    two = registered(Subset(roles=["native", "pack"], probes=[
        "orig-stage-hire-p01", "orig-stage-hire-p02", "orig-stage-hire-p01"], limit=1))
    assert encode_registration(one) == encode_registration(two)
    assert registration_sha256(one) != registration_sha256(registered(Subset(limit=1)))


def test_limit_keeps_the_schedules_first_slots_of_every_role() -> None:
    full = plan_for(registered()).slots
    sub = plan_for(registered(Subset(roles=["pack", "native"], limit=5))).slots
    kept = [s for s in full if s.role in ("native", "pack")]
    assert len(sub) == 10 and sub == kept[:10]
    assert all(sum(1 for s in sub if s.role == r) == 5 for r in ("native", "pack"))
    # Exactly the limit, and one past it, at the boundary.
    assert len(plan_for(registered(Subset(limit=1))).slots) == len(ROLES)
    assert plan_for(registered(Subset(limit=2))).slots == full[:2 * len(ROLES)]
    # A limit past the selection keeps everything (and is still its own registration).
    every = registered(Subset(limit=52))
    assert plan_for(every).slots == full
    assert registration_sha256(every) != registration_sha256(registered())


def test_traces_and_probes_keep_exactly_their_blocks() -> None:
    probes = ["orig-stage-hire-p02", "orig-cafe-fitout-p13", "orig-stage-hire-p01"]
    reg = registered(Subset(traces=["orig-cafe-fitout", "orig-stage-hire"], probes=probes))
    plan = plan_for(reg)
    assert {(s.trace_id, s.probe_id) for s in plan.slots} == {
        (p.rsplit("-", 1)[0], p) for p in probes}
    assert len(plan.slots) == 3 * len(ROLES)
    assert subset_of(reg) == Subset(traces=["orig-stage-hire", "orig-cafe-fitout"],
                                    probes=sorted(probes))
    # Probes alone drop the traces left without one.
    only = registered(Subset(probes=["orig-archive-scan-p07"]))
    assert [(t.trace_id, t.probe_ids) for t in only.selection] == [
        ("orig-archive-scan", ["orig-archive-scan-p07"])]


def test_a_limit_applies_to_the_repeats_of_each_kept_block() -> None:
    text = """
name = "rep"
suite = "original"
roles = ["native", "pack"]
repeats = 2
schedule_seed = 3
cap_usd = "10"
"""
    spec = parse_campaign(text)
    full = plan_for(compute_registration(spec, b"")).slots
    sub = plan_for(compute_registration(spec, b"", Subset(limit=4))).slots
    assert len(sub) == 2 * 4 * 2
    first = [s for s in sub if s.repeat == 1]
    assert first == [s for s in full if s.repeat == 1][:8]
    assert {(s.trace_id, s.probe_id) for s in sub if s.repeat == 2} == {
        (s.trace_id, s.probe_id) for s in first}


def test_a_subset_filter_applies_after_the_campaigns_own_selection() -> None:
    text = """
name = "few"
suite = "original"
roles = ["native"]
traces = ["orig-workshop-move", "orig-stage-hire"]
probe_limit = 2
selection_seed = 9
cap_usd = "10"
"""
    spec = parse_campaign(text)
    reg = compute_registration(spec, b"")
    chosen = reg.selection[0].probe_ids
    with pytest.raises(CampaignError) as err:
        compute_registration(spec, b"", Subset(traces=["orig-cafe-fitout"]))
    assert err.value.code is Code.SUBSET_UNKNOWN
    assert "orig-workshop-move" in err.value.detail and "orig-cafe" not in err.value.detail.split(
        "its traces:")[1]
    left_out = next(f"orig-stage-hire-p{i:02d}" for i in range(1, 14)
                    if f"orig-stage-hire-p{i:02d}" not in chosen)
    with pytest.raises(CampaignError) as err:
        compute_registration(spec, b"", Subset(probes=[left_out]))
    assert err.value.code is Code.SUBSET_UNKNOWN and left_out in err.value.detail
    assert len(plan_for(compute_registration(spec, b"", Subset(probes=chosen))).slots) == 2


# -- verification and narrowing a registration ------------------------------------------


def test_a_subset_registration_verifies_and_a_hand_edit_refuses(tmp_path: Path) -> None:
    reg = registered(Subset(roles=["pack"], traces=["orig-archive-scan"], limit=2))
    path, sha = write_registration(reg, tmp_path / "reg")
    assert load_registration(path, sha).registration == reg
    for edit in ({"limit": 3}, {"roles": ["native"]}, {"traces": ["orig-stage-hire"]},
                 {"probes": ["orig-archive-scan-p01"]}):
        doc = json.loads(path.read_bytes())
        doc["subset"].update(edit)
        data = canonical_json(doc) + b"\n"
        (tmp_path / "edited.json").write_bytes(data)
        with pytest.raises(RegistrationError) as err:
            load_registration(tmp_path / "edited.json", sha256_hex(data))
        assert err.value.code in (Code.REGISTRATION_DIGEST_MISMATCH,
                                  Code.REGISTRATION_INVALID), edit


def test_narrowing_a_registration_equals_registering_the_subset() -> None:
    full = registered()
    wanted = Subset(roles=["pack", "compaction"], traces=["orig-stage-hire"], limit=4)
    direct = encode_registration(registered(wanted))
    assert encode_registration(subset_registration(full, wanted)) == direct
    # In two steps: roles and traces first, then the limit.
    first = subset_registration(full, Subset(roles=["compaction", "pack"],
                                             traces=["orig-stage-hire"]))
    assert encode_registration(subset_registration(first, Subset(limit=4))) == direct
    # Two limits keep the smaller.
    limited = subset_registration(registered(Subset(limit=6)), Subset(limit=9))
    assert subset_of(limited) == Subset(limit=6)


def test_narrowing_a_registration_refuses_what_it_does_not_hold() -> None:
    narrow = registered(Subset(roles=["native"], probes=["orig-stage-hire-p03"]))
    for more, named in ((Subset(roles=["pack"]), "pack"),
                        (Subset(traces=["orig-cafe-fitout"]), "orig-cafe-fitout"),
                        (Subset(probes=["orig-stage-hire-p04"]), "orig-stage-hire-p04")):
        with pytest.raises(CampaignError) as err:
            subset_registration(narrow, more)
        assert err.value.code is Code.SUBSET_UNKNOWN and named in err.value.detail
    limited = registered(Subset(limit=3))
    with pytest.raises(CampaignError) as err:
        subset_registration(limited, Subset(traces=[limited.selection[0].trace_id]))
    assert err.value.code is Code.CAMPAIGN_INVALID and "limited" in err.value.detail


# -- what pilot runs (controller.commands._options.pilot_registration) ------------------


def test_pilot_registration_makes_or_takes_one(tmp_path: Path) -> None:
    plain = pilot_registration(campaign=None, registration=None, sha256=None, subset=None,
                               real=False)  # no campaign: the bundled default
    spec, raw = bundled_campaign("default")
    assert not plain.made and plain.data == encode_registration(compute_registration(spec, raw))
    named = pilot_registration(campaign="original", registration=None, sha256=None,
                               subset=Subset(roles=["native"]), real=False)
    assert named.made and named.data == encode_registration(registered(Subset(roles=["native"])))
    path, sha = write_registration(registered(), tmp_path / "reg")
    given = pilot_registration(campaign=None, registration=str(path), sha256=sha, subset=None,
                               real=False)
    assert not given.made and given.data == path.read_bytes()
    narrowed = pilot_registration(campaign=None, registration=str(path), sha256=sha,
                                  subset=Subset(roles=["native"]), real=False)
    assert narrowed.made and narrowed.data == named.data
    with pytest.raises(click.UsageError):
        pilot_registration(campaign="original", registration=str(path), sha256=sha,
                           subset=None, real=False)


@pytest.mark.parametrize(("campaign", "subset"), [("original", None),
                                                  (None, Subset(limit=1))])
def test_pilot_real_refuses_a_registration_made_on_the_spot(
        tmp_path: Path, campaign: str | None, subset: Subset | None) -> None:
    path, sha = write_registration(registered(), tmp_path / "reg")
    with pytest.raises(ControllerError) as err:
        pilot_registration(campaign=campaign, registration=None if campaign else str(path),
                           sha256=None if campaign else sha, subset=subset, real=True)
    assert err.value.code is Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE
    assert "smoked and authorized" in err.value.detail


# -- pilot from the command line (needs the wiring in commands/pilot.py) ----------------


def test_pilot_campaign_registers_and_runs_a_subset_in_one_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = cli("pilot", "--faux", "--no-progress", "--campaign", "original", "--roles",
               "pack,native", "--limit", "2", "--run-dir", str(run), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"run: {run}"
    assert lines[1] == f"registration: {run / 'registration.json'}"
    sha = lines[2].removeprefix("sha256: ")
    data = (run / "registration.json").read_bytes()
    assert sha256_hex(data) == sha
    assert same_but_build(
        data, encode_registration(registered(Subset(roles=["native", "pack"], limit=2))))
    plan = json.loads((run / "plan.json").read_bytes())
    assert plan["registration_sha256"] == sha and len(plan["slots"]) == 4
    # register with the same flags makes the same registration (the same sha256)
    reg = cli("register", "original", "--output", "reg", "--limit", "2", "--roles",
              "native,pack", cwd=tmp_path)
    assert same_but_build(data, (tmp_path / printed(reg.stdout)["registration"]).read_bytes())


def test_pilot_campaign_refusals_from_the_command_line(tmp_path: Path) -> None:
    path, sha = write_registration(registered(), tmp_path / "reg")
    real = cli("pilot", "--real", "--campaign", "original", "--run-dir", "r", cwd=tmp_path)
    assert real.returncode == 2
    assert real.stderr.startswith("refused: lookup_pilot_real_route_unavailable (")
    both = cli("pilot", "--faux", "--campaign", "original", "--registration", str(path),
               "--sha256", sha, cwd=tmp_path)
    assert both.returncode == 2 and "Usage:" in both.stderr
    unknown = cli("pilot", "--faux", "--roles", "natve", "--run-dir", "r", cwd=tmp_path)
    assert unknown.returncode == 2 and unknown.stderr.startswith("refused: subset_unknown (")
    assert not (tmp_path / "r").exists()
