"""``plan --screening/--sensitivity``: the same workload priced on other readers, each
its own profile after the registered reader's, never pooled; unknown prices stay
unknown (null, with why), and the plan is still printed."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

EFOLD = str(Path(sys.executable).with_name("efold-controller"))
CAMPAIGN = """name = "priced"
suite = "original"
roles = ["native", "compaction"]
probe_limit = 2
cap_usd = "20.00"
[reader]
provider = "openai"
model = "gpt-5"
base_url = "https://api.openai.com/v1"
credential_env = "OPENAI_API_KEY"
"""


def _plan(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The campaign registered in a fresh directory under ``tmp_path``, then planned."""
    tmp_path = tmp_path / f"p{len(list(tmp_path.iterdir()))}"
    tmp_path.mkdir()
    (tmp_path / "c.toml").write_text(CAMPAIGN)
    done = subprocess.run([EFOLD, "register", "c.toml", "--output", "reg"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    sha = done.stdout.split("sha256: ")[1].strip()
    return subprocess.run([EFOLD, "plan", "--registration", "reg/registration.json",
                           "--sha256", sha, *extra], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)


def test_three_profiles_in_order_and_an_unknown_price_stays_unknown(tmp_path: Path) -> None:
    done = _plan(tmp_path, "--screening", "openai/gpt-5-mini", "--sensitivity",
                 "anthropic/claude-opus-4-6", "--sensitivity", "acme/unpriced", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    profiles = doc["profiles"]
    assert [(p["kind"], p["reader"]) for p in profiles] == [
        ("primary", "openai/gpt-5"), ("screening", "openai/gpt-5-mini"),
        ("sensitivity", "anthropic/claude-opus-4-6"), ("sensitivity", "acme/unpriced")]
    primary, screening, dearer, unpriced = profiles
    assert primary["expected_usd"] == doc["estimate"]["expected_usd"]  # the plan's own
    assert Decimal(screening["expected_usd"]) < Decimal(primary["expected_usd"]) \
        < Decimal(dearer["expected_usd"])
    assert unpriced["expected_usd"] is None and unpriced["per_slot_usd"] is None
    assert "no price" in unpriced["unknown"]
    # The plan's own figures are the registered reader's, whatever else is priced.
    alone = json.loads(_plan(tmp_path, "--json").stdout)
    assert alone["estimate"] == doc["estimate"] and "profiles" not in alone


def test_the_text_lists_each_profile_and_a_malformed_model_is_a_usage_error(
        tmp_path: Path) -> None:
    done = _plan(tmp_path, "--screening", "openai/gpt-5-mini", "--sensitivity",
                 "acme/unpriced")
    assert done.returncode == 0, done.stderr
    tail = done.stdout.split("price profiles")[1].splitlines()
    assert [line.split()[0] for line in tail[1:]] == ["primary", "screening", "sensitivity"]
    assert "unknown: no price" in tail[3]
    bad = _plan(tmp_path, "--sensitivity", "opus")
    assert bad.returncode == 2 and "provider/model" in bad.stderr


def test_profiles_price_a_registration_not_a_continuation(tmp_path: Path) -> None:
    done = subprocess.run([EFOLD, "plan", "--continue", str(tmp_path), "--screening",
                           "openai/gpt-5-mini"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--screening and --sensitivity price" in done.stderr


def test_a_model_asked_twice_or_padded_is_a_usage_error(tmp_path: Path) -> None:
    twice = _plan(tmp_path, "--screening", "openai/gpt-5-mini", "--sensitivity",
                  "openai/gpt-5-mini")
    assert twice.returncode == 2 and "each --screening and --sensitivity model once" \
        in twice.stderr
    padded = _plan(tmp_path, "--screening", " openai/gpt-5")
    assert padded.returncode == 2 and "provider/model" in padded.stderr
