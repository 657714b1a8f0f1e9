"""``prune``, on real faux runs: only reconciled runs nobody holds go, whole or their
``slots/`` only; an unreconciled run, a live one and anything that is not a run stay
untouched whatever the options; ``--dry-run`` removes nothing; a planted symlink is never
followed; ``--slots-only`` leaves ``aggregate`` byte-identical."""

from __future__ import annotations

import json
import os
import pty
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pilot"))

from efold_pilot_kit import faulty_program, small_registration

from efold.controller.cli import main
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.prune import Selection, parse_duration, plan_prune
from efold.controller.rundirs.run_index import find_runs
from efold.controller.rundirs.runroot import MAX_REMOVAL_DEPTH, claim_run_dir


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``complete`` (a clean run) and ``stopped`` (by its cap, with a contained launch),
    made once; each test copies them into its own root."""
    base = tmp_path_factory.mktemp("made")
    reg, raw = small_registration()
    run_pilot(reg, raw, claim_run_dir(base / "complete"))
    time.sleep(0.01)
    reg, raw = small_registration(cap="5.00")
    run_pilot(reg, raw, claim_run_dir(base / "stopped"),
              program=faulty_program("kill-after-admit", base / "marker"))
    return base


def _copy(made: Path, name: str, root: Path, as_name: str | None = None) -> Path:
    return Path(shutil.copytree(made / name, root / (as_name or name), symlinks=True))


def _unreconcile(run: Path) -> None:
    """As a controller that died mid-launch leaves it: a probe launch without an exit."""
    conn = sqlite3.connect(run / "journal.sqlite")
    with conn:
        conn.execute("UPDATE launches SET exited_ns = NULL, exit_status = NULL WHERE"
                     " launch_id = (SELECT MAX(launch_id) FROM launches WHERE kind = 'probe')")
    conn.close()


@pytest.fixture
def root(made: Path, tmp_path: Path) -> Path:
    """complete, stopped, unrec (unreconciled), notarun (no journal), and a symlink to a
    run outside ROOT."""
    runs = tmp_path / "efold-runs"
    runs.mkdir(mode=0o700)
    _copy(made, "complete", runs)
    _copy(made, "stopped", runs)
    _unreconcile(_copy(made, "complete", runs, "unrec"))
    (runs / "notarun").mkdir()
    (runs / "notarun" / "plan.json").write_text("{}")
    outside = _copy(made, "complete", tmp_path, "outside-run")
    os.symlink(outside, runs / "linked")
    return runs


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, ["prune", *args], terminal_width=200)


def tree(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(path)): (p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in path.rglob("*")}


def du(path: Path) -> int:
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return int(out.split()[0])


def _line(stdout: str, name: str) -> str:
    (line,) = [row for row in stdout.splitlines() if row.startswith(name + " ")]
    return line


def test_dry_run_lists_sizes_and_removes_nothing(root: Path, tmp_path: Path) -> None:
    before = tree(tmp_path)
    done = invoke(str(root), "--dry-run")
    assert done.exit_code == 1, done.output  # a run is kept: unrec
    assert tree(tmp_path) == before
    complete = _line(done.stdout, "complete")
    assert "complete" in complete.split()[2] and complete.endswith("would remove run")
    assert f"{du(root / 'complete'):,}" in complete
    assert _line(done.stdout, "stopped").split()[2:4] == ["stopped", "(not_admitted_cap)"]
    assert _line(done.stdout, "unrec").endswith("kept: prune_unreconciled")
    total = du(root / "complete") + du(root / "stopped")
    assert f"Would free {total:,} bytes: 2 run(s), 1 kept; nothing was removed." in done.stdout
    assert "note: notarun: not a run directory" in done.stdout
    assert "note: linked: a symlink: never followed" in done.stdout
    assert done.stderr.startswith("kept: prune_unreconciled (unrec: status unreconciled")


def test_json_is_one_document(root: Path) -> None:
    done = invoke(str(root), "--dry-run", "--json")
    doc = json.loads(done.stdout)
    assert doc["applied"] is False and doc["slots_only"] is False
    actions = {e["name"]: (e["action"], e["code"]) for e in doc["runs"]}
    assert actions == {"complete": ("remove", None), "stopped": ("remove", None),
                       "unrec": ("keep", "prune_unreconciled")}
    assert doc["removable_bytes"] == du(root / "complete") + du(root / "stopped")
    assert doc["freed_bytes"] == 0
    assert {n["name"] for n in doc["notes"]} == {"notarun", "linked"}


def test_yes_removes_the_reconciled_runs_and_nothing_else(root: Path, tmp_path: Path) -> None:
    sizes = du(root / "complete") + du(root / "stopped")
    unrec, notarun = tree(root / "unrec"), tree(root / "notarun")
    outside = tree(tmp_path / "outside-run")
    done = invoke(str(root), "--yes")
    assert done.exit_code == 1, done.output
    assert sorted(os.listdir(root)) == ["linked", "notarun", "unrec"]
    assert tree(root / "unrec") == unrec and tree(root / "notarun") == notarun
    assert tree(tmp_path / "outside-run") == outside and os.path.islink(root / "linked")
    assert _line(done.stdout, "complete").endswith("removed run")
    assert f"Freed {sizes:,} bytes: 2 run(s) removed, 1 kept." in done.stdout
    assert "kept: prune_unreconciled (unrec:" in done.stderr
    # Asked again: the unreconciled run is still refused, and still there.
    again = invoke(str(root), "--yes", "--run", "unrec")
    assert again.exit_code == 1 and (root / "unrec" / "journal.sqlite").exists()


def test_without_yes_and_without_a_terminal_nothing_goes(root: Path) -> None:
    before = tree(root)
    done = invoke(str(root))
    assert done.exit_code == 2 and done.stdout == ""
    assert done.stderr.startswith("refused: prune_not_confirmed (stdin is not a terminal")
    assert tree(root) == before


_PROMPTED = textwrap.dedent("""
    import sys
    from efold.controller.cli import main
    main(["prune", sys.argv[1], "--run", "complete"])
