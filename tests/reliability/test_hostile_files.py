"""Hostile files: every planted link, shared-writable directory or misplaced run root is
refused with a fixed code, nothing is followed, nothing is written through the link, and
nothing already there is lost.

Each hostile entry is planted at the moment the controller would create or trust the
real one: before the run (the run root, the lease, the journal, the burn registry), or
from a hook around the lower-level step (``private_subdir``, ``inspect_tree``,
``run_probe``, ``consume_faux``) while a real faux pilot runs with real children.

The journal is opened without following a link anywhere in its path: a symlinked,
dangling or hard-linked ``journal.sqlite`` is refused before SQLite touches it.
"""

from __future__ import annotations

import contextlib
import grp
import hashlib
import os
import pwd
import shutil
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from efold_pilot_kit import small_registration
from ordinary_user import needs_root

import efold.controller.pilot.pilot as pilot
import efold.controller.rundirs.authorize_run as authorize_run
import efold.digests as digests
from efold.controller.campaigns.registration import Registration, load_registration
from efold.controller.pilot.slots import run_probe
from efold.controller.processes.tree import inspect_tree
from efold.controller.rundirs.runroot import claim_run_dir, new_run_dir, private_subdir
from efold.errors import Code, EfoldError
from efold.protocol.records import SlotStatus
from efold.registry.authorization import (
    FAUX_ACCOUNT_ID,
    AuthorizationBindings,
    AuthorizationDomain,
    mint_faux_authorization,
)
from efold.registry.burn import (
    CLAIM_NAME,
    CONSUMED_MARKER,
    FAUX_REGISTRY_NAME,
    consume_authorization,
    registry_key,
    verify_consumption,
)
from efold.registry.files import make_private_dir
from efold.registry.journal import JOURNAL_NAME, JournalWriter
from efold.registry.lease import LEASE_NAME, acquire_lease, probe_lease

# -- helpers ----------------------------------------------------------------------------


def _refused(call: Callable[[], object]) -> Code:
    """The fixed code ``call`` refuses with (an EfoldError, never wrapped in a group: the
    command turns exactly that into ``refused: CODE`` and exit 2)."""
    with pytest.raises(EfoldError) as info:
        call()
    return info.value.code


