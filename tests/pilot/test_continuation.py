"""Continuations through the operator's commands: a faux campaign interrupted at about a
third, continued, its continuation killed mid-slot and reaped, continued again; the
chain's aggregate is, slot by slot, the uninterrupted run of the same registration, and
no slot is paid for twice. The refusals (a live run, an unreconciled one, one continued
already) and the cap a continuation gets, exactly."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from efold_pilot_kit import HERE, hold_consumed, journal_money, journal_rows

from efold.controller.campaigns.plan import plan_for
from efold.controller.campaigns.registration import load_registration
from efold.controller.rundirs.aggregate import RunView, read_run
from efold.controller.rundirs.chain import chain_links, read_chain
from efold.controller.rundirs.continuation import plan_continuation

EFOLD = str(Path(sys.executable).with_name("efold-controller"))
CAMPAIGN = """name = "chain"
suite = "original"
roles = ["native", "compaction", "pack"]
probe_limit = 3
selection_seed = 7
schedule_seed = 7
cap_usd = "{cap}"
"""
TERMINAL = {"completed", "invalid", "skipped"}
# ``pilot --faux --continue PREVIOUS --run-dir RUN`` with the faulty child program
# (tests/pilot/faulty_child.py, mode ``hang``).
CONTINUE_HANGING = """
import sys
sys.path.insert(0, {here!r})
from efold_pilot_kit import faulty_program
from efold.controller.pilot.pilot import Dispatch, run_pilot
from efold.controller.rundirs.continuation import choose_run
from efold.controller.rundirs.runroot import claim_run_dir
from efold.registry.lease import acquire_lease
held = acquire_lease({previous!r})
chosen = choose_run(None, continue_run={previous!r}, slots=None, chunk=None, holding=True)
run_pilot(chosen.loaded.registration, chosen.loaded.data, claim_run_dir({run!r}),
          program=faulty_program("hang", {marker!r}),
          dispatch=Dispatch(part=chosen.part, continued=held))
"""


def efold(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EFOLD, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def register(tmp: Path, cap: str = "60.00") -> tuple[str, str]:
    (tmp / "campaign.toml").write_text(CAMPAIGN.format(cap=cap))
    done = efold(tmp, "register", "campaign.toml", "--output", "reg")
    assert done.returncode == 0, done.stderr
    return "reg/registration.json", done.stdout.split("sha256: ")[1].strip()


def run_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if (p / "journal.sqlite").is_file())


def receipts(run: Path) -> int:
    return len(journal_rows(run, "SELECT slot FROM receipts"))


def start(tmp: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([EFOLD, "pilot", "--faux", "--no-progress", "--quiet", *args],
                            cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_for(ready: Any, controller: subprocess.Popen[str], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        assert controller.poll() is None, "the controller ended before the fault point"
        assert time.monotonic() < deadline, "timed out waiting for the fault point"
        time.sleep(0.005)


def results(tmp: Path, run: Path, *extra: str) -> dict[str, Any]:
    done = efold(tmp, "aggregate", str(run), "--json", *extra)
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def by_slot(doc: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Each slot's outcome as the results give it."""
    return {row["slot"]: (row["status"], row.get("code"), row.get("outcome"),
                          row.get("correct"), row.get("checkpoint_sha256"),
                          row.get("input_tokens"), row.get("output_tokens"))
            for row in doc["slots"]}


def spends(view: RunView) -> dict[str, tuple[str, int, int]]:
    """Each slot's receipt: its status, its settled units and its admitted requests."""
    return {r.slot: (r.status.value, r.spend.settled_units, r.spend.admitted)
            for r in view.receipts}


def settled_holds(run: Path) -> dict[str, int]:
    """Per slot (and checkpoint), the holds this link's journal settled."""
    out: dict[str, int] = {}
    for (slot,) in journal_rows(run, "SELECT slot FROM holds WHERE state = 'settled'"):
        assert isinstance(slot, str)
        out[slot] = out.get(slot, 0) + 1
    return out


