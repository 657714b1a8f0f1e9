"""``corpus import`` refuses what it cannot read safely (issue 35), each with its code:
a transcript over ``TRANSCRIPT_LIMIT`` (refused from its size, before a byte is read),
an integer literal past ``MAX_INTEGER_DIGITS`` (Python would raise a ValueError: a
traceback), and ``NaN``, ``Infinity`` or a number no double holds (JSON has none).

The CLI cases run as real processes, as root and as ``nobody`` (``tests/kit/as_user.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from as_user import USERS, give, run_cli, workspace

from efold.controller.commands._corpus_import import import_file
from efold.corpus.errors import CorpusError
from efold.corpus.imports import MAX_INTEGER_DIGITS, redact_arguments
from efold.errors import Code
from efold.input_files import TRANSCRIPT_LIMIT, InputFileError


def _chat(number: str, *, jsonl: bool) -> str:
    """A two-message chat whose user message carries ``number`` as an extra member."""
    user = '{"role":"user","content":"What is in notes.txt?","n":' + number + "}"
    answer = '{"role":"assistant","content":"Nothing yet."}'
    return f"{user}\n{answer}\n" if jsonl else f'{{"messages": [\n{user},\n{answer}\n]}}\n'


@pytest.mark.parametrize("jsonl", [True, False], ids=["jsonl", "document"])
def test_an_integer_at_the_digit_bound_imports_and_one_digit_more_is_refused(
        tmp_path: Path, jsonl: bool) -> None:
    at = tmp_path / "at.json"
    at.write_text(_chat("-" + "9" * MAX_INTEGER_DIGITS, jsonl=jsonl))
    assert len(import_file("openai-chat", at).trace.events) == 2
    past = tmp_path / "past.json"
    past.write_text(_chat("9" * (MAX_INTEGER_DIGITS + 1), jsonl=jsonl))
    with pytest.raises(CorpusError) as err:
        import_file("openai-chat", past)
    assert err.value.code is Code.CORPUS_IMPORT_INTEGER_TOO_LONG
    assert err.value.detail.startswith("past.json:1:" if jsonl else "past.json:2:")


@pytest.mark.parametrize("jsonl", [True, False], ids=["jsonl", "document"])
@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"])
def test_a_number_json_does_not_have_is_refused(tmp_path: Path, jsonl: bool,
                                                number: str) -> None:
    path = tmp_path / "chat.json"
    path.write_text(_chat(number, jsonl=jsonl))
    with pytest.raises(CorpusError) as err:
        import_file("openai-chat", path)
    assert err.value.code is Code.CORPUS_IMPORT_NUMBER_NOT_FINITE


def test_the_largest_finite_double_imports(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text(_chat("1.7976931348623157e308", jsonl=True))
    assert len(import_file("openai-chat", path).trace.events) == 2


def test_tool_arguments_with_such_a_number_are_kept_as_text() -> None:
    for arguments in ('{"n": ' + "9" * 100_000 + "}", '{"n": NaN}'):
        assert redact_arguments(arguments) == (arguments, 0)


def test_a_transcript_at_its_bound_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    """Sparse files: the size is what counts, and one byte past it is never read."""
    at = tmp_path / "at.json"
    with at.open("wb") as f:
        f.truncate(TRANSCRIPT_LIMIT)
    with pytest.raises(CorpusError) as read:  # read whole, then not JSON: not a size refusal
        import_file("openai-chat", at)
    assert read.value.code is Code.CORPUS_IMPORT_INVALID
    past = tmp_path / "past.json"
    with past.open("wb") as f:
        f.truncate(TRANSCRIPT_LIMIT + 1)
    with pytest.raises(InputFileError) as err:
        import_file("openai-chat", past)
    assert err.value.code is Code.INPUT_FILE_TOO_LARGE


@pytest.mark.parametrize("user", USERS)
@pytest.mark.parametrize(("text", "code"), [
    (_chat("9" * 100_000, jsonl=True), "corpus_import_integer_too_long"),
    (_chat("NaN", jsonl=False), "corpus_import_number_not_finite"),
    (None, "input_file_too_large"),
], ids=["100000-digits", "NaN", "200-MB"])
def test_corpus_import_refuses_without_a_traceback_or_the_memory(user: str, text: str | None,
                                                                  code: str) -> None:
    with workspace(user) as w:
        path = w / "t.json"
        if text is None:
            with path.open("wb") as f:
                f.truncate(200 * 1024 * 1024)  # sparse: 200 MB that take no disk
        else:
            path.write_text(text)
        give(path, user)
        answer = run_cli(["corpus", "import", "openai-chat", "t.json", "--out", "imp"], w, user,
                         timeout=60)
        assert (answer.exit, answer.code) == (2, code), answer.stderr
        assert not (w / "imp").exists()


def test_the_chat_helper_is_json() -> None:
    assert json.loads(_chat("1", jsonl=False))["messages"][0]["n"] == 1
