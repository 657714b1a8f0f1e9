"""Probe modes, through the commands: recall-only (the default) offers the history lookup
on no arm, built-in or not; lookup-allowed-v1 offers it on the arms that keep a store,
under checkpoint keys of its own, and runs the reference's lookup smoke; each mode
refuses the arms it does not admit at ``register``, before anything runs; the mode is
printed in every report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from efold.controller.campaigns.campaign import ARMS, parse_campaign
from efold.controller.campaigns.plan import plan_for
from efold.controller.campaigns.registration import (
    Registration,
    compute_registration,
    encode_registration,
)
from efold.folds import read_checkpoint
from efold.folds.pack import PACK_HEADER, PACK_HEADER_WITHOUT_LOOKUP
from efold.folds.probe_modes import (
    LOOKUP_MODE_ARMS,
    LOOKUP_ONLY_ARMS,
    admission_refusal,
    checkpoint_namespace,
    lookup_offered,
)
from efold.folds.request import checkpoint_to_request
from efold.report import build_results, render_markdown

EFOLD = str(Path(sys.executable).with_name("efold-controller"))
# Every built-in arm recall-only admits that the faux route can build on the original
# suite (ceiling needs a hard trace; the provider-compaction arms have their own tests).
RECALL_ARMS = ["native", "cold-rebuild", "compaction", "compaction-2", "pack",
               "restart-switch-compact", "ledger-cold"]
# An external command fold that keeps the last owner and assistant turns and asks for
# both lookup tools (efold then gives its reader the standard retained store).
COMMAND_FOLD = """import json, sys
request = json.load(sys.stdin)
kept = [e for e in request["events"] if e["role"] in ("user", "assistant")][-12:]
json.dump({"protocol": "efold-fold-v1", "boundary_crossed": True,
           "tools": ["history_search", "history_get"],
           "messages": [{"role": e["role"], "content": e["content"]} for e in kept]},
          sys.stdout)
"""


def command_role(tmp_path: Path) -> str:
    script = tmp_path / "tail_with_lookup.py"
    script.write_text(COMMAND_FOLD)
    return (f'\n[role.mine]\ncommand = [{json.dumps(sys.executable)}, '
            f'{json.dumps(str(script))}]\n')


def efold(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EFOLD, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def register(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "c.toml").write_text(text)
    return efold(tmp_path, "register", "c.toml", "--output", "reg")


def checkpoints(run: Path) -> dict[str, set[str]]:
    """Each role's checkpoint keys, from the plan."""
    plan = json.loads((run / "plan.json").read_bytes())
    out: dict[str, set[str]] = {}
    for s in plan["slots"]:
        out.setdefault(s["role"], set()).add(s["checkpoint"])
    return out


def test_recall_only_offers_no_lookup_on_any_arm(tmp_path: Path) -> None:
    # A store-keeping arm (pack), the staged arms and an external command fold that
    # returns a store and both lookup tools: none of them is offered the lookup.
    roles = ", ".join(json.dumps(a) for a in [*RECALL_ARMS, "mine"])
    text = (f'name = "recall"\nsuite = "original"\nroles = [{roles}]\nprobe_limit = 2\n'
            'cap_usd = "60.00"\n' + command_role(tmp_path))
    done = register(tmp_path, text)
    assert done.returncode == 0, done.stderr
    sha = done.stdout.split("sha256: ")[1].strip()
    ran = efold(tmp_path, "pilot", "--faux", "--registration", "reg/registration.json",
                "--sha256", sha, "--run-dir", "run", "--quiet")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    run = tmp_path / "run"
    keys = checkpoints(run)
    assert set(keys) == {*RECALL_ARMS, "mine"}
    for role, role_keys in keys.items():
        for key in role_keys:
            assert not key.startswith("lookup-allowed-v1."), key
            cp = read_checkpoint(run / "checkpoints" / key / "snapshot").checkpoint
            assert cp.tools == [] and cp.store is None, (role, key)
            assert cp.receipt.tools_offered == [] and cp.receipt.store is None, (role, key)
            payload = checkpoint_to_request(cp, "q", model="m", instructions="i")
            assert "tools" not in payload and "tool_choice" not in payload, role
            # Nothing the reader sees names a tool it does not have.
            assert "history_get" not in json.dumps(payload), role
            if role == "pack":
                assert cp.messages[0].content.startswith(PACK_HEADER_WITHOUT_LOOKUP)
    receipts = [json.loads(p.read_bytes()) for p in (run / "receipts").iterdir()]
    assert len(receipts) == 2 * 4 * len(keys)
    assert all(r["status"] == "completed" for r in receipts), receipts
    assert all(r.get("lookup_calls", 0) == 0 and r.get("lookup_bytes", 0) == 0
               for r in receipts)
    results = json.loads((run / "results.json").read_bytes())
    assert results["run"]["probe_mode"] == "recall-only"
    summary = (run / "summary.md").read_text()
    assert "probe mode: recall-only (no arm offered the history lookup)" in summary
    assert "## Tool use" not in summary


