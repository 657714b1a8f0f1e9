"""Arms the benchmark declares but efold does not run yet refuse at ``register`` with
their own code, distinct from an unknown arm, and no plugin may take their names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from efold.folds.registry import DECLARED_ARMS

EFOLD = str(Path(sys.executable).with_name("efold-controller"))
CAMPAIGN = """name = "declared"
suite = "original"
roles = ["native", "{arm}"]
probe_limit = 1
"""


def _register(tmp_path: Path, arm: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "c.toml").write_text(CAMPAIGN.format(arm=arm))
    return subprocess.run([EFOLD, "register", "c.toml", "--output", "reg"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("arm", sorted(DECLARED_ARMS))
def test_a_declared_arm_refuses_with_its_id(tmp_path: Path, arm: str) -> None:
    done = _register(tmp_path, arm)
    assert done.returncode == 2
    assert done.stderr.startswith(f"refused: arm_not_available_at_revision ({arm}: "), \
        done.stderr
    assert "not available at this revision" in done.stderr
    assert not (tmp_path / "reg").exists()


def test_an_unknown_arm_is_not_a_declared_one(tmp_path: Path) -> None:
    done = _register(tmp_path, "pack-per-tern")
    assert done.returncode == 2 and done.stderr.startswith("refused: campaign_invalid"), \
        done.stderr
    assert "unknown arm 'pack-per-tern'" in done.stderr
