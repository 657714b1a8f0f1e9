"""Input files (issue 35): every file an operator names is read by one helper
(``efold.input_files.read_input``), which refuses a device, a FIFO or a directory
without reading it and a file over its kind's bound before reading past the bound.

A FIFO would otherwise hang the command, ``/dev/zero`` fill its memory: every CLI case
runs under a timeout, as root and as ``nobody`` (``tests/kit/as_user.py``).
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
from as_user import USERS, give, run_cli, workspace

from efold.controller.campaigns.campaign import load_campaign
from efold.controller.errors import CampaignError
from efold.errors import Code
from efold.input_files import (
    CAMPAIGN_LIMIT,
    InputFileError,
    read_bounded,
    read_input,
)

BUNDLED_CASES = Path(__file__).resolve().parents[2] / "boundary" / "cases"
FAUX = """
name = "c"
suite = "original"
roles = ["native"]
probe_limit = 1
cap_usd = "5"
"""


# -- the helper ------------------------------------------------------------------------


def test_a_regular_file_at_its_bound_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_input(path, what="thing", limit=100) == b"x" * 100
    with pytest.raises(InputFileError) as err:
        read_input(path, what="thing", limit=99)
    assert err.value.code is Code.INPUT_FILE_TOO_LARGE and "'" + str(path) + "'" in err.value.detail


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputFileError) as err:
        read_input(fifo, what="thing", limit=10)
    assert err.value.code is Code.INPUT_FILE_NOT_REGULAR and "a FIFO" in err.value.detail


@pytest.mark.parametrize(("path", "kind"), [("/dev/zero", "a character device"),
                                            ("/dev/null", "a character device"),
                                            ("/", "a directory")])
def test_a_device_or_a_directory_is_refused(path: str, kind: str) -> None:
    with pytest.raises(InputFileError) as err:
        read_input(path, what="thing", limit=10)
    assert err.value.code is Code.INPUT_FILE_NOT_REGULAR and kind in err.value.detail


def test_a_symlink_to_a_device_is_refused_and_one_to_a_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "zero").symlink_to("/dev/zero")
    with pytest.raises(InputFileError) as err:
        read_input(tmp_path / "zero", what="thing", limit=10)
    assert err.value.code is Code.INPUT_FILE_NOT_REGULAR
    (tmp_path / "real").write_bytes(b"ok")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert read_input(tmp_path / "link", what="thing", limit=10) == b"ok"


def test_a_missing_file_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(InputFileError) as err:
        read_input(tmp_path / "nope", what="thing", limit=10)
    assert err.value.code is Code.INPUT_FILE_UNREADABLE


def test_the_bounded_read_stops_one_byte_past_its_bound() -> None:
    """A file that grows while it is read (a stream here) is cut at limit + 1 bytes."""
    for sent, limit, expected in ((10, 10, b"y" * 10), (11, 10, None)):
        r, w = os.pipe()
        writer = threading.Thread(target=lambda n=sent, fd=w: (os.write(fd, b"y" * n), os.close(fd)))
        writer.start()
        try:
            assert read_bounded(r, limit) == expected
        finally:
            writer.join()
            os.close(r)


def test_a_campaign_over_its_bound_is_refused_before_parsing(tmp_path: Path) -> None:
    at = tmp_path / "at.toml"
    at.write_bytes(FAUX.encode() + b"#" * (CAMPAIGN_LIMIT - len(FAUX)))
    assert load_campaign(at)[1] == at.read_bytes()
    past = tmp_path / "past.toml"
    past.write_bytes(at.read_bytes() + b"#")
    with pytest.raises(InputFileError) as err:
        load_campaign(past)
    assert err.value.code is Code.INPUT_FILE_TOO_LARGE


def test_a_missing_campaign_keeps_its_own_code(tmp_path: Path) -> None:
    with pytest.raises(CampaignError) as err:
        load_campaign(tmp_path / "nope.toml")
    assert err.value.code is Code.CAMPAIGN_NOT_FOUND and "bundled campaigns" in err.value.detail


# -- every input of register, plan and corpus import, as root and as a user --------------


CASES = {
    # name: (files to write {name: text or None for a FIFO}, argv, expected code)
    "campaign-fifo": ({"c.toml": None}, ["register", "c.toml", "--output", "out"],
                      "input_file_not_regular"),
    "campaign-dev-zero": ({}, ["register", "/dev/zero", "--output", "out"],
                          "input_file_not_regular"),
    "catalog-dev-zero": ({"c.toml": FAUX + '[reader]\nprovider = "faux"\ncatalog = "/dev/zero"\n'},
                         ["register", "c.toml", "--output", "out"], "input_file_not_regular"),
    "catalog-fifo": ({"cat.toml": None,
                      "c.toml": FAUX + '[reader]\nprovider = "faux"\ncatalog = "cat.toml"\n'},
                     ["register", "c.toml", "--output", "out"], "input_file_not_regular"),
    "registration-fifo": ({"registration.json": None},
                          ["plan", "--registration", "registration.json", "--sha256", "0" * 64],
                          "input_file_not_regular"),
    "import-fifo": ({"t.json": None}, ["corpus", "import", "openai-chat", "t.json", "--out", "imp"],
                    "input_file_not_regular"),
    "show-fifo": ({"t.jsonl": None}, ["corpus", "show", "t.jsonl"], "input_file_not_regular"),
}


@pytest.mark.parametrize("user", USERS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_no_input_hangs_or_is_read_whole(case: str, user: str) -> None:
    files, argv, code = CASES[case]
    with workspace(user) as w:
        for name, text in files.items():
            if text is None:
                os.mkfifo(w / name, 0o664)
            else:
                (w / name).write_text(text)
            give(w / name, user)
        before = sorted(p.name for p in w.iterdir())
        answer = run_cli(argv, w, user, timeout=30)
        assert (answer.exit, answer.code) == (2, code), answer.stderr
        assert sorted(p.name for p in w.iterdir()) == before  # nothing written


@pytest.mark.parametrize("user", USERS)
def test_a_boundary_lock_that_is_a_fifo_is_refused(user: str) -> None:
    """The cases root's ``boundary.lock`` is read at ``register`` (before: a FIFO hung)."""
    with workspace(user) as w:
        cases = w / "cases"
        shutil.copytree(BUNDLED_CASES / "B01-explicit-api-constraint",
                        cases / "B01-explicit-api-constraint")
        os.mkfifo(cases / "boundary.lock", 0o664)
        (w / "c.toml").write_text(FAUX.replace("probe_limit = 1", "probe_limit = 0")
                                  + '[boundary]\ncases = ["B01"]\nroot = "cases"\n')
        for path in (w / "c.toml", *cases.rglob("*"), cases):
            give(path, user)
        answer = run_cli(["register", "c.toml", "--output", "out"], w, user, timeout=30)
        assert (answer.exit, answer.code) == (2, "input_file_not_regular"), answer.stderr
        assert "boundary lock" in answer.detail and not (w / "out").exists()