""")


def _prompted(root: Path, answer: bytes) -> subprocess.CompletedProcess[str]:
    """``prune`` with stdin on a terminal (a pty), answering the prompt with ``answer``."""
    leader, follower = pty.openpty()
    try:
        os.write(leader, answer)
        return subprocess.run([sys.executable, "-c", _PROMPTED, str(root)], stdin=follower,
                              capture_output=True, text=True, timeout=120)
    finally:
        os.close(follower)
        os.close(leader)


def test_in_a_terminal_it_asks_and_no_keeps_everything(root: Path) -> None:
    before = tree(root)
    declined = _prompted(root, b"n\n")
    assert declined.returncode == 2, declined.stderr
    assert "Remove 1 run(s)," in declined.stderr
    assert "refused: prune_not_confirmed (declined" in declined.stderr
    assert tree(root) == before
    accepted = _prompted(root, b"y\n")
    assert accepted.returncode == 0, accepted.stderr
    assert not (root / "complete").exists() and (root / "stopped").is_dir()


def test_a_live_run_is_refused_even_with_yes(root: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom efold.registry.lease import acquire_lease\n"
         "lease = acquire_lease(sys.argv[1])\nprint('ready', flush=True)\nsys.stdin.read()",
         str(root / "complete")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        before = tree(root / "complete")
        done = invoke(str(root), "--yes", "--run", "complete", "--run", "stopped")
        assert done.exit_code == 1, done.output
        assert _line(done.stdout, "complete").endswith("kept: prune_run_live")
        assert "kept: prune_run_live (complete: a controller or reap holds" in done.stderr
        assert tree(root / "complete") == before
        assert not (root / "stopped").exists()
    finally:
        holder.kill()
        holder.communicate()


def test_a_symlink_planted_in_a_run_is_never_followed(root: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "data").write_text("precious")
    run = root / "complete"
    os.symlink(victim, run / "planted")
    slot = next((run / "slots").iterdir())
    os.symlink(victim, slot / "checkpoint")
    os.symlink(victim / "data", run / "receipts" / ".data.tmp-1")
    done = invoke(str(root), "--yes", "--run", str(run))
    assert done.exit_code == 0, done.output
    assert not os.path.lexists(run)
    assert (victim / "data").read_text() == "precious"


def _aggregate(run: Path) -> bytes:
    done = CliRunner().invoke(main, ["aggregate", str(run), "--json"])
    assert done.exit_code == 0, done.output
    return done.stdout_bytes


def test_slots_only_keeps_aggregate_byte_identical(root: Path, tmp_path: Path) -> None:
    names = ("complete", "stopped")
    for name in names:
        (root / name / "slots" / "extra").mkdir()
        (root / name / "slots" / "extra" / "scratch").write_bytes(b"x" * 10_000)

    def reports(suffix: str) -> dict[str, tuple[bytes, bytes, bytes]]:
        out: dict[str, tuple[bytes, bytes, bytes]] = {}
        for name in names:
            where = tmp_path / f"{name}-{suffix}"
            done = CliRunner().invoke(main, ["aggregate", str(root / name), "--json",
                                             "--output", str(where)])
            assert done.exit_code == 0, done.output
            out[name] = (done.stdout_bytes, (where / "results.json").read_bytes(),
                         (where / "summary.md").read_bytes())
        return out

    before = reports("before")
    kept = {name: {k: v for k, v in tree(root / name).items() if not k.startswith("slots")}
            for name in names}
    slots = du(root / "complete" / "slots") + du(root / "stopped" / "slots")
    done = invoke(str(root), "--slots-only", "--yes", "--run", "complete", "--run", "stopped")
    assert done.exit_code == 0, done.output
    assert f"Freed {slots:,} bytes: slots/ of 2 run(s) removed." in done.stdout
    for name in names:
        assert not (root / name / "slots").exists()
        assert tree(root / name) == kept[name]
    assert reports("after") == before
    # A second pass finds nothing left to remove and frees nothing.
    again = invoke(str(root), "--slots-only", "--yes", "--run", "complete")
    assert again.exit_code == 0 and "Freed 0 bytes" in again.stdout


def test_a_removal_that_leaves_something_keeps_the_records(root: Path) -> None:
    run = root / "complete"
    deep = run / "slots"
    for _ in range(MAX_REMOVAL_DEPTH + 2):
        deep = deep / "d"
    deep.mkdir(parents=True)
    done = invoke(str(root), "--yes", "--run", "complete")
    assert done.exit_code == 1, done.output
    assert _line(done.stdout, "complete").endswith("partly removed: prune_incomplete")
    assert "kept: prune_incomplete (complete: 1 entries could not be removed)" in done.stderr
    # Still a run directory: its records stay, the rest is gone.
    assert sorted(os.listdir(run)) == [".efold-lease", "journal.sqlite", "plan.json",
                                       "registration.json", "slots"]
    assert [os.path.basename(f.path) for f in find_runs(root)].count("complete") == 1


def test_older_than_and_keep_select_at_the_exact_boundary(root: Path) -> None:
    found = {os.path.basename(f.path): f.started_ns for f in find_runs(root)}
    oldest = min(found.values())
    week = parse_duration("7d")
    assert week == 7 * 86_400 * 1_000_000_000

    def selected(now: int, selection: Selection) -> list[str]:
        return sorted(e.name for e in plan_prune(str(root), selection, now_ns=now).runs)

    newest = max(found.values())
    older = sorted(n for n, s in found.items() if s == oldest)
    assert selected(oldest + week, Selection(older_than_ns=week)) == []
    assert selected(oldest + week + 1, Selection(older_than_ns=week)) == older
    assert selected(newest + week + 1, Selection(older_than_ns=week)) == sorted(found)
    newest_name = max(found, key=lambda n: (found[n], n))
    assert selected(newest, Selection(keep=1)) == sorted(set(found) - {newest_name})
    assert selected(newest, Selection(keep=0)) == sorted(found)
    assert selected(newest, Selection(keep=len(found))) == []


def test_refusals_and_usage_errors_remove_nothing(root: Path, tmp_path: Path) -> None:
    before = tree(tmp_path)
    (tmp_path / "file").write_text("x")
    for args, why in (([str(tmp_path / "missing")], "no such directory"),
                      ([str(tmp_path / "file")], "not a directory"),
                      ([str(root / "linked")], "linked")):
        done = invoke(*args, "--yes")
        assert done.exit_code == 2, (args, done.output)
        assert done.stderr.startswith("refused: runs_root_invalid (") and why in done.stderr
    for name in ("nope", "notarun", "linked", str(tmp_path / "outside-run")):
        done = invoke(str(root), "--yes", "--run", name)
        assert done.exit_code == 2 and done.stderr.startswith("refused: run_not_found (")
    usage = invoke(str(root), "--run", "complete", "--keep", "1")
    assert usage.exit_code == 2 and "--run names runs exactly" in usage.output
    bad = invoke(str(root), "--older-than", "7 days")
    assert bad.exit_code == 2 and "is not a duration" in bad.output
    (tmp_path / "file").unlink()
    assert tree(tmp_path) == before


def test_an_empty_root_has_nothing_to_prune(tmp_path: Path) -> None:
    done = invoke(str(tmp_path), "--yes")
    assert done.exit_code == 0 and done.stdout.startswith(f"No run to prune under {tmp_path}.")
