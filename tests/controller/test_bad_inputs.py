"""The bad-input tally (``tests/kit/bad_inputs.py``): every input an operator gets wrong
ends in a usage error or a refusal with the right code, never a traceback, and loses
nothing."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from bad_inputs import CASES, Answer, Case, make_workspace, run_case

EXE = shutil.which("efold-controller", path=str(Path(sys.executable).parent)) \
    or "efold-controller"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    yield make_workspace(tmp_path_factory.mktemp("bad-inputs"), EXE)


def test_the_tally_is_broad() -> None:
    commands = {c.argv[0] for c in CASES if c.argv}
    assert len(CASES) >= 76 and len({c.name for c in CASES}) == len(CASES)
    assert commands >= {"register", "plan", "preflight", "pilot", "smoke", "aggregate",
                        "recover", "reap", "runs", "show", "authorize",
                        "verify-authorization", "keygen", "fold", "corpus", "compare",
                        "prune"}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_answered_clearly_and_loses_nothing(case: Case,
                                                         workspace: dict[str, str]) -> None:
    answer: Answer = run_case(case, EXE, workspace)
    assert answer.verdict == "ok", (
        f"{answer.verdict}: exit {answer.exit}, form {answer.form}, code {answer.code} "
        f"(expected {case.code or 'a usage error'}), changed {answer.changed}\n"
        f"{answer.stderr}")


def test_the_tally_catches_what_it_is_for(workspace: dict[str, str]) -> None:
    """The checks can fail: a wrong expected code reads as misleading, a usage error
    expected as a refusal as the wrong form, a command that writes as changed, a bare
    code as no detail."""
    misleading = Case("control-code", ("show", "{w}/notrun"), "journal_invalid")
    assert run_case(misleading, EXE, workspace).verdict == "misleading"
    wrong_form = Case("control-form", ("pilot",), "campaign_invalid")
    assert run_case(wrong_form, EXE, workspace).verdict == "wrong-form"
    writes = Case("control-writes", ("keygen", "--out", "{w}/fresh"), None)
    answer = run_case(writes, EXE, workspace)
    assert answer.exit == 0 and answer.verdict == "unclear"
    assert {"fresh.key", "fresh.pub"} <= set(answer.changed)
    for name in ("fresh.key", "fresh.pub"):
        (Path(workspace["w"]) / name).unlink()
    bare = Answer(misleading, 2, "refused", "journal_invalid", "", False, (), "")
    assert bare.verdict == "no-detail"