def test_a_real_run_s_authorization_that_is_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    """``smoke`` and ``pilot --real`` read ``--authorization`` (a FIFO hung them)."""
    from efold.controller.campaigns.campaign import parse_campaign
    from efold.controller.campaigns.registration import compute_registration
    from efold.controller.rundirs.authorize_run import load_grant

    text = FAUX.replace('cap_usd = "5"', 'cap_usd = "500"') + (
        '[reader]\nprovider = "openai"\nmodel = "gpt-5"\nbase_url = "http://127.0.0.1:9/v1"\n')
    reg = compute_registration(parse_campaign(text), text.encode())
    fifo = tmp_path / "auth.json"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def grant() -> None:
        try:
            load_grant(reg, authorization=str(fifo), trusted=[str(tmp_path / "k.pub")],
                       environ={"EFOLD_ACCOUNT_ID": "acct"})
            outcome.append(None)
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    reader = threading.Thread(target=grant, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # release the blocked open, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
        pytest.fail("reading the authorization blocked on a FIFO")
    (exc,) = outcome
    assert isinstance(exc, InputFileError) and exc.code is Code.INPUT_FILE_NOT_REGULAR


@pytest.mark.parametrize("user", USERS)
def test_corpus_validate_rejects_a_fifo_trace_at_once(user: str) -> None:
    with workspace(user) as w:
        os.mkfifo(w / "t.jsonl", 0o664)
        give(w / "t.jsonl", user)
        answer = run_cli(["corpus", "validate", "t.jsonl"], w, user, timeout=30)
        assert answer.exit == 2 and "rejected: input_file_not_regular  t.jsonl" in answer.stderr