def _state(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Everything under ``root`` (lstat, never followed): kind and content."""
    found: dict[str, tuple[str, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                found[rel] = ("dir", b"")
            else:
                found[rel] = ("file", path.read_bytes())
    return found


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A directory a hostile link points at; it must come out exactly as it went in."""
    target = tmp_path / "victim"
    target.mkdir(mode=0o700)
    (target / "keep.txt").write_bytes(b"precious")
    os.chmod(target / "keep.txt", 0o600)
    return target


@pytest.fixture
def native() -> tuple[Registration, bytes]:
    return small_registration(roles='["native"]')


def _patch_everywhere(monkeypatch: pytest.MonkeyPatch, original: Any, replacement: Any) -> None:
    """Replace ``original`` under every name an efold module imported it by, so a hook
    survives the controller's code moving between modules."""
    import efold.controller.pilot.pilot  # noqa: F401  (the pilot's modules are all loaded)

    for name, module in list(sys.modules.items()):
        if name == "efold" or name.startswith("efold."):
            for attr, value in list(vars(module).items()):
                if value is original:
                    monkeypatch.setattr(module, attr, replacement)


def _pilot(reg_raw: tuple[Registration, bytes], run: Path) -> Any:
    reg, raw = reg_raw
    return pilot.run_pilot(reg, raw, run)


# -- 1. links planted in the run root ---------------------------------------------------


def test_a_symlinked_runs_parent_is_refused_and_nothing_lands_in_its_target(
        tmp_path: Path, victim: Path) -> None:
    before = _state(victim)
    runs = tmp_path / "runs"
    os.symlink(victim, runs)
    assert _refused(lambda: new_run_dir(runs, "small")) is Code.PATH_REFUSED
    assert _refused(lambda: claim_run_dir(runs / "exact")) is Code.PATH_REFUSED
    # a link further up, with missing directories below it
    assert _refused(lambda: claim_run_dir(runs / "a" / "b" / "run")) is Code.PATH_REFUSED
    assert _state(victim) == before


def test_a_link_at_the_run_directory_itself_is_an_existing_run_root(
        tmp_path: Path, victim: Path) -> None:
    before = _state(victim)
    os.symlink(victim, tmp_path / "to-dir")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    for name in ("to-dir", "dangling"):
        assert _refused(lambda n=name: claim_run_dir(tmp_path / n)) is Code.RUN_ROOT_EXISTS
    assert not (tmp_path / "nowhere").exists()
    assert _state(victim) == before


def test_private_subdir_refuses_planted_links_and_creates_nothing_through_them(
        tmp_path: Path, victim: Path) -> None:
    before = _state(victim)
    run = claim_run_dir(tmp_path / "run")
    # the last part already there as a link (to a directory, or dangling)
    os.symlink(victim, run / "receipts")
    assert _refused(lambda: private_subdir(run, "receipts")) is Code.PRIVATE_DIR_REFUSED
    os.symlink(tmp_path / "nowhere", run / "traces")
    assert _refused(lambda: private_subdir(run, "traces")) is Code.PRIVATE_DIR_REFUSED
    assert not (tmp_path / "nowhere").exists()
    # an intermediate part swapped for a link after it was created
    private_subdir(run, "checkpoints")
    os.rename(run / "checkpoints", tmp_path / "moved")
    os.symlink(victim, run / "checkpoints")
    assert _refused(lambda: private_subdir(run, "checkpoints", "c0")) is Code.PRIVATE_DIR_REFUSED
    # a link at a parent of the run
    os.symlink(run, tmp_path / "alias")
    assert _refused(lambda: private_subdir(tmp_path / "alias", "slots")) is Code.PATH_REFUSED
    # an intermediate part that others may write in
    private_subdir(run, "slots")
    os.chmod(run / "slots", 0o777)
    assert _refused(lambda: private_subdir(run, "slots", "s0")) is Code.PRIVATE_DIR_REFUSED
    assert _state(victim) == before
    assert not (run / "slots" / "s0").exists() and os.listdir(tmp_path / "moved") == []


def _plant_at_subdir(monkeypatch: pytest.MonkeyPatch, first: str, depth: int,
                     plant: Callable[[Path], None]) -> list[Path]:
    """Wrap the pilot's ``private_subdir``: the first time it is asked for a
    ``first/...`` path of ``depth`` parts, ``plant`` runs on that path just before."""
    real = private_subdir
    planted: list[Path] = []

    def hooked(run: Path, *parts: str, durable: bool = True) -> Path:
        if not planted and parts[0] == first and len(parts) == depth:
            target = run.joinpath(*parts)
            plant(target)
            planted.append(target)
        return real(run, *parts, durable=durable)

    _patch_everywhere(monkeypatch, real, hooked)
    return planted


@pytest.mark.parametrize(("first", "depth"), [
    ("checkpoints", 2),  # <run>/checkpoints/<key>, before the prep child
    ("slots", 2),  # <run>/slots/<slot>, before the probe child
    ("receipts", 1),  # <run>/receipts, before the first receipt
])
def test_a_link_planted_where_the_pilot_creates_a_run_directory_is_refused(
        tmp_path: Path, victim: Path, native: tuple[Registration, bytes],
        monkeypatch: pytest.MonkeyPatch, first: str, depth: int) -> None:
    """Refused, nothing written through the link. A slot's own directory refuses that
    slot and stops the run (the reports still come); the others refuse the run."""
    before = _state(victim)
    planted = _plant_at_subdir(monkeypatch, first, depth, lambda p: os.symlink(victim, p))
    run = claim_run_dir(tmp_path / "run")
    if first == "slots":
        out = _pilot(native, run)
        assert out.stop_code is Code.PRIVATE_DIR_REFUSED
        assert out.receipts[0].code == Code.PRIVATE_DIR_REFUSED.value
        assert (run / "results.json").is_file()
    else:
        assert _refused(lambda: _pilot(native, run)) is Code.PRIVATE_DIR_REFUSED
    assert planted and planted[0].is_symlink()
    assert _state(victim) == before


def test_a_checkpoints_directory_swapped_for_a_link_mid_run_is_refused(
        tmp_path: Path, victim: Path, native: tuple[Registration, bytes],
        monkeypatch: pytest.MonkeyPatch) -> None:
    before = _state(victim)

    def swap(target: Path) -> None:
        parent = target.parent
        os.rename(parent, tmp_path / "moved-checkpoints")
        os.symlink(victim, parent)

    _plant_at_subdir(monkeypatch, "checkpoints", 2, swap)
    run = claim_run_dir(tmp_path / "run")
    assert _refused(lambda: _pilot(native, run)) is Code.PRIVATE_DIR_REFUSED
    assert _state(victim) == before


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_link_at_a_trace_file_is_refused_and_its_target_kept(
        tmp_path: Path, victim: Path, native: tuple[Registration, bytes],
        monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    from efold.controller.campaigns.plan import plan_for

    before = _state(victim)
    trace_ids = {s.trace_id for s in plan_for(native[0]).slots}
    real = private_subdir

    def hooked(run: Path, *parts: str) -> Path:
        made = real(run, *parts)
        if parts == ("traces",):
            for trace_id in trace_ids:
                link = made / f"{trace_id}.jsonl"
                if kind == "symlink":
                    os.symlink(victim / "keep.txt", link)
                else:
                    os.link(victim / "keep.txt", link)
        return made

    _patch_everywhere(monkeypatch, real, hooked)
    run = claim_run_dir(tmp_path / "run")
    assert _refused(lambda: _pilot(native, run)) is Code.PUBLISH_TARGET_EXISTS
    assert _state(victim) == before


def test_a_link_at_a_run_record_after_consumption_is_refused(
        tmp_path: Path, victim: Path, native: tuple[Registration, bytes],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """registration.json and plan.json come right after the consumption marker."""
    before = _state(victim)
    real = authorize_run.consume_faux

    def hooked(*args: Any, **kwargs: Any) -> str:
        done = real(*args, **kwargs)
        os.symlink(victim / "keep.txt", run / "registration.json")
        return done

    monkeypatch.setattr(authorize_run, "consume_faux", hooked)
    run = claim_run_dir(tmp_path / "run")
    assert _refused(lambda: _pilot(native, run)) is Code.PUBLISH_TARGET_EXISTS
    assert _state(victim) == before
    assert not (run / "plan.json").exists()


@pytest.mark.parametrize("hostile", ["symlink", "dangling", "hardlink", "group-writable"])
def test_a_hostile_lease_file_is_refused_before_anything_is_written(
        tmp_path: Path, victim: Path, native: tuple[Registration, bytes], hostile: str) -> None:
    before = _state(victim)
    run = claim_run_dir(tmp_path / "run")
    lease = run / LEASE_NAME
    if hostile == "symlink":
        os.symlink(victim / "keep.txt", lease)
    elif hostile == "dangling":
        os.symlink(victim / "new-file", lease)
    elif hostile == "hardlink":
        os.link(victim / "keep.txt", lease)
    else:
        lease.write_bytes(b"")
        os.chmod(lease, 0o620)
    assert _refused(lambda: _pilot(native, run)) is Code.LEASE_FILE_INVALID
    assert _state(victim) == before
    assert sorted(os.listdir(run)) == [LEASE_NAME]  # no journal, no marker
    if hostile != "dangling":
        # a probe (children, verification) does not trust it either
        assert _refused(lambda: probe_lease(run)) is Code.LEASE_FILE_INVALID


def test_probe_lease_refuses_a_symlinked_run_path(tmp_path: Path) -> None:
    run = claim_run_dir(tmp_path / "run")
    with acquire_lease(run):
        os.symlink(run, tmp_path / "alias")
        assert _refused(lambda: probe_lease(tmp_path / "alias")) is Code.PATH_REFUSED


def _other_journal(tmp_path: Path) -> Path:
    """A real journal of another run, the most tempting thing to link to."""
    other = claim_run_dir(tmp_path / "other-run")
    with acquire_lease(other) as lease:
        JournalWriter(other, lease).close()
    return other / JOURNAL_NAME


def _epochs(journal: Path) -> int:
    with contextlib.closing(sqlite3.connect(f"file:{journal}?mode=ro", uri=True)) as conn, conn:
        (count,), = conn.execute("SELECT COUNT(*) FROM epochs")
    return int(count)


@pytest.mark.parametrize("hostile", ["symlink", "dangling", "hardlink"])
def test_a_planted_journal_link_stops_the_run_before_any_record_or_child(
        tmp_path: Path, victim: Path, native: tuple[Registration, bytes], hostile: str) -> None:
    """Refused when the journal is opened (it never follows a link), before any record,
    burn or child; the consumption gate would refuse it next (``path_refused``)."""
    other = _other_journal(tmp_path)
    before_epochs = _epochs(other)
    run = claim_run_dir(tmp_path / "run")
    if hostile == "symlink":
        os.symlink(other, run / JOURNAL_NAME)
    elif hostile == "dangling":
        os.symlink(victim / "new.sqlite", run / JOURNAL_NAME)
    else:
        os.link(other, run / JOURNAL_NAME)
    assert _refused(lambda: _pilot(native, run)) is Code.JOURNAL_INVALID
    assert _epochs(other) == before_epochs
    assert not (victim / "new.sqlite").exists()
    names = set(os.listdir(run))
    assert CONSUMED_MARKER not in names and "registration.json" not in names
    assert not (tmp_path / FAUX_REGISTRY_NAME).exists()  # nothing burned


def test_a_planted_journal_that_is_not_a_journal_is_refused_untouched(
        tmp_path: Path, victim: Path, native: tuple[Registration, bytes]) -> None:
    before = _state(victim)
    run = claim_run_dir(tmp_path / "run")
    os.link(victim / "keep.txt", run / JOURNAL_NAME)
    assert _refused(lambda: _pilot(native, run)) is Code.JOURNAL_INVALID
    assert _state(victim) == before


@pytest.mark.parametrize("hostile", ["symlink", "hardlink", "dangling"])
def test_nothing_is_written_through_a_planted_journal_link(
        tmp_path: Path, victim: Path, hostile: str) -> None:
    other = _other_journal(tmp_path)
    run = claim_run_dir(tmp_path / "run")
    if hostile == "symlink":
        os.symlink(other, run / JOURNAL_NAME)
    elif hostile == "hardlink":
        os.link(other, run / JOURNAL_NAME)
    else:
        os.symlink(victim / "new.sqlite", run / JOURNAL_NAME)
    before_epochs = _epochs(other)
    with acquire_lease(run) as lease:
        code = _refused(lambda: JournalWriter(run, lease))
    assert code in (Code.JOURNAL_INVALID, Code.PATH_REFUSED)
    assert _epochs(other) == before_epochs
    assert not (victim / "new.sqlite").exists()


# -- 2. the burn registry ---------------------------------------------------------------


def test_a_symlinked_faux_registry_is_refused_and_nothing_is_burned_through_it(
        tmp_path: Path, victim: Path, native: tuple[Registration, bytes]) -> None:
    before = _state(victim)
    runs = tmp_path / "runs"
    make_private_dir(runs)
    os.symlink(victim, runs / FAUX_REGISTRY_NAME)
    run = new_run_dir(runs, "small")
    assert _refused(lambda: _pilot(native, run)) is Code.PRIVATE_DIR_REFUSED
    assert _state(victim) == before
    assert CONSUMED_MARKER not in os.listdir(run)


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o1777])
def test_a_shared_faux_registry_is_refused(
        tmp_path: Path, native: tuple[Registration, bytes], mode: int) -> None:
    runs = tmp_path / "runs"
    make_private_dir(runs)
    registry = runs / FAUX_REGISTRY_NAME
    make_private_dir(registry)
    os.chmod(registry, mode)
    run = new_run_dir(runs, "small")
    assert _refused(lambda: _pilot(native, run)) is Code.PRIVATE_DIR_REFUSED
    assert os.listdir(registry) == []


class _Burn:
    """One faux authorization consumed in a registry the test names."""

    def __init__(self, tmp_path: Path) -> None:
        self.run = tmp_path / "runs" / "r1"
        make_private_dir(self.run, parents=True)
        self.registry = tmp_path / "registry"
        self.bindings = _bindings(self.run)
        self.mint = mint_faux_authorization(self.bindings)
        self.entry = self.registry / registry_key(AuthorizationDomain.FAUX,
                                                  self.mint.authorization_id)

    def consume(self, lease: Any) -> Any:
        return consume_authorization(
            self.mint.artifact, domain=AuthorizationDomain.FAUX,
            trusted_keys=[self.mint.trusted_key], expected=self.bindings,
            account_id=FAUX_ACCOUNT_ID, lease=lease, run_id="r1",
            registry_root=self.registry)

    def verify(self, lease: Any) -> Any:
        return verify_consumption(
            self.run, domain=AuthorizationDomain.FAUX,
            authorization_id=self.mint.authorization_id,
            artifact_sha256=hashlib.sha256(self.mint.artifact).hexdigest(), run_id="r1",
            controller=lease.holder, registry_root=self.registry)


def _bindings(output_root: Path) -> AuthorizationBindings:
    h = hashlib.sha256(b"hostile").hexdigest()
    return AuthorizationBindings(
        registration_raw_sha256=h, registration_canonical_sha256=h, code_digest=h,
        build_digest=h, reader="faux/faux-extractive-v1", effort="low", catalog_digest=h,
        policy_digest=h, cap_units=78_400_000, schedule_digest=h, deadlines={"probe_ms": 1},
        output_root=str(output_root), credential_env_var="EFOLD_FAUX_NO_CREDENTIAL",
    )


@pytest.fixture
def burn(tmp_path: Path) -> Iterator[_Burn]:
    yield _Burn(tmp_path)


def test_a_symlinked_registry_root_or_entry_is_refused(burn: _Burn, victim: Path) -> None:
    before = _state(victim)
    os.symlink(victim, burn.registry)
    with acquire_lease(burn.run) as lease:
        assert _refused(lambda: burn.consume(lease)) is Code.PRIVATE_DIR_REFUSED
        os.unlink(burn.registry)
        make_private_dir(burn.registry)
        os.symlink(victim, burn.entry)  # a link at this id's entry: it reads as burned
        assert _refused(lambda: burn.consume(lease)) is Code.AUTHORIZATION_CONSUMED
        assert CONSUMED_MARKER not in os.listdir(burn.run)
    assert _state(victim) == before


@pytest.mark.parametrize("record", ["claim", "marker"])
@pytest.mark.parametrize("hostile", ["hardlink", "symlink", "group-writable"])
def test_a_tampered_consumption_record_never_verifies(
        burn: _Burn, tmp_path: Path, record: str, hostile: str) -> None:
    with acquire_lease(burn.run) as lease:
        burn.consume(lease)
        path = burn.entry / CLAIM_NAME if record == "claim" else burn.run / CONSUMED_MARKER
        original = path.read_bytes()
        if hostile == "hardlink":
            os.link(path, tmp_path / "alias")
        elif hostile == "symlink":
            os.rename(path, tmp_path / "aside")
            os.symlink(tmp_path / "aside", path)
        else:
            os.chmod(path, 0o620)
        assert _refused(lambda: burn.verify(lease)) is Code.AUTHORIZATION_CLAIM_INVALID
        assert (tmp_path / "aside" if hostile == "symlink" else path).read_bytes() == original


@pytest.mark.parametrize("where", ["entry", "registry", "run"])
def test_a_shared_directory_holding_a_record_never_verifies(
        burn: _Burn, where: str) -> None:
    with acquire_lease(burn.run) as lease:
        burn.consume(lease)
        directory = {"entry": burn.entry, "registry": burn.registry, "run": burn.run}[where]
        os.chmod(directory, 0o1777)
        assert _refused(lambda: burn.verify(lease)) is Code.AUTHORIZATION_CLAIM_INVALID
        os.chmod(directory, 0o700)
        burn.verify(lease)


def test_the_consumption_gate_refuses_a_shared_run_root(burn: _Burn) -> None:
    with acquire_lease(burn.run) as lease:
        os.chmod(burn.run, 0o1777)  # sticky: others could still plant new names
        assert _refused(lambda: burn.consume(lease)) is Code.PRIVATE_DIR_REFUSED
        os.chmod(burn.run, 0o700)
        assert not burn.registry.exists()  # refused before the burn


# -- 3. slot directories between prep and probe ------------------------------------------


def _hook_inspect(monkeypatch: pytest.MonkeyPatch, plant: Callable[[Path], None]) -> list[Path]:
    """Run ``plant`` on the first prep slot directory, after its child exited and
    before the controller inspects the tree it left."""
    real = inspect_tree
    seen: list[Path] = []

    def hooked(root: Path, **kw: Any) -> Any:
        if not seen:
            plant(root)
            seen.append(root)
        return real(root, **kw)

    _patch_everywhere(monkeypatch, real, hooked)
    return seen


def _receipts_of(out: Any, checkpoint: str) -> set[str | None]:
    keys = {s.slot: s.checkpoint for s in out.plan.slots}
    return {r.code for r in out.receipts if keys[r.slot] == checkpoint}


@pytest.mark.parametrize("hostile", ["symlink", "hardlink", "dir-swapped-for-symlink"])
def test_a_link_left_in_a_prep_slot_fails_its_checkpoint(
        tmp_path: Path, victim: Path, native: tuple[Registration, bytes],
        monkeypatch: pytest.MonkeyPatch, hostile: str) -> None:
    before = _state(victim)

    def plant(root: Path) -> None:
        if hostile == "symlink":
            os.symlink(victim / "keep.txt", root / "snapshot" / "extra")
        elif hostile == "hardlink":
            first = sorted((root / "snapshot").iterdir())[0]
            os.link(first, tmp_path / "outside-alias")
        else:
            # the whole checkpoint directory, replaced by a link to a faithful copy
            shutil.copytree(root, tmp_path / "copy", symlinks=True)
            shutil.rmtree(root)
            os.symlink(tmp_path / "copy", root)

    seen = _hook_inspect(monkeypatch, plant)
    run = claim_run_dir(tmp_path / "run")
    out = _pilot(native, run)
    checkpoint = seen[0].name
    assert _receipts_of(out, checkpoint) == {Code.PREFLIGHT_TREE_INVALID.value}
    others = [r for r in out.receipts
              if {s.slot: s.checkpoint for s in out.plan.slots}[r.slot] != checkpoint]
    assert others and {r.status for r in others} == {SlotStatus.COMPLETED}
    assert _state(victim) == before


@pytest.mark.parametrize("hostile", ["symlink-in-snapshot", "hardlink-in-snapshot",
                                     "symlink-in-probe-slot"])
def test_a_link_planted_between_prep_and_probe_is_refused_by_the_probe(
        tmp_path: Path, victim: Path, native: tuple[Registration, bytes],
        monkeypatch: pytest.MonkeyPatch, hostile: str) -> None:
    before = _state(victim)
    real = run_probe
    hit: list[str] = []

    async def hooked(ctx: Any, **kw: Any) -> Any:
        if not hit:
            hit.append(kw["planned"].slot)
            snapshot = Path(kw["snapshot"].path)
            if hostile == "symlink-in-snapshot":
                os.symlink(victim / "keep.txt", snapshot / "extra")
            elif hostile == "hardlink-in-snapshot":
                os.link(sorted(snapshot.iterdir())[0], tmp_path / "outside-alias")
            else:  # where a restored copy of the checkpoint once went
                os.symlink(victim, Path(kw["slot_dir"]) / "checkpoint")
        return await real(ctx, **kw)

    _patch_everywhere(monkeypatch, real, hooked)
    run = claim_run_dir(tmp_path / "run")
    out = _pilot(native, run)
    first = next(r for r in out.receipts if r.slot == hit[0])
    if hostile == "symlink-in-probe-slot":
        # The reader restores its checkpoint in memory and writes nothing into its slot
        # directory: the link is never followed, and the slot is unharmed.
        assert first.status is SlotStatus.COMPLETED
    else:
        assert first.status is not SlotStatus.COMPLETED
        assert first.code == Code.WORKER_SNAPSHOT_INVALID.value
        assert first.spend.admitted == 0  # refused before any model request
    assert _state(victim) == before


def test_inspect_tree_never_walks_a_link_and_rejects_shared_directories(
        tmp_path: Path, victim: Path) -> None:
    root = tmp_path / "slot"
    (root / "sub").mkdir(parents=True, mode=0o700)
    os.chmod(root, 0o700)
    (root / "sub" / "f").write_bytes(b"x")
    os.chmod(root / "sub" / "f", 0o600)
    assert inspect_tree(root).ok
    os.symlink(root, tmp_path / "alias")
    assert inspect_tree(tmp_path / "alias").rejected == {"symlink": 1}
    os.chmod(root, 0o770)
    assert inspect_tree(root).rejected == {"group_or_other_writable": 1}
    os.chmod(root, 0o700)
    os.symlink(victim, root / "sub" / "out")
    os.link(root / "sub" / "f", tmp_path / "f-alias")
    assert inspect_tree(root).rejected == {"symlink": 1, "hard_link": 1}


def test_inspect_tree_refuses_a_directory_swapped_for_a_link_after_listing(
        tmp_path: Path, victim: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the descriptor walk closes: listed as a directory, a link when opened."""
    import efold.controller.processes.tree as tree

    root = tmp_path / "slot"
    (root / "sub").mkdir(parents=True, mode=0o700)
    os.chmod(root, 0o700)
    real = tree._open_dir

    def racing(name: str | Path, dir_fd: int | None) -> int:
        if name == "sub":
            os.rename("sub", "sub-moved", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            os.symlink(victim, "sub", dir_fd=dir_fd)
        return real(name, dir_fd)

    monkeypatch.setattr(tree, "_open_dir", racing)
    report = inspect_tree(root)
    assert report.rejected["symlink"] == 1 and report.files == 0  # victim not counted


# -- 4. group- and world-writable places of trusted state --------------------------------


# A group of somebody else's: a group-writable directory is shared unless its group is
# its owner's private one (test_a_user_private_group_is_not_others below).
_SHARED_GID = grp.getgrnam("nogroup").gr_gid


@needs_root
@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_a_runs_root_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    os.chmod(runs, mode)
    os.chown(runs, -1, _SHARED_GID)
    assert _refused(lambda: new_run_dir(runs, "small")) is Code.PATH_REFUSED
    assert _refused(lambda: new_run_dir(runs / "missing" / "runs", "small")) \
        is Code.PATH_REFUSED
    assert os.listdir(runs) == []
    # the same for a shared ancestor further up
    deeper = runs / "mine"
    os.mkdir(deeper, 0o700)
    assert _refused(lambda: claim_run_dir(deeper / "run")) is Code.PATH_REFUSED
    assert os.listdir(deeper) == []


@needs_root
def test_a_user_private_group_is_not_others(tmp_path: Path) -> None:
    """`mkdir` under umask 002 with user-private groups (and a `git clone` there) makes
    0775 directories whose group is the owner's own: only the owner may write, so a runs
    root below them is accepted; the same mode with a group of others is refused."""
    owner = pwd.getpwuid(os.geteuid())
    private = grp.getgrnam(owner.pw_name)  # root's group is root here, as on every Debian
    assert all(member == owner.pw_name for member in private.gr_mem)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    os.chmod(checkout, 0o775)
    os.chown(checkout, -1, private.gr_gid)
    run = new_run_dir(checkout / "efold-runs", "small")
    assert os.stat(run).st_mode & 0o777 == 0o700
    os.chown(checkout, -1, _SHARED_GID)
    assert _refused(lambda: new_run_dir(checkout / "efold-runs", "small")) is Code.PATH_REFUSED
    with pytest.raises(EfoldError) as shared:
        new_run_dir(checkout / "efold-runs", "small")
    assert "umask 002" in shared.value.detail  # what a shared 0775 most likely is
    os.chown(checkout, -1, private.gr_gid)
    os.chmod(checkout, 0o777)  # world-writable is never private
    with pytest.raises(EfoldError) as world:
        new_run_dir(checkout / "efold-runs", "small")
    assert world.value.code is Code.PATH_REFUSED and "umask" not in world.value.detail


def test_a_private_group_with_another_member_is_shared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The group database is the system's: a member other than the owner, listed in the
    group or holding it as primary group, makes the group shared."""
    owner = pwd.getpwuid(os.geteuid())
    private = grp.getgrnam(owner.pw_name)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    os.chmod(checkout, 0o775)
    os.chown(checkout, -1, private.gr_gid)
    listed = grp.struct_group((private.gr_name, "x", private.gr_gid, [owner.pw_name, "eve"]))
    monkeypatch.setattr(grp, "getgrgid", lambda gid: listed)
    assert _refused(lambda: new_run_dir(checkout / "runs", "small")) is Code.PATH_REFUSED
    monkeypatch.undo()
    eve = pwd.struct_passwd(("eve", "x", 4242, private.gr_gid, "", "/", "/bin/sh"))
    everyone = [*pwd.getpwall(), eve]
    monkeypatch.setattr(pwd, "getpwall", lambda: everyone)
    assert _refused(lambda: new_run_dir(checkout / "runs", "small")) is Code.PATH_REFUSED
    monkeypatch.undo()
    new_run_dir(checkout / "runs", "small")


def test_a_sticky_shared_runs_root_is_accepted(tmp_path: Path) -> None:
    """Like /tmp: others may create names but cannot rename or remove ours, and the run
    directory itself is created 0700 whatever the umask."""
    runs = tmp_path / "runs"
    runs.mkdir()
    os.chmod(runs, 0o1777)
    old = os.umask(0)
    try:
        run = new_run_dir(runs, "small")
    finally:
        os.umask(old)
    assert os.stat(run).st_mode & 0o777 == 0o700


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o1777])
def test_a_run_directory_others_may_write_is_refused_before_anything_is_written(
        tmp_path: Path, native: tuple[Registration, bytes], mode: int) -> None:
    run = claim_run_dir(tmp_path / "run")
    os.chmod(run, mode)
    assert _refused(lambda: _pilot(native, run)) is Code.PRIVATE_DIR_REFUSED
    assert os.listdir(run) == []  # no lease, no journal


