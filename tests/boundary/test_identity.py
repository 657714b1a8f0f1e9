"""Environment identity: the fixture's digests, the run's catalog, prompt and route (§3)."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from efold.boundary.actions import tree_version
from efold.boundary.case import load_case, tree_digest
from efold.boundary.identity import (
    ABSENT,
    RouteIdentity,
    environment_identity,
    fixture_identity,
    identity_digest,
)
from efold.digests import build_digest, file_sha256
from tests.boundary.conftest import MakeCase

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "workspace_read", "description": "Read a file.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
]


def _with_more_oracles(data: dict[str, Any]) -> None:
    data["oracle"]["success"] += [
        {"type": "artifact-exists", "path": "NOTES.md", "contains": "threshold"},
        {"type": "forbidden-path-unchanged", "path": "tests"},
    ]


def test_fixture_identity_names_every_oracle_file(make_case: MakeCase) -> None:
    path = make_case(_with_more_oracles)
    case = load_case(path)
    ident = fixture_identity(case)
    assert (ident.case_id, ident.case_version, ident.case_sha256) == (
        case.id, 1, case.sha256)
    assert ident.workspace_sha256 == tree_digest(path / "workspace")
    # the workspace digest is the environment version actions record for the same tree
    assert ident.workspace_sha256 == tree_version(path / "workspace")
    assert ident.oracle_files == {
        "workspace/NOTES.md": ABSENT,
        "workspace/src/shop/api.py": file_sha256(path / "workspace/src/shop/api.py"),
        "workspace/src/shop/pricing.py": file_sha256(path / "workspace/src/shop/pricing.py"),
        "workspace/tests": tree_digest(path / "workspace/tests"),
        "workspace.expected/src/shop/pricing.py":
            file_sha256(path / "workspace.expected/src/shop/pricing.py"),
    }


def test_the_run_identity_binds_catalog_prompt_and_route(make_case: MakeCase) -> None:
    case = load_case(make_case())
    route = RouteIdentity(provider="faux", model="faux-agent-v1", api="responses",
                          effort="low")
    base = environment_identity(case, tool_catalog=TOOLS, system_prompt="You edit code.",
                                route=route)
    assert base.route == route and base.python is None and base.build_sha256 is None
    same = environment_identity(case, tool_catalog=[dict(TOOLS[0])],
                                system_prompt="You edit code.", route=route)
    assert identity_digest(same) == identity_digest(base)
    other_tools = [{**TOOLS[0], "description": "Read a file (first 20000 characters)."}]
    for changed in (
        environment_identity(case, tool_catalog=other_tools, system_prompt="You edit code.",
                             route=route),
        environment_identity(case, tool_catalog=TOOLS, system_prompt="You edit code!",
                             route=route),
        environment_identity(case, tool_catalog=TOOLS, system_prompt="You edit code.",
                             route=RouteIdentity(provider="faux", model="faux-agent-v1",
                                                 api="responses", effort="high")),
        environment_identity(case, tool_catalog=TOOLS, system_prompt="You edit code."),
    ):
        assert identity_digest(changed) != identity_digest(base)


def test_a_workspace_edit_changes_the_identity(make_case: MakeCase) -> None:
    path = make_case()
    before = fixture_identity(load_case(path))
    (path / "workspace" / "src" / "shop" / "api.py").write_text("# changed\n")
    after = fixture_identity(load_case(path))
    assert after.workspace_sha256 != before.workspace_sha256
    assert after.oracle_files["workspace/src/shop/api.py"] != before.oracle_files[
        "workspace/src/shop/api.py"]


def test_a_real_run_records_python_efold_and_build(make_case: MakeCase) -> None:
    case = load_case(make_case())
    real = environment_identity(case, tool_catalog=TOOLS, system_prompt="p", real=True,
                                route=RouteIdentity(provider="openai", model="m",
                                                    api="responses", temperature=0.0,
                                                    seed=7))
    assert real.python == platform.python_version()
    assert real.efold_version and real.build_sha256 == build_digest()
    assert real.route is not None and (real.route.temperature, real.route.seed) == (0.0, 7)


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"})
    return done.stdout.strip()


def test_a_real_run_records_the_commit_of_the_cases_repository(make_case: MakeCase,
                                                               case_root: Path) -> None:
    """A case in a git repository: a live run records the commit checked out (read from
    the repository's files: a branch ref, then packed, then a detached HEAD, then from a
    linked worktree); outside any repository, or offline, none."""
    case = load_case(make_case())
    assert environment_identity(case, tool_catalog=TOOLS, system_prompt="p",
                                real=True).case_commit is None
    _git(case_root, "init", "-q")
    _git(case_root, "add", "-A")
    _git(case_root, "commit", "-qm", "cases")
    head = _git(case_root, "rev-parse", "HEAD")

    def commit() -> str | None:
        return environment_identity(case, tool_catalog=TOOLS, system_prompt="p",
                                    real=True).case_commit

    assert commit() == head
    _git(case_root, "pack-refs", "--all")
    assert commit() == head
    _git(case_root, "checkout", "-q", "--detach")
    assert commit() == head
    offline = environment_identity(case, tool_catalog=TOOLS, system_prompt="p")
    assert offline.case_commit is None
    linked = case_root.parent / "linked"
    _git(case_root, "worktree", "add", "-q", "--detach", str(linked), head)
    moved = load_case(linked / case.path.name)
    assert environment_identity(moved, tool_catalog=TOOLS, system_prompt="p",
                                real=True).case_commit == head


def test_a_repository_s_files_are_read_bounded_and_never_block(tmp_path: Path) -> None:
    """What a case's repository holds is the user's: a FIFO or a device where HEAD
    should be, a huge HEAD, a .git that cannot be read, or a path through ``..`` into
    another tree, each gives no commit (or the right one), never a hang or an error."""
    from efold.boundary.identity import vcs_commit

    repo = tmp_path / "r"
    (repo / ".git" / "refs" / "heads").mkdir(parents=True)
    (repo / "cases").mkdir()
    head = "ab" * 20
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git" / "refs" / "heads" / "main").write_text(head + "\n")
    assert vcs_commit(repo / "cases") == head
    other = tmp_path / "other" / "cases"
    other.mkdir(parents=True)
    assert vcs_commit(repo / "cases" / ".." / ".." / "other" / "cases") is None
    (repo / ".git" / "refs" / "heads" / "main").unlink()
    os.mkfifo(repo / ".git" / "refs" / "heads" / "main")
    assert vcs_commit(repo / "cases") is None  # a FIFO: not read, no hang
    (repo / ".git" / "HEAD").unlink()
    (repo / ".git" / "HEAD").symlink_to("/dev/zero")
    assert vcs_commit(repo / "cases") is None
    (repo / ".git" / "HEAD").unlink()
    with open(repo / ".git" / "HEAD", "wb") as f:
        f.truncate(3 * 1024**3)  # sparse: 3 GB that is never read
    assert vcs_commit(repo / "cases") is None
