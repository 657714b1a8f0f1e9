"""Checkpoint snapshots: canonical digest, round trip, and every refusal of a bad tree."""

from __future__ import annotations

import json
import os
import stat

import msgspec
import pytest

from efold.errors import Code
from efold.folds.arms import NativeFold, StoreFold
from efold.folds.errors import FoldError
from efold.folds.snapshot import (
    CHECKPOINT_FILE,
    MANIFEST_FILE,
    STORE_FILE,
    _manifest_digest,
    _ManifestBody,
    content_digest,
    copy_snapshot,
    read_checkpoint,
    write_checkpoint,
)


@pytest.fixture
def store_checkpoint(synthetic, make_filler):
    t = synthetic("snap")
    t.owner("Rule: never mention the funding review to any counterparty.")
    t.tool("Account reference: ACC-7F3K-219\n" + make_filler(20_000))
    t.tool("Temporary password: Lx82-mq91")
    t.reply("Done.")
    return StoreFold().build(t.prefix())


def _modes(directory) -> set[int]:
    return {stat.S_IMODE(os.lstat(os.path.join(directory, n)).st_mode) for n in os.listdir(directory)}


def test_round_trip_restores_an_equal_checkpoint(tmp_path, store_checkpoint):
    target = tmp_path / "snap"
    manifest = write_checkpoint(store_checkpoint, target)
    assert sorted(os.listdir(target)) == [CHECKPOINT_FILE, MANIFEST_FILE, STORE_FILE]
    assert _modes(target) == {0o600} and stat.S_IMODE(os.stat(target).st_mode) == 0o700
    restored = read_checkpoint(target, expected_digest=manifest.digest)
    assert restored.checkpoint == store_checkpoint
    assert restored.manifest == manifest
    assert manifest.content_digest == content_digest(store_checkpoint)
    tool = restored.lookup_tool()
    assert tool is not None
    found = json.loads(tool.call("history_search", json.dumps({"query": "ACC-7F3K-219"})))
    assert found["results"][0]["id"] == "e0003"


def test_digest_is_canonical_across_writes(tmp_path, store_checkpoint):
    first = write_checkpoint(store_checkpoint, tmp_path / "a")
    second = write_checkpoint(store_checkpoint, tmp_path / "b")
    assert first.digest == second.digest
    assert (tmp_path / "a" / STORE_FILE).read_bytes() == (tmp_path / "b" / STORE_FILE).read_bytes()


def test_a_checkpoint_without_store_has_no_store_file(tmp_path, synthetic):
    t = synthetic("plain")
    t.owner("hello")
    checkpoint = NativeFold().build(t.prefix())
    write_checkpoint(checkpoint, tmp_path / "n")
    assert sorted(os.listdir(tmp_path / "n")) == [CHECKPOINT_FILE, MANIFEST_FILE]
    restored = read_checkpoint(tmp_path / "n")
    assert restored.checkpoint == checkpoint and restored.lookup_tool() is None


def test_write_refuses_a_non_empty_directory(tmp_path, store_checkpoint):
    target = tmp_path / "busy"
    target.mkdir(mode=0o700)
    (target / "leftover").write_bytes(b"x")
    with pytest.raises(FoldError) as refused:
        write_checkpoint(store_checkpoint, target)
    assert refused.value.code is Code.CHECKPOINT_SNAPSHOT_INVALID


def _written(tmp_path, checkpoint):
    target = tmp_path / "snap"
    return target, write_checkpoint(checkpoint, target)


def _code(directory, **kwargs) -> Code:
    with pytest.raises(FoldError) as refused:
        read_checkpoint(directory, **kwargs)
    return refused.value.code


def test_a_reported_digest_that_differs_is_refused(tmp_path, store_checkpoint):
    target, _ = _written(tmp_path, store_checkpoint)
    assert _code(target, expected_digest="0" * 64) is Code.CHECKPOINT_DIGEST_MISMATCH


def test_a_changed_byte_is_refused(tmp_path, store_checkpoint):
    target, _ = _written(tmp_path, store_checkpoint)
    path = target / CHECKPOINT_FILE
    data = bytearray(path.read_bytes())
    data[10] ^= 0x01
    path.write_bytes(bytes(data))
    assert _code(target) is Code.CHECKPOINT_DIGEST_MISMATCH