def test_a_group_writable_journal_stops_the_run_before_any_record(
        tmp_path: Path, native: tuple[Registration, bytes]) -> None:
    other = _other_journal(tmp_path)
    run = claim_run_dir(tmp_path / "run")
    shutil.copyfile(other, run / JOURNAL_NAME)
    os.chmod(run / JOURNAL_NAME, 0o660)
    assert _refused(lambda: _pilot(native, run)) is Code.JOURNAL_INVALID
    assert CONSUMED_MARKER not in os.listdir(run)


def test_a_group_writable_registration_is_bound_by_its_digest_not_its_mode(
        tmp_path: Path, native: tuple[Registration, bytes]) -> None:
    """Not refused by mode, on purpose: the operator's sha256 binds the bytes, so what
    a group member could change is caught as a digest mismatch, and the copy the run
    keeps (registration.json) is published privately by the run itself."""
    _, raw = native
    path = tmp_path / "registration.json"
    path.write_bytes(raw)
    os.chmod(path, 0o666)
    digest = hashlib.sha256(raw).hexdigest()
    assert load_registration(path, digest).data == raw
    path.write_bytes(raw.replace(b'"small"', b'"smalL"'))
    assert _refused(lambda: load_registration(path, digest)) \
        is Code.REGISTRATION_DIGEST_MISMATCH