def test_an_interrupted_then_crashed_chain_aggregates_as_the_uninterrupted_run(
        tmp_path: Path) -> None:
    reg, sha = register(tmp_path)
    given = ("--registration", reg, "--sha256", sha)
    whole = efold(tmp_path, "pilot", "--faux", *given, "--run-dir", "whole", "--quiet")
    assert whole.returncode == 0, whole.stderr
    reference = results(tmp_path, tmp_path / "whole")
    planned = len(reference["slots"])

    # Link 1: SIGINT at about a third.
    first = tmp_path / "link1"
    controller = start(tmp_path, *given, "--run-dir", str(first))
    wait_for(lambda: receipts(first) >= planned // 3, controller)
    controller.send_signal(signal.SIGINT)
    assert controller.wait(timeout=120) == 130
    # The plan a continuation will run: the slots without a terminal receipt.
    plan = json.loads(efold(tmp_path, "plan", "--continue", str(first), "--json").stdout)
    statuses = {row["slot"]: row["status"] for row in results(
        tmp_path, first, "--no-chain")["slots"]}
    assert plan["remaining"] == [s for s in (r["slot"] for r in reference["slots"])
                                 if statuses.get(s) not in TERMINAL]
    assert 0 < len(plan["remaining"]) < planned

    # Link 2: killed with a request in flight, then reaped. Its controller is the one
    # ``pilot --continue`` runs, with the test's child program: once the marker is gone,
    # the next probe child consumes a hold and hangs, so that hold can never settle.
    second = tmp_path / "link2"
    marker = tmp_path / "marker"
    marker.touch()
    controller = subprocess.Popen([sys.executable, "-c", CONTINUE_HANGING.format(
        here=str(HERE), previous=str(first), run=str(second), marker=str(marker))])
    wait_for(lambda: receipts(second) >= 3, controller)
    marker.unlink()
    wait_for(lambda: marker.exists() and hold_consumed(second), controller)
    controller.kill()
    controller.wait()
    refused = efold(tmp_path, "pilot", "--faux", "--continue", str(second))
    assert refused.returncode == 2 and "refused: run_unreconciled" in refused.stderr
    assert efold(tmp_path, "reap", str(second)).returncode == 0
    # The first link is continued already: the chain has no branches.
    again = efold(tmp_path, "pilot", "--faux", "--continue", str(first))
    assert again.returncode == 2 and "refused: run_already_continued" in again.stderr

    # Link 3: the rest.
    third = efold(tmp_path, "pilot", "--faux", "--continue", str(second), "--run-dir", "link3",
                  "--quiet")
    assert third.returncode == 0, third.stderr
    links = [first, second, tmp_path / "link3"]

    for link in links:  # every link reads as the whole chain
        chain = results(tmp_path, link)
        assert chain["status"]["verdict"] == "complete"
        assert [entry["verdict"] for entry in chain["status"]["chain"]["links"]] == \
            ["interrupted", "crashed", "complete"]
        assert by_slot(chain) == by_slot(reference)
    summary = efold(tmp_path, "aggregate", str(first)).stdout
    assert "chain of 3 links: interrupted, crashed, complete" in summary

    # Slot by slot, the same receipts: status, settled units, admitted requests.
    view = read_chain(chain_links(first))
    assert spends(view) == spends(read_run(tmp_path / "whole"))
    # Nothing paid twice: every slot has its terminal receipt in exactly one link, and
    # no link sent a request for a slot an earlier link had finished (the journals' own
    # holds). A slot cut short (interrupted, lost) is run again: what its first attempt
    # spent stays spent, in its link's journal.
    planned = {s.slot for s in view.plan.slots}
    finished_in: dict[str, int] = {}
    for k, link in enumerate(links):
        for slot in settled_holds(link):
            if slot in planned:
                assert finished_in.get(slot, k) >= k, f"{slot} paid after it finished"
        for receipt in read_run(link).receipts:
            if receipt.status.value in TERMINAL:
                assert receipt.slot not in finished_in, f"{receipt.slot} finished twice"
                finished_in[receipt.slot] = k
    assert set(finished_in) == planned
    # Checkpoints are built once in the chain: a continuation copies what an earlier
    # link built and verified (the same snapshot digests), and builds only the rest.
    prepared = [len(journal_rows(link, "SELECT launch_id FROM launches WHERE kind = 'prep'"))
                for link in links]
    built = {row for link in links for row in journal_rows(
        link, "SELECT slot, snapshot_digest FROM assignments WHERE kind = 'checkpoint'")}
    whole_built = set(journal_rows(tmp_path / "whole", "SELECT slot, snapshot_digest FROM "
                                   "assignments WHERE kind = 'checkpoint'"))
    assert built == whole_built and sum(prepared) == len(whole_built)
    money = [journal_money(link) for link in links]
    assert view.facts.money is not None
    assert view.facts.money.settled_units == sum(m[0] for m in money)
    # The request lost in link 2: its hold, left open by the killed controller (``reap``
    # closes it as lost), stays charged, never assumed refunded, and was counted
    # against link 3's cap.
    assert money[1][1] + money[1][2] >= 78_400_000  # at least the one Rmax hold
    assert view.facts.money.retained_units + view.facts.money.open_units == \
        sum(m[1] + m[2] for m in money)
    cap = json.loads((tmp_path / "link3" / "plan.json").read_text())["cap_units"]
    assert cap == 60 * 20_000_000 - sum(m[0] + m[1] + m[2] for m in money[:2])


def test_a_live_run_refuses_and_the_cap_left_is_exact(tmp_path: Path) -> None:
    reg, sha = register(tmp_path)
    done = efold(tmp_path, "pilot", "--faux", "--registration", reg, "--sha256", sha,
                 "--slots", "0:10", "--run-dir", "part", "--quiet")
    assert done.returncode == 0, done.stderr
    part = tmp_path / "part"
    # Another process holds the run's lease: a controller (or reap) is at work there.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from efold.registry.lease import acquire_lease\n"
         f"lease = acquire_lease({str(part)!r})\nprint('held', flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        live = efold(tmp_path, "pilot", "--faux", "--continue", str(part))
        assert live.returncode == 2 and "refused: lease_held" in live.stderr
    finally:
        holder.kill()
        holder.wait()

    settled, retained, _ = journal_money(part)
    cont = plan_continuation(part)
    assert cont.remaining_cap_units == 60 * 20_000_000 - settled - retained
    ran = efold(tmp_path, "pilot", "--faux", "--continue", str(part), "--run-dir", "rest",
                "--quiet")
    assert ran.returncode == 0, ran.stderr
    plan = json.loads((tmp_path / "rest" / "plan.json").read_text())
    assert plan["cap_units"] == cont.remaining_cap_units
    assert plan["link"]["index"] == 2 and plan["link"]["previous"] == str(part)
    assert plan["part"] is None and len(plan["slots"]) == len(cont.remaining)
    nothing = efold(tmp_path, "pilot", "--faux", "--continue", "rest")
    assert nothing.returncode == 2 and "refused: nothing_to_continue" in nothing.stderr


def test_a_continuation_below_rmax_refuses(tmp_path: Path) -> None:
    # A cap of one maximum reservation (3.92) and a little, below what the campaign
    # spends plus Rmax: the first link stops when the cap refuses, leaving less than
    # Rmax for any continuation.
    reg, sha = register(tmp_path, cap="4.50")
    done = efold(tmp_path, "pilot", "--faux", "--registration", reg, "--sha256", sha,
                 "--run-dir", "tight", "--quiet")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "not_admitted_cap" in done.stdout + done.stderr
    refused = efold(tmp_path, "plan", "--continue", "tight")
    assert refused.returncode == 2 and "refused: cap_below_rmax" in refused.stderr
    refused = efold(tmp_path, "pilot", "--faux", "--continue", "tight")
    assert refused.returncode == 2 and "refused: cap_below_rmax" in refused.stderr


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--slots", "10:5", "--slots 10:5"),
    ("--slots", "x", "--slots A:B"),
    ("--chunk", "3/2", "--chunk K/N"),
])
def test_a_malformed_part_is_a_usage_error(tmp_path: Path, option: str, value: str,
                                           message: str) -> None:
    reg, sha = register(tmp_path)
    done = efold(tmp_path, "pilot", "--faux", "--registration", reg, "--sha256", sha,
                 option, value)
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "efold-runs").exists()


