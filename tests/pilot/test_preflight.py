"""Preflight: real prep children in a private temporary root, tree limits, dry restore."""

from __future__ import annotations

import json
from pathlib import Path

from efold_pilot_kit import faulty_program, small_registration

from efold.controller.pilot.preflight import run_preflight
from efold.errors import Code


def test_preflight_passes_and_removes_its_root(tmp_path: Path) -> None:
    reg, raw = small_registration()
    roots: list[Path] = []
    report = run_preflight(reg, raw, keep_root=roots)
    assert report.ok and report.checkpoints == 8  # 2 roles x 4 traces
    assert len(report.slots) == 16
    assert all(s.files >= 2 and s.bytes > 0 and s.largest_bytes <= s.bytes for s in report.slots)
    assert all(s.prepare_ms <= s.watchdog_ms for s in report.slots)
    assert not roots[0].exists()


def test_preflight_fails_on_a_planted_symlink(tmp_path: Path) -> None:
    reg, raw = small_registration(roles='["native"]')
    report = run_preflight(reg, raw, program=faulty_program("symlink", tmp_path / "m"))
    assert not report.ok
    bad = [s for s in report.slots if not s.ok]
    assert bad and {s.code for s in bad} == {Code.PREFLIGHT_TREE_INVALID.value}
    assert all(s.rejected == {"symlink": 1} for s in bad)


def test_preflight_fails_on_an_oversized_file(tmp_path: Path) -> None:
    reg, raw = small_registration(roles='["native"]')
    report = run_preflight(reg, raw, program=faulty_program("oversized", tmp_path / "m"))
    assert not report.ok
    bad = [s for s in report.slots if not s.ok]
    # (under umask 002 the planted file is also group-writable, and is said so too)
    assert bad and all(s.rejected.get("file_too_large") == 1 for s in bad)
    assert all(s.largest_bytes == 64 * 1024 * 1024 + 1 for s in bad)


def test_preflight_cli_exits_nonzero_on_failure(tmp_path: Path) -> None:
    import subprocess
    import sys

    from efold.controller.campaigns.registration import write_registration

    reg, _ = small_registration()
    path, sha = write_registration(reg, tmp_path / "reg")
    ok = subprocess.run(
        [sys.executable, "-m", "efold.controller", "preflight", "--registration", str(path),
         "--sha256", sha], capture_output=True, text=True, timeout=300,
    )
    assert ok.returncode == 0, ok.stderr
    # A summary, not a JSON object per slot: the report itself only with --json.
    full = subprocess.run(
        [sys.executable, "-m", "efold.controller", "preflight", "--registration", str(path),
         "--sha256", sha, "--json"], capture_output=True, text=True, timeout=300,
    )
    assert full.returncode == 0, full.stderr
    doc = json.loads(full.stdout)
    slots = len(doc["slots"])
    assert doc["ok"] is True and slots > 1
    lines = ok.stdout.splitlines()
    assert lines[:4] == ["preflight: ok",
                         f"slots: {slots} (eligible {slots}), "
                         f"checkpoints: {doc['checkpoints']}",
                         "failures: none", "inventory-infeasible checkpoints: 0"]
    snapshots = sum({s["checkpoint"]: s["bytes"] for s in doc["slots"]}.values())
    largest = max(s["largest_bytes"] for s in doc["slots"])
    assert lines[4].startswith(f"bytes: {snapshots:,} in snapshots, largest file {largest:,} (")
    assert len(lines) == 5
    wrong = subprocess.run(
        [sys.executable, "-m", "efold.controller", "preflight", "--registration", str(path),
         "--sha256", "0" * 64], capture_output=True, text=True, timeout=60,
    )
    assert wrong.returncode == 2 and "registration_digest_mismatch" in wrong.stderr


def test_preflight_fails_when_a_prep_child_leaves_a_process_behind(tmp_path: Path) -> None:
    reg, raw = small_registration(roles='["native"]')
    report = run_preflight(reg, raw, program=faulty_program("prep-survivor", tmp_path / "m"))
    assert not report.ok
    assert {s.code for s in report.slots} == {Code.LOOKUP_WORKER_LOST.value}