def test_lookup_allowed_v1_runs_the_reference_smoke(tmp_path: Path) -> None:
    ran = efold(tmp_path, "pilot", "--faux", "--campaign", "lookup", "--run-dir", "run",
                "--quiet")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    run = tmp_path / "run"
    keys = checkpoints(run)
    assert set(keys) == {"native-lookup", "pack"}
    for role, role_keys in keys.items():
        for key in role_keys:
            # Keys of their own: never a recall-only checkpoint's.
            assert key.startswith("lookup-allowed-v1.r1."), key
            cp = read_checkpoint(run / "checkpoints" / key / "snapshot").checkpoint
            # A healthy store and the offered tool on both arms.
            assert cp.tools == ["history_search", "history_get"], role
            assert cp.store is not None and cp.store.records
            assert cp.receipt.store is not None and cp.receipt.store.records > 0
            # native-lookup: the full transcript, no pack injected, never compacted.
            if role == "native-lookup":
                assert cp.receipt.pack is None and cp.receipt.compactions == []
                assert cp.receipt.boundary.kind == "none"
            else:
                assert cp.receipt.pack is not None
                assert cp.messages[0].content.startswith(PACK_HEADER)
    receipts = [json.loads(p.read_bytes()) for p in (run / "receipts").iterdir()]
    assert receipts and all(r["status"] == "completed" for r in receipts)
    pack = [r for r in receipts if r["role"] == "pack"]
    # The scripted reader looked things up, and witnessed a recovery: a value the pack's
    # checkpoint did not show, answered right after its lookups.
    assert sum(r.get("lookup_calls", 0) for r in pack) > 0
    assert any(r["availability"] == "recoverable" and r["correct"]
               and r.get("lookup_calls", 0) > 0 for r in pack), pack
    results = json.loads((run / "results.json").read_bytes())
    assert results["run"]["probe_mode"] == "lookup-allowed-v1"
    summary = (run / "summary.md").read_text()
    assert "probe mode: lookup-allowed-v1" in summary
    assert "## Tool use (history lookups)" in summary


@pytest.mark.parametrize("arm", sorted(LOOKUP_ONLY_ARMS))
def test_recall_only_refuses_the_arms_that_are_only_a_lookup_offer(tmp_path: Path,
                                                                  arm: str) -> None:
    done = register(tmp_path, f'name = "r"\nsuite = "original"\nroles = ["native", "{arm}"]\n')
    assert done.returncode == 2
    assert done.stderr.startswith(f"refused: arm_not_in_probe_mode ({arm}: "), done.stderr
    assert "lookup-allowed-v1" in done.stderr
    assert not (tmp_path / "reg").exists()


@pytest.mark.parametrize("arm", sorted(set(ARMS) - LOOKUP_MODE_ARMS))
def test_lookup_allowed_v1_refuses_the_arms_that_keep_no_store(tmp_path: Path,
                                                              arm: str) -> None:
    done = register(tmp_path, f'name = "r"\nsuite = "original"\nroles = ["pack", "{arm}"]\n'
                              'probe_mode = "lookup-allowed-v1"\n')
    assert done.returncode == 2
    assert done.stderr.startswith(f"refused: arm_not_in_probe_mode ({arm}: "), done.stderr
    assert not (tmp_path / "reg").exists()


def test_lookup_allowed_v1_refuses_a_command_fold(tmp_path: Path) -> None:
    done = register(tmp_path, 'name = "r"\nsuite = "original"\nroles = ["pack", "mine"]\n'
                              'probe_mode = "lookup-allowed-v1"\n' + command_role(tmp_path))
    assert done.returncode == 2
    assert done.stderr.startswith("refused: arm_not_in_probe_mode (mine: "), done.stderr


