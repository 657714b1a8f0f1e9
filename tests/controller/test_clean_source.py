"""``pilot --require-clean-source``: a command fold whose script sits in a git checkout
runs only when the checkout is clean; real git repositories, the real command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from open_campaign_kit import guide_example

from efold.controller.campaigns.clean_source import unclean_checkouts

EFOLD = str(Path(sys.executable).with_name("efold-controller"))


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


def committed_fold(tmp_path: Path) -> Path:
    repo = tmp_path / "folds"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "facts_tail.py").write_text(guide_example("command-fold"))
    git(repo, "add", "facts_tail.py")
    git(repo, "commit", "-q", "-m", "the fold")
    return repo


def test_a_clean_checkout_passes_and_each_kind_of_change_is_named(tmp_path: Path) -> None:
    repo = committed_fold(tmp_path)
    fold = [repo / "facts_tail.py"]
    assert unclean_checkouts(fold) == {}
    assert unclean_checkouts([tmp_path / "outside.py"]) == {}  # no checkout: nothing to check
    (repo / "notes.txt").write_text("untracked")
    assert "1 uncommitted change(s): notes.txt" in unclean_checkouts(fold)[str(repo)]
    (repo / "notes.txt").unlink()
    (repo / "facts_tail.py").write_text("# edited\n" + guide_example("command-fold"))
    assert "facts_tail.py" in unclean_checkouts(fold)[str(repo)]
    git(repo, "update-index", "--skip-worktree", "facts_tail.py")  # hides the edit
    assert "skip-worktree" in unclean_checkouts(fold)[str(repo)]


def test_an_ignored_fold_file_and_one_reached_through_a_link_are_checked(
        tmp_path: Path) -> None:
    repo = committed_fold(tmp_path)
    (repo / ".gitignore").write_text("other.py\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore")
    (repo / "other.py").write_text(guide_example("command-fold"))
    assert unclean_checkouts([repo / "other.py"]) == {
        str(repo): "fold files not committed: other.py"}  # git status hides it
    elsewhere = tmp_path / "links"
    elsewhere.mkdir()
    (elsewhere / "fold.py").symlink_to(repo / "facts_tail.py")
    (repo / "facts_tail.py").write_text("# edited\n" + guide_example("command-fold"))
    from efold.controller.campaigns.campaign import Role
    from efold.controller.campaigns.clean_source import fold_files

    role = Role(name="linked", arm="linked", instructions="",
                command=[sys.executable, str(elsewhere / "fold.py")])
    files, _ = fold_files(role)
    assert files == [repo / "facts_tail.py"]  # the link resolved into its checkout
    assert "facts_tail.py" in unclean_checkouts(files)[str(repo)]


CAMPAIGN = """name = "clean"
suite = "original"
roles = ["native", "facts-tail"]
probe_limit = 1
traces = ["orig-archive-scan"]
cap_usd = "60.00"
[role.facts-tail]
command = [{python}, {script}]
"""


@pytest.mark.parametrize("dirty", [False, True])
def test_pilot_runs_a_committed_fold_and_refuses_a_changed_one(tmp_path: Path,
                                                               dirty: bool) -> None:
    repo = committed_fold(tmp_path)
    (tmp_path / "c.toml").write_text(CAMPAIGN.format(
        python=json.dumps(sys.executable), script=json.dumps(str(repo / "facts_tail.py"))))
    if dirty:
        (repo / "facts_tail.py").write_text("# edited\n" + guide_example("command-fold"))
    done = subprocess.run([EFOLD, "pilot", "--faux", "--campaign", "c.toml", "--quiet",
                           "--require-clean-source"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    if dirty:
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.startswith(f"refused: fold_source_unclean ({repo}: 1 uncommitted")
        assert not (tmp_path / "efold-runs").exists()
    else:
        assert done.returncode == 0, done.stdout + done.stderr