# -- 5. a run root inside efold's own source tree ----------------------------------------


@pytest.fixture
def fake_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package root of its own, with every folder build_digest hashes."""
    root = tmp_path / "clone"
    root.mkdir(mode=0o700)
    (root / "__init__.py").write_bytes(b"")
    for pkg in digests._BUILD_PACKAGES:
        (root / pkg / "sub").mkdir(parents=True)
        (root / pkg / "__init__.py").write_bytes(b"# " + pkg.encode())
    monkeypatch.setattr(digests, "package_root", lambda: root)
    return root


@pytest.mark.parametrize("pkg", digests._BUILD_PACKAGES)
def test_a_run_root_inside_a_hashed_source_folder_is_refused(
        fake_source: Path, pkg: str) -> None:
    before = digests.build_digest(fake_source)
    for target in (fake_source / pkg / "run", fake_source / pkg / "sub" / "new" / "run"):
        assert _refused(lambda t=target: claim_run_dir(t)) is Code.RUN_ROOT_IN_SOURCE
    assert _refused(lambda: new_run_dir(fake_source / pkg / "runs", "small")) \
        is Code.RUN_ROOT_IN_SOURCE
    assert _refused(lambda: new_run_dir(fake_source / pkg, "small")) \
        is Code.RUN_ROOT_IN_SOURCE
    assert sorted(os.listdir(fake_source / pkg)) == ["__init__.py", "sub"]
    assert os.listdir(fake_source / pkg / "sub") == []
    assert digests.build_digest(fake_source) == before


def test_what_python_imports_beside_a_source_file_is_part_of_the_build(
        fake_source: Path) -> None:
    """An extension module is imported before the source file of the same name, and a
    bytecode file outside ``__pycache__`` where there is none: either changes the build,
    at the top level or in a package. Compiled caches do not."""
    import importlib.machinery

    before = digests.build_digest(fake_source)
    planted = [fake_source / "worker" / f"scoring{importlib.machinery.EXTENSION_SUFFIXES[0]}",
               fake_source / "worker" / "sub" / "scoring.abi3.so",
               fake_source / f"digests{importlib.machinery.EXTENSION_SUFFIXES[0]}",
               fake_source / "folds" / "store.pyc"]
    for path in planted:
        path.write_bytes(b"\x7fELF not really")
        assert digests.build_digest(fake_source) != before, path
        path.unlink()
    cache = fake_source / "worker" / "__pycache__"
    cache.mkdir()
    (cache / "scoring.cpython-311.pyc").write_bytes(b"cached")
    assert digests.build_digest(fake_source) == before


def test_a_file_is_in_the_build_by_its_suffix_as_pathlib_reads_it(fake_source: Path) -> None:
    """A name with leading dots has the suffix after its last dot (``..py``, ``...json``,
    ``..typed``); a name with only a leading one has none (``.py``). The tree is walked
    with plain strings: the same files as ``PurePath.suffix`` picks."""
    before = digests.build_digest(fake_source)
    for path in (fake_source / "worker" / "..py", fake_source / "folds" / "...json",
                 fake_source / "..py", fake_source / "..typed"):
        path.write_text("x = 1\n")
        assert digests.build_digest(fake_source) != before, path
        path.unlink()
    for path in (fake_source / "worker" / ".py", fake_source / ".py",
                 fake_source / "worker" / "notes.txt"):
        path.write_text("x = 1\n")
        assert digests.build_digest(fake_source) == before, path
        path.unlink()


def test_a_link_or_a_dotted_path_into_the_source_tree_is_refused(
        fake_source: Path, tmp_path: Path) -> None:
    os.symlink(fake_source / "registry", tmp_path / "innocent")
    assert _refused(lambda: claim_run_dir(tmp_path / "innocent" / "run")) \
        is Code.RUN_ROOT_IN_SOURCE
    dotted = fake_source / "efold-runs" / ".." / "folds" / "run"
    assert _refused(lambda: claim_run_dir(dotted)) is Code.RUN_ROOT_IN_SOURCE
    assert not (fake_source / "efold-runs").exists()
    assert not (fake_source / "folds" / "run").exists()


def test_the_top_level_efold_runs_of_a_clone_is_allowed(fake_source: Path) -> None:
    before = digests.build_digest(fake_source)
    run = new_run_dir(fake_source / "efold-runs", "small")
    assert run.parent == fake_source / "efold-runs"
    (run / "results.json").write_bytes(b"{}")
    assert digests.build_digest(fake_source) == before


def test_the_real_source_tree_is_refused_and_left_untouched() -> None:
    root = digests.package_root()
    target = root / "registry" / f"hostile-run-{os.getpid()}"
    try:
        assert _refused(lambda: claim_run_dir(target)) is Code.RUN_ROOT_IN_SOURCE
        assert _refused(lambda: new_run_dir(root / "controller", "small")) \
            is Code.RUN_ROOT_IN_SOURCE
    finally:
        if target.is_dir():  # only if the refusal failed: never leave it behind
            target.rmdir()
    assert not target.exists()


def test_the_pilot_cli_refuses_a_runs_root_in_the_source_tree(
        fake_source: Path) -> None:
    from click.testing import CliRunner

    from efold.controller.cli import main

    result = CliRunner().invoke(
        main, ["pilot", "--faux", "--runs", str(fake_source / "guard" / "runs")])
    assert result.exit_code == 2
    assert "run_root_in_source" in result.output
    assert not (fake_source / "guard" / "runs").exists()
