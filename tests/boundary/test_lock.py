"""boundary.lock: revisions are locked, edits without a new version refuse (docs/boundary.md §3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from efold.boundary.case import load_cases
from efold.boundary.errors import BoundaryError
from efold.boundary.lock import LOCK_NAME, check_lock, lock_problems, read_lock, write_lock
from efold.errors import Code
from tests.boundary.conftest import CASE_ID, MakeCase, sidecar_data, write_sidecar


def _check(root: Path) -> None:
    check_lock(root, load_cases(root))


def _refused(root: Path, code: Code) -> str:
    with pytest.raises(BoundaryError) as info:
        _check(root)
    assert info.value.code is code, info.value
    return info.value.detail


def _lock(root: Path) -> list[tuple[str, str, int]]:
    return [(c.id, c.action, c.version) for c in write_lock(root, load_cases(root))]


def _edit_oracle(case_dir: Path, *, version: int = 1) -> None:
    data = sidecar_data()
    data["version"] = version
    data["oracle"]["success"].pop(1)  # drop the forbidden-path oracle: the test got easier
    write_sidecar(case_dir, data)


def test_an_unlocked_case_is_stale_until_locked(make_case: MakeCase, case_root: Path) -> None:
    make_case()
    assert "not locked yet; run `efold-controller boundary lock`" in _refused(
        case_root, Code.BOUNDARY_LOCK_STALE)
    assert _lock(case_root) == [(CASE_ID, "added", 1)]
    _check(case_root)
    lock = json.loads((case_root / LOCK_NAME).read_text())
    assert lock == {"version": 1, "cases": {CASE_ID: {
        "version": 1, "sha256": load_cases(case_root)[0].sha256}}}
    assert [p.name for p in case_root.iterdir() if p.name.startswith(".")] == []  # no temp


def test_relocking_an_unchanged_case_writes_nothing(make_case: MakeCase,
                                                    case_root: Path) -> None:
    make_case()
    _lock(case_root)
    before = (case_root / LOCK_NAME).stat()
    assert _lock(case_root) == [(CASE_ID, "unchanged", 1)]
    after = (case_root / LOCK_NAME).stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)


@pytest.mark.parametrize("edit", ["oracle", "session", "workspace", "new file"])
def test_an_edit_at_the_same_version_is_changed_and_never_relocked(
        make_case: MakeCase, case_root: Path, edit: str) -> None:
    case_dir = make_case()
    _lock(case_root)
    locked = (case_root / LOCK_NAME).read_bytes()
    if edit == "oracle":
        _edit_oracle(case_dir)
    elif edit == "session":
        with (case_dir / "session.jsonl").open("a") as f:
            f.write('{"kind":"message","id":"e0005","session":1,"day":1,"role":"user",'
                    '"content":"one more"}\n')
    elif edit == "workspace":
        (case_dir / "workspace" / "src" / "shop" / "api.py").write_text("def total(l): ...\n")
    else:
        (case_dir / "workspace" / "notes.md").write_text("a new file\n")
    detail = _refused(case_root, Code.BOUNDARY_CASE_CHANGED)
    assert f"{CASE_ID} v1 differs from its lock" in detail
    with pytest.raises(BoundaryError) as info:
        _lock(case_root)
    assert info.value.code is Code.BOUNDARY_CASE_CHANGED
    assert (case_root / LOCK_NAME).read_bytes() == locked


def test_a_new_version_is_stale_until_locked(make_case: MakeCase, case_root: Path) -> None:
    case_dir = make_case()
    _lock(case_root)
    _edit_oracle(case_dir, version=2)
    assert "v2 is not locked yet (locked: v1)" in _refused(case_root, Code.BOUNDARY_LOCK_STALE)
    assert _lock(case_root) == [(CASE_ID, "bumped", 2)]
    _check(case_root)
    assert read_lock(case_root).cases[CASE_ID].version == 2


def test_a_version_below_the_lock_refuses(make_case: MakeCase, case_root: Path) -> None:
    case_dir = make_case()
    _edit_oracle(case_dir, version=3)
    _lock(case_root)
    write_sidecar(case_dir, sidecar_data())  # version 1 again
    assert "at version 1, below the locked version 3" in _refused(
        case_root, Code.BOUNDARY_LOCK_STALE)
    with pytest.raises(BoundaryError) as info:
        _lock(case_root)
    assert info.value.code is Code.BOUNDARY_LOCK_STALE


def test_a_locked_case_that_is_gone_is_stale_and_locking_drops_it(
        make_case: MakeCase, case_root: Path, tmp_path: Path) -> None:
    make_case()
    other = make_case(lambda d: d.update(id="B02-other"))
    _lock(case_root)
    other.rename(tmp_path / "aside")
    assert "B02-other v1 is locked but its case is gone" in _refused(
        case_root, Code.BOUNDARY_LOCK_STALE)
    cases = load_cases(case_root)
    assert lock_problems(case_root, cases, complete=False) == []
    assert _lock(case_root) == [(CASE_ID, "unchanged", 1), ("B02-other", "dropped", 1)]
    _check(case_root)


@pytest.mark.parametrize("text", [
    "not json", '{"version": 2, "cases": {}}', '{"version": 1, "cases": {}, "extra": 1}',
    '{"version": 1, "cases": {"B01-x": {"version": 0, "sha256": "' + "0" * 64 + '"}}}',
    '{"version": 1, "cases": {"B01-x": {"version": 1, "sha256": "abc"}}}',
])
def test_a_lock_that_does_not_decode_refuses(make_case: MakeCase, case_root: Path,
                                             text: str) -> None:
    make_case()
    (case_root / LOCK_NAME).write_text(text)
    assert LOCK_NAME in _refused(case_root, Code.BOUNDARY_LOCK_STALE)


def test_problems_are_listed_per_case(make_case: MakeCase, case_root: Path) -> None:
    first = make_case()
    make_case(lambda d: d.update(id="B02-other"))
    _lock(case_root)
    _edit_oracle(first)
    make_case(lambda d: d.update(id="B03-new"))
    problems = lock_problems(case_root, load_cases(case_root))
    assert [(case_id, p.code) for case_id, p in problems] == [
        (CASE_ID, Code.BOUNDARY_CASE_CHANGED), ("B03-new", Code.BOUNDARY_LOCK_STALE)]