def test_chunks_by_trace_make_a_chain_that_ends_complete(tmp_path: Path) -> None:
    reg, sha = register(tmp_path)
    first = efold(tmp_path, "pilot", "--faux", "--registration", reg, "--sha256", sha,
                  "--chunk", "1/2", "--run-dir", "c1", "--quiet")
    assert first.returncode == 0, first.stderr
    doc = results(tmp_path, tmp_path / "c1")
    assert doc["status"]["verdict"] == "partial" and doc["status"]["chain"]["to_run"] > 0
    second = efold(tmp_path, "pilot", "--faux", "--continue", "c1", "--chunk", "2/2",
                   "--run-dir", "c2", "--quiet")
    assert second.returncode == 0, second.stderr
    doc = results(tmp_path, tmp_path / "c1")
    assert doc["status"]["verdict"] == "complete" and doc["status"]["chain"]["to_run"] == 0
    traces = [{json.loads((tmp_path / c / "plan.json").read_text())["slots"][i]["trace_id"]
               for i in range(3)} for c in ("c1", "c2")]
    assert not traces[0] & traces[1]  # whole traces: no checkpoint in both

    # A chain copied (or moved) together reads as itself, not as the runs it came from.
    moved = tmp_path / "moved"
    moved.mkdir(mode=0o700)
    for name in ("c1", "c2"):
        shutil.copytree(tmp_path / name, moved / name, symlinks=True)
    copied = results(tmp_path, moved / "c2")
    assert copied["status"]["verdict"] == "complete"
    assert len(copied["status"]["chain"]["links"]) == 2

    # runs marks each link, and prune removes a chain only whole.
    listed = efold(tmp_path, "runs", str(tmp_path)).stdout
    assert "complete (chain: link 1 of 2)" in listed and "(chain: link 2 of 2)" in listed
    part = efold(tmp_path, "prune", str(tmp_path), "--run", "c1", "--dry-run", "--json")
    kept = json.loads(part.stdout)["runs"]
    assert [(e["name"], e["action"], e["code"]) for e in kept] == \
        [("c1", "keep", "prune_chain_partial")]
    whole = efold(tmp_path, "prune", str(tmp_path), "--run", "c1", "--run", "c2", "--yes")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert not (tmp_path / "c1").exists() and not (tmp_path / "c2").exists()