def test_a_rewritten_manifest_is_refused(tmp_path, store_checkpoint):
    target, _manifest = _written(tmp_path, store_checkpoint)
    raw = json.loads((target / MANIFEST_FILE).read_text())
    raw["arm"] = "native"
    (target / MANIFEST_FILE).write_text(json.dumps(raw))
    assert _code(target) is Code.CHECKPOINT_SNAPSHOT_INVALID


def test_an_unlisted_file_is_refused(tmp_path, store_checkpoint):
    target, _ = _written(tmp_path, store_checkpoint)
    (target / "extra").write_bytes(b"")
    os.chmod(target / "extra", 0o600)
    assert _code(target) is Code.CHECKPOINT_SNAPSHOT_INVALID


def test_a_symlink_is_refused(tmp_path, store_checkpoint):
    target, _ = _written(tmp_path, store_checkpoint)
    real = tmp_path / "elsewhere"
    os.rename(target / STORE_FILE, real)
    os.symlink(real, target / STORE_FILE)
    assert _code(target) is Code.CHECKPOINT_SNAPSHOT_INVALID


def test_a_symlinked_snapshot_directory_is_refused(tmp_path, store_checkpoint):
    target, _ = _written(tmp_path, store_checkpoint)
    os.symlink(target, tmp_path / "alias")
    assert _code(tmp_path / "alias") is Code.CHECKPOINT_SNAPSHOT_INVALID


def test_a_hard_link_is_refused(tmp_path, store_checkpoint):
    target, _ = _written(tmp_path, store_checkpoint)
    os.link(target / CHECKPOINT_FILE, tmp_path / "second-name")
    assert _code(target) is Code.CHECKPOINT_SNAPSHOT_INVALID


def test_a_group_readable_file_is_refused(tmp_path, store_checkpoint):
    target, _ = _written(tmp_path, store_checkpoint)
    os.chmod(target / STORE_FILE, 0o640)
    assert _code(target) is Code.CHECKPOINT_SNAPSHOT_INVALID


def test_a_missing_manifest_is_an_unfinished_snapshot(tmp_path, store_checkpoint):
    target, _ = _written(tmp_path, store_checkpoint)
    os.unlink(target / MANIFEST_FILE)
    assert _code(target) is Code.CHECKPOINT_SNAPSHOT_INVALID


def test_a_swapped_store_is_refused_even_with_a_matching_manifest(tmp_path, store_checkpoint, synthetic):
    # Two valid snapshots; graft B's store file and manifest entry into A: the content
    # digest and the receipt's record digest still catch it.
    target, _ = _written(tmp_path, store_checkpoint)
    t = synthetic("snap")
    t.owner("Rule: never mention the funding review to any counterparty.")
    t.tool("Account reference: ACC-0000-000")
    other = tmp_path / "other"
    write_checkpoint(StoreFold().build(t.prefix()), other)
    os.unlink(target / STORE_FILE)
    os.link(other / STORE_FILE, target / STORE_FILE)
    os.unlink(other / STORE_FILE)
    raw = json.loads((target / MANIFEST_FILE).read_text())
    other_raw = json.loads((other / MANIFEST_FILE).read_text())
    raw["files"][1] = other_raw["files"][1]
    body = msgspec.convert({k: v for k, v in raw.items() if k != "digest"}, _ManifestBody)
    raw["digest"] = _manifest_digest(body)
    (target / MANIFEST_FILE).write_text(json.dumps(raw))
    os.chmod(target / MANIFEST_FILE, 0o600)
    assert _code(target) is Code.CHECKPOINT_DIGEST_MISMATCH


def test_copy_snapshot_writes_the_verified_bytes_into_a_private_slot(tmp_path, store_checkpoint):
    source, manifest = _written(tmp_path, store_checkpoint)
    slot = tmp_path / "slot"
    restored = copy_snapshot(source, slot, expected_digest=manifest.digest)
    assert restored.checkpoint == store_checkpoint
    assert sorted(os.listdir(slot)) == sorted(os.listdir(source)) and _modes(slot) == {0o600}
    for name in os.listdir(source):
        assert (slot / name).read_bytes() == (source / name).read_bytes()
    assert read_checkpoint(slot, expected_digest=manifest.digest).checkpoint == store_checkpoint
    with pytest.raises(FoldError) as mismatch:
        copy_snapshot(source, tmp_path / "other", expected_digest="f" * 64)
    assert mismatch.value.code is Code.CHECKPOINT_DIGEST_MISMATCH
    assert not (tmp_path / "other").exists()
