"""The bad-input tally (``tests/kit/bad_inputs.py``): every input an operator gets wrong
ends in a usage error or a refusal with the right code, never a traceback or a hang,
and loses nothing; as this process's user and, when that is root, again as ``nobody``
with umask 002 (operators are not root)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from as_user import NOBODY, USERS, ordinary_python, workspace
from bad_inputs import CASES, Answer, Case, make_workspace, ordinary_user, run_case

EXE = shutil.which("efold-controller", path=str(Path(sys.executable).parent)) \
    or "efold-controller"
Tally = tuple[list[str], dict[str, str]]


@pytest.fixture(scope="module", params=USERS)
def tally(request: pytest.FixtureRequest) -> Iterator[Tally]:
    """The command and a workspace its user owns, made by that user's own commands."""
    user: str = request.param
    with ExitStack() as stack:
        exe = [EXE]
        if user == "nobody":  # our interpreter may be under /root, where nobody cannot go
            python = stack.enter_context(ordinary_python())
            if python is None:
                pytest.skip(f"no Python an ordinary user can run (ours: {sys.executable})")
            exe = [python, "-m", "efold.controller"]
        w = stack.enter_context(workspace(user))
        yield exe, make_workspace(w, exe, user)


def test_the_tally_is_broad() -> None:
    commands = {c.argv[0] for c in CASES if c.argv}
    names = {c.name for c in CASES}
    assert len(CASES) >= 100 and len(names) == len(CASES)
    assert commands >= {"register", "plan", "preflight", "pilot", "smoke", "aggregate",
                        "recover", "reap", "runs", "show", "authorize",
                        "verify-authorization", "keygen", "fold", "corpus", "compare",
                        "prune", "analyze"}
    # issue 35's inputs, and the directories only an ordinary user cannot write
    assert names >= {"register-credential-env-inherited", "register-probe-seconds-1e300",
                     "register-suite-with-slash", "register-catalog-dev-zero",
                     "corpus-import-fifo", "corpus-import-100000-digits", "corpus-import-nan",
                     "register-cap-negative", "pilot-faux-trust", "analyze-no-args",
                     "pilot-runs-unwritable", "aggregate-output-unwritable",
                     "corpus-generate-unwritable", "smoke-untrusted-approver"}
    assert {c.name for c in CASES if c.ordinary} == {
        "pilot-runs-unwritable", "aggregate-output-unwritable", "corpus-generate-unwritable"}


def test_the_tally_runs_as_its_user(tally: Tally) -> None:
    """The drop of privileges is real: the workspace's run and keys are its user's."""
    _, values = tally
    owner = NOBODY if values["user"] == "nobody" else os.geteuid()
    for path in (values["run"], values["reg"], os.path.join(values["w"], "k.key")):
        assert os.stat(path).st_uid == owner, path


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_answered_clearly_and_loses_nothing(case: Case, tally: Tally) -> None:
    exe, values = tally
    if case.ordinary and not ordinary_user(values["user"]):
        pytest.skip("root may write any directory: only an ordinary user's answer counts")
    answer: Answer = run_case(case, exe, values)
    assert answer.verdict == "ok", (
        f"{answer.verdict}: exit {answer.exit}, form {answer.form}, code {answer.code} "
        f"(expected {case.code or 'a usage error'}), changed {answer.changed}\n"
        f"{answer.stderr}")


def test_the_tally_catches_what_it_is_for(tally: Tally) -> None:
    """The checks can fail: a wrong expected code reads as misleading, a usage error
    expected as a refusal as the wrong form, a command that writes as changed, a bare
    code as no detail."""
    exe, values = tally
    misleading = Case("control-code", ("show", "{w}/notrun"), "journal_invalid")
    assert run_case(misleading, exe, values).verdict == "misleading"
    wrong_form = Case("control-form", ("pilot", "--faux", "--real"), "campaign_invalid")
    assert run_case(wrong_form, exe, values).verdict == "wrong-form"
    writes = Case("control-writes", ("keygen", "--out", "{w}/fresh"), None)
    answer = run_case(writes, exe, values)
    assert answer.exit == 0 and answer.verdict == "unclear"
    assert {"fresh.key", "fresh.pub"} <= set(answer.changed)
    for name in ("fresh.key", "fresh.pub"):
        (Path(values["w"]) / name).unlink()
    bare = Answer(misleading, 2, "refused", "journal_invalid", "", False, (), "")
    assert bare.verdict == "no-detail"