def test_two_continuations_at_once_one_links_the_other_claims_nothing(
        tmp_path: Path) -> None:
    reg, sha = register(tmp_path)
    done = efold(tmp_path, "pilot", "--faux", "--registration", reg, "--sha256", sha,
                 "--slots", "0:6", "--runs", "runs", "--quiet")
    assert done.returncode == 0, done.stderr
    (first,) = run_dirs(tmp_path / "runs")
    racers = [start(tmp_path, "--continue", str(first)) for _ in range(2)]
    ends = [(r.wait(timeout=300), r.communicate()[1]) for r in racers]
    assert sorted(code for code, _ in ends) == [0, 2], ends
    (lost,) = [err for code, err in ends if code == 2]
    assert "refused: lease_held" in lost or "refused: run_already_continued" in lost
    runs = run_dirs(tmp_path / "runs")
    assert len(runs) == 2  # the loser claimed no directory
    assert [len(results(tmp_path, run)["status"]["chain"]["links"]) for run in runs] == [2, 2]


# A continuation killed (SIGKILL) at a chosen moment: the moment is reached by wrapping
# one step of ``open_run`` in the continuation's own process, which then says so and
# waits to be killed.
KILLED_AT = """
import pathlib, sys, time
from efold.controller.rundirs import authorize_run, run_setup
moment, marker = sys.argv[1], pathlib.Path(sys.argv[2])

def wait_here():
    marker.write_text(moment)
    time.sleep(600)

link = run_setup.link_continuation
if moment == "before-consumption":
    authorize_run.consume_faux = lambda *a, **k: wait_here()
elif moment == "before-link":
    run_setup.link_continuation = lambda *a, **k: wait_here()
else:
    def linked_then_wait(*a, **k):
        link(*a, **k)
        wait_here()
    run_setup.link_continuation = linked_then_wait
from efold.controller.cli import main
sys.argv = ["efold-controller", "pilot", "--faux", "--quiet", *sys.argv[3:]]
main()
"""