def test_an_unknown_mode_is_an_invalid_campaign(tmp_path: Path) -> None:
    done = register(tmp_path, 'name = "r"\nsuite = "original"\nroles = ["pack"]\n'
                              'probe_mode = "lookup-allowed"\n')
    assert done.returncode == 2
    assert done.stderr.startswith("refused: campaign_invalid"), done.stderr
    assert "probe_mode" in done.stderr


def test_the_mode_is_bound_into_the_registration_and_the_keys() -> None:
    base = 'name = "r"\nsuite = "original"\nroles = ["pack"]\nprobe_limit = 1\ncap_usd = "20.00"\n'
    recall = parse_campaign(base)
    lookup = parse_campaign(base + 'probe_mode = "lookup-allowed-v1"\n')
    # The default is never encoded: a recall-only registration keeps its bytes.
    explicit = parse_campaign(base + 'probe_mode = "recall-only"\n')
    reg_recall = compute_registration(recall, base.encode())
    reg_lookup = compute_registration(lookup, base.encode())
    assert compute_registration(explicit, base.encode()) == reg_recall
    plan_recall, plan_lookup = plan_for(reg_recall), plan_for(reg_lookup)
    assert plan_recall.registration_sha256 != plan_lookup.registration_sha256
    recall_keys = {s.checkpoint for s in plan_recall.slots}
    lookup_keys = {s.checkpoint for s in plan_lookup.slots}
    assert recall_keys and not recall_keys & lookup_keys
    assert lookup_keys == {f"lookup-allowed-v1.{k}" for k in recall_keys}


def test_every_arm_a_mode_refuses_is_named_with_what_to_do(tmp_path: Path) -> None:
    done = register(tmp_path, 'name = "r"\nsuite = "original"\n'
                              'roles = ["native", "store", "keep", "pack"]\n'
                              '[role.keep]\narm = "store-compaction"\n')
    assert done.returncode == 2
    said = done.stderr
    assert said.startswith("refused: arm_not_in_probe_mode (store: role 'store' "), said
    assert "role 'keep' (store-compaction)" in said
    assert "drop it, or run it in a campaign of its own" in said


def test_a_registration_made_before_modes_reads_as_unknown() -> None:
    text = 'name = "r"\nsuite = "original"\nroles = ["pack"]\nprobe_limit = 1\ncap_usd = "20.00"\n'
    reg = compute_registration(parse_campaign(text), text.encode())
    doc = msgspec.json.decode(encode_registration(reg))
    assert doc["campaign"]["probe_mode"] == "recall-only"  # always written now
    del doc["campaign"]["probe_mode"]
    old = msgspec.convert(doc, Registration)
    mode = old.campaign.probe_mode
    # What such a registration did: every arm ran, the lookup offered where a store was.
    assert mode is msgspec.UNSET and lookup_offered(mode)
    assert admission_refusal("store", True, mode) is None
    assert checkpoint_namespace(mode) == ""
    plan = plan_for(old)
    results = build_results(plan, [], faux=True, probe_mode=None)
    assert results.run is not None and results.run.probe_mode is None
    assert "probe mode" not in render_markdown(results)


def test_compare_says_the_probe_mode_changed(tmp_path: Path) -> None:
    runs = []
    for mode in ("recall-only", "lookup-allowed-v1"):
        work = tmp_path / mode
        work.mkdir()
        ran = efold(work, "pilot", "--faux", "--campaign", str(_pack_campaign(work, mode)),
                    "--run-dir", "run", "--quiet")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        runs.append(work / "run")
    done = efold(tmp_path, "compare", str(runs[0]), str(runs[1]))
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.strip().startswith("probe mode"))
    assert "differs" in line and "A recall-only" in line and "B lookup-allowed-v1" in line


def _pack_campaign(work: Path, mode: str) -> Path:
    path = work / "c.toml"
    path.write_text(f'name = "p"\nsuite = "original"\nroles = ["pack"]\nprobe_limit = 2\n'
                    f'cap_usd = "20.00"\nprobe_mode = "{mode}"\n')
    return path


def test_fold_check_runs_a_lookup_arm_as_it_would_run_and_says_what_recall_only_holds(
        tmp_path: Path) -> None:
    store = efold(tmp_path, "fold", "check", "store")
    assert store.returncode == 0, store.stdout + store.stderr
    assert "  tools offered: history_search, history_get" in store.stdout
    pack = efold(tmp_path, "fold", "check", "pack")
    assert pack.returncode == 0, pack.stdout + pack.stderr
    assert "  tools offered: none (recall-only: no lookup is offered)" in pack.stdout