@pytest.mark.parametrize("moment", ["before-consumption", "before-link", "after-link"])
def test_a_continuation_killed_at_each_moment_is_continued_and_the_chain_stays_exact(
        tmp_path: Path, moment: str) -> None:
    reg, sha = register(tmp_path)
    given = ("--registration", reg, "--sha256", sha)
    assert efold(tmp_path, "pilot", "--faux", *given, "--run-dir", "whole",
                 "--quiet").returncode == 0
    assert efold(tmp_path, "pilot", "--faux", *given, "--slots", "0:12", "--run-dir", "one",
                 "--quiet").returncode == 0
    marker = tmp_path / "marker"
    killed = subprocess.Popen([sys.executable, "-c", KILLED_AT, moment, str(marker),
                               "--continue", "one", "--run-dir", "two"], cwd=tmp_path)
    wait_for(marker.exists, killed)
    killed.kill()
    killed.wait()
    assert efold(tmp_path, "reap", "two").returncode == 0, moment
    if moment == "after-link":  # linked: "one" is continued; the crashed link is next
        again = efold(tmp_path, "pilot", "--faux", "--continue", "one")
        assert again.returncode == 2 and "refused: run_already_continued" in again.stderr
        resumed = efold(tmp_path, "pilot", "--faux", "--continue", "two", "--run-dir",
                        "three", "--quiet")
        links, verdicts = ["one", "two", "three"], ["complete", "crashed", "complete"]
    else:  # never linked: "two" ran nothing, and "one" is continued again
        resumed = efold(tmp_path, "pilot", "--faux", "--continue", "one", "--run-dir",
                        "three", "--quiet")
        links, verdicts = ["one", "three"], ["complete", "complete"]
        orphan = efold(tmp_path, "aggregate", "two")
        assert orphan.returncode == 2, moment
        assert "run_records_invalid" in orphan.stderr or "chain_invalid" in orphan.stderr
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    chain = results(tmp_path, tmp_path / "one")
    assert [link["verdict"] for link in chain["status"]["chain"]["links"]] == verdicts
    assert chain["status"]["verdict"] == "complete"
    assert by_slot(chain) == by_slot(results(tmp_path, tmp_path / "whole"))
    assert [p.name for p in chain_links(tmp_path / "three")] == links


def test_a_checkpoint_changed_since_its_link_built_it_is_built_again(tmp_path: Path) -> None:
    reg, sha = register(tmp_path)
    assert efold(tmp_path, "pilot", "--faux", "--registration", reg, "--sha256", sha,
                 "--slots", "0:12", "--run-dir", "one", "--quiet").returncode == 0
    built = journal_rows(tmp_path / "one", "SELECT slot FROM assignments "
                         "WHERE kind = 'checkpoint' ORDER BY slot")
    changed, gone = str(built[0][0]), str(built[1][0])
    snapshot = tmp_path / "one" / "checkpoints" / changed / "snapshot" / "checkpoint.json"
    data = bytearray(snapshot.read_bytes())
    data[-2] ^= 1  # one bit: the copy no longer hashes to its journaled digest
    snapshot.write_bytes(bytes(data))
    shutil.rmtree(tmp_path / "one" / "checkpoints" / gone)
    done = efold(tmp_path, "pilot", "--faux", "--continue", "one", "--run-dir", "two")
    assert done.returncode == 0, done.stdout + done.stderr
    preps = {str(slot) for (slot,) in journal_rows(
        tmp_path / "two", "SELECT slot FROM launches WHERE kind = 'prep'")}
    assert {changed, gone} <= preps  # built again, in prep children
    reused = len(built) - len({changed, gone})
    assert f"checkpoints: {reused} reused from earlier links" in done.stdout
    assert results(tmp_path, tmp_path / "two")["status"]["verdict"] == "complete"


def test_a_cluster_run_is_not_continued_here(tmp_path: Path) -> None:
    """Its slots ran in its shards' runs: its own directory holds no receipt, so a
    continuation read from it would run every slot again."""
    reg, sha = register(tmp_path)
    assert efold(tmp_path, "pilot", "--faux", "--registration", reg, "--sha256", sha,
                 "--slots", "0:4", "--run-dir", "run", "--quiet").returncode == 0
    (tmp_path / "run" / "cluster.json").write_text("{}")  # what marks a cluster run
    for command in (("plan", "--continue", "run"), ("pilot", "--faux", "--continue", "run")):
        refused = efold(tmp_path, *command)
        assert refused.returncode == 2 and "refused: chain_invalid" in refused.stderr
        assert "cluster run" in refused.stderr


EQUAL = """name = "equal"
suite = "hard"
seeds = [101]
roles = ["native", "cold-rebuild"]
probe_limit = 2
cap_usd = "3.92"
"""


def test_a_cap_left_equal_to_rmax_admits_one_request(tmp_path: Path) -> None:
    """The cap is one Rmax (3.92 USD of faux units). A first link that spends nothing
    (a native slot of the hard suite: inventory-infeasible, skipped) leaves exactly Rmax:
    the continuation is planned, and admits exactly one request (T + Rmax <= C with
    T = 0), then the cap refuses the next."""
    (tmp_path / "c.toml").write_text(EQUAL)
    done = efold(tmp_path, "register", "c.toml", "--output", "reg")
    assert done.returncode == 0, done.stderr
    sha = done.stdout.split("sha256: ")[1].strip()
    plan = json.loads(efold(tmp_path, "plan", "--registration", "reg/registration.json",
                            "--sha256", sha, "--json").stdout)
    assert plan["skipped_inventory_infeasible"] > 0
    registered = load_registration(tmp_path / "reg" / "registration.json", sha).registration
    native = next(n for n, s in enumerate(plan_for(registered).slots) if s.role == "native")
    first = efold(tmp_path, "pilot", "--faux", "--registration", "reg/registration.json",
                  "--sha256", sha, "--slots", f"{native}:{native + 1}", "--run-dir", "one",
                  "--quiet")
    assert first.returncode == 0, first.stdout + first.stderr
    assert journal_money(tmp_path / "one") == (0, 0, 0)  # skipped: nothing asked
    cont = plan_continuation(tmp_path / "one")
    assert cont.remaining_cap_units == cont.rmax_units == 3_92 * 200_000  # equality
    rest = efold(tmp_path, "pilot", "--faux", "--continue", "one", "--run-dir", "two",
                 "--quiet")
    assert rest.returncode == 3 and "not_admitted_cap" in rest.stdout + rest.stderr
    admitted = journal_rows(tmp_path / "two", "SELECT permit_id FROM holds")
    assert len(admitted) == 1  # equality admitted one; the next did not fit


def test_a_damaged_receipt_in_an_earlier_link_is_named_with_its_link(tmp_path: Path) -> None:
    reg, sha = register(tmp_path)
    first = efold(tmp_path, "pilot", "--faux", "--registration", reg, "--sha256", sha,
                  "--chunk", "1/3", "--run-dir", "c1", "--quiet")
    assert first.returncode == 0, first.stderr
    second = efold(tmp_path, "pilot", "--faux", "--continue", "c1", "--chunk", "2/3",
                   "--run-dir", "c2", "--quiet")
    assert second.returncode == 0, second.stderr
    damaged = sorted((tmp_path / "c1" / "receipts").iterdir())[0]
    damaged.write_bytes(damaged.read_bytes()[:-20])
    third = efold(tmp_path, "pilot", "--faux", "--continue", "c2", "--chunk", "3/3",
                  "--run-dir", "c3", "--quiet")
    assert third.returncode == 2
    assert f"link 1 of 2 ({tmp_path / 'c1'}): " in third.stderr, third.stderr
    assert not (tmp_path / "c3").exists()
