"""Directory suites of a user's own conversations: probe files, boundaries, validation,
digests, ``corpus validate`` and the downstream pieces (folds, availability, scoring,
the faux reader) on imported-shape items."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from efold.controller.cli import main
from efold.corpus import (
    CorpusError,
    Event,
    Probe,
    SuiteItem,
    Trace,
    corpus_digest,
    item_digest,
    load_suite_dir,
    original_suite,
    score,
    validate_user_item,
)
from efold.corpus.model import Availability, Category, FunctionCall, Outcome, ToolCall
from efold.corpus.probe_files import parse_probe_file, toml_probe_lines
from efold.corpus.user_suite import check_suite_dir, cut_trace
from efold.corpus.user_validation import item_problems, trace_problems
from efold.errors import Code
from efold.folds import TracePrefix, checkpoint_availability, checkpoint_to_request, get_fold
from efold.protocol.records import OPAQUE_ID
from efold.worker.faux_reader import respond

DATA = Path(__file__).parent / "data" / "user_suite"
GOOD, BAD = DATA / "good", DATA / "bad"
ARMS = ("native", "cold-rebuild", "compaction", "store", "pack")


@pytest.fixture(scope="module")
def good_items() -> list[SuiteItem]:
    return load_suite_dir(GOOD)


def _item(items: list[SuiteItem], trace_id: str) -> SuiteItem:
    return next(i for i in items if i.trace.header.trace_id == trace_id)


def _probe(items: list[SuiteItem], probe_id: str) -> Probe:
    return next(p for i in items for p in i.probes.probes if p.id == probe_id)


def _replace_probe(item: SuiteItem, probe: Probe) -> SuiteItem:
    probes = [probe if p.id == probe.id else p for p in item.probes.probes]
    return msgspec.structs.replace(item, probes=msgspec.structs.replace(item.probes, probes=probes))


def _replace_events(item: SuiteItem, change: Callable[[list[Event]], list[Event]]) -> SuiteItem:
    trace = Trace(header=item.trace.header, events=change(list(item.trace.events)))
    return msgspec.structs.replace(item, trace=trace)


# -- loading and boundaries -----------------------------------------------------------


def test_items_are_sorted_and_boundaries_derive_cut_traces(good_items: list[SuiteItem]) -> None:
    ids = [i.trace.header.trace_id for i in good_items]
    assert ids == ["deploy", "deploy+e0005", "inv-chat", "inv-chat+e0005"]
    whole, derived = _item(good_items, "inv-chat"), _item(good_items, "inv-chat+e0005")
    assert whole.trace.header.sessions == 2 and len(whole.trace.events) == 12
    assert [e.id for e in derived.trace.events] == ["e0001", "e0002", "e0003", "e0004", "e0005"]
    assert derived.trace.header.sessions == 1  # the cut keeps session 1 only
    assert derived.trace.events == whole.trace.events[:5]
    assert [p.id for p in derived.probes.probes] == ["p10", "p11"]
    # p13's boundary is the last event: it belongs to the whole trace.
    assert "p13" in [p.id for p in whole.probes.probes]
    for item in good_items:
        trace_id = item.trace.header.trace_id
        assert OPAQUE_ID.fullmatch(trace_id)
        assert item.probes.trace_id == trace_id
        assert all(p.trace_id == trace_id for p in item.probes.probes)
        validate_user_item(item)


def test_cut_trace_counts_sessions_of_the_kept_events(good_items: list[SuiteItem]) -> None:
    whole = _item(good_items, "inv-chat").trace
    assert cut_trace(whole, "e0009").header.sessions == 2
    assert cut_trace(whole, "e0007").header.sessions == 1
    assert cut_trace(whole, "e0007").header.trace_id == "inv-chat+e0007"


def test_bad_directory_reports_every_problem() -> None:
    report = check_suite_dir(BAD)
    assert report.items == []
    found = {(Path(p.path).name, p.line, p.code) for p in report.problems}
    assert found == {
        ("broken.jsonl", 1, Code.TRACE_SCHEMA_INVALID),  # header sessions
        ("broken.jsonl", 3, Code.TRACE_SCHEMA_INVALID),  # event id e12
        ("broken.jsonl", 4, Code.TRACE_SCHEMA_INVALID),  # result answering no call
        ("broken.jsonl", 5, Code.TRACE_SCHEMA_INVALID),  # a call without its result
        ("broken.probes.toml", 7, Code.PROBE_INVALID),  # expectd
        ("broken.probes.toml", 13, Code.PROBE_INVALID),  # unknown category
        ("broken.probes.toml", 19, Code.PROBE_INVALID),  # no expected
        ("broken.probes.toml", 24, Code.PROBE_BOUNDARY_INVALID),  # e9999
        ("broken.probes.toml", 31, Code.PROBE_INVALID),  # duplicate id
        ("broken.probes.toml", 36, Code.PROBE_INVALID),  # "soon" is no date
        ("typed.probes.jsonl", 2, Code.PROBE_INVALID),  # expected not a list
        ("typed.probes.jsonl", 3, Code.PROBE_INVALID),  # colour
        ("typed.probes.jsonl", 4, Code.PROBE_INVALID),  # source event e0042
        ("lonely.jsonl", None, Code.SUITE_DIR_INVALID),
        ("twice.jsonl", None, Code.SUITE_DIR_INVALID),
        ("orphan.probes.jsonl", None, Code.SUITE_DIR_INVALID),
        ("notes.txt", None, Code.SUITE_DIR_INVALID),
    }
    assert len(report.problems) == len(found)
    with pytest.raises(CorpusError) as err:
        load_suite_dir(BAD)
    assert err.value.code is report.problems[0].code and "more)" in err.value.detail


@pytest.mark.parametrize(("setup", "needle"), [
    (lambda d: None, "no trace (.jsonl) in it"),
    (lambda d: (d / "sub").mkdir(), "not a file"),
    (lambda d: (d / "x.probes.toml").write_text(""), "probe file without its trace"),
])
def test_directory_problems(tmp_path: Path, setup: Callable[[Path], object], needle: str) -> None:
    setup(tmp_path)
    problems = check_suite_dir(tmp_path).problems
    assert all(p.code is Code.SUITE_DIR_INVALID for p in problems)
    assert any(needle in p.detail for p in problems)
    with pytest.raises(CorpusError) as err:
        load_suite_dir(tmp_path)
    assert err.value.code is Code.SUITE_DIR_INVALID


def test_trace_id_must_be_the_file_name(tmp_path: Path) -> None:
    shutil.copy(GOOD / "deploy.jsonl", tmp_path / "other.jsonl")
    shutil.copy(GOOD / "deploy.probes.jsonl", tmp_path / "other.probes.jsonl")
    problems = check_suite_dir(tmp_path).problems
    assert [(p.line, p.code) for p in problems] == [(1, Code.SUITE_DIR_INVALID)]
    assert "is not the file name's 'other'" in problems[0].detail


def test_bundled_suite_directory_from_generate(tmp_path: Path) -> None:
    out = tmp_path / "original"
    result = CliRunner().invoke(main, ["corpus", "generate", "--suite", "original",
                                       "--out", str(out)])
    assert result.exit_code == 0
    items = load_suite_dir(out)
    bundled = sorted(original_suite(), key=lambda i: i.trace.header.trace_id)
    assert items == bundled
    assert corpus_digest(items) == corpus_digest(bundled)
    # Mixed with imported traces in one directory.
    for name in ("deploy.jsonl", "deploy.probes.jsonl"):
        shutil.copy(GOOD / name, out / name)
    assert len(load_suite_dir(out)) == len(bundled) + 2


def test_bundled_trace_is_validated_by_validate(tmp_path: Path) -> None:
    out = tmp_path / "original"
    CliRunner().invoke(main, ["corpus", "generate", "--suite", "original", "--out", str(out)])
    path = sorted(out.glob("*.jsonl"))[0]
    path.write_bytes(path.read_bytes().replace(b'"fictional":true', b'"fictional":false'))
    problems = check_suite_dir(out).problems
    assert [(Path(p.path).name, p.code) for p in problems] == [
        (path.name, Code.TRACE_NOT_FICTIONAL)]


def test_bundled_trace_takes_no_earlier_boundary(tmp_path: Path) -> None:
    item = original_suite()[0]
    trace_id = item.trace.header.trace_id
    out = tmp_path / "s"
    CliRunner().invoke(main, ["corpus", "generate", "--suite", "original", "--out", str(out)])
    (out / f"{trace_id}.probes.json").unlink()
    (out / f"{trace_id}.probes.toml").write_text(
        '[[probe]]\nid = "x1"\ncategory = "abstention"\nquestion = "Q?"\nboundary = "'
        + item.trace.events[3].id + '"\n')
    problems = check_suite_dir(out).problems
    assert [(p.line, p.code) for p in problems] == [(1, Code.PROBE_BOUNDARY_INVALID)]
    assert "last event only" in problems[0].detail


# -- probe files ----------------------------------------------------------------------


def test_toml_probe_lines() -> None:
    text = (GOOD / "inv-chat.probes.toml").read_text()
    lines = toml_probe_lines(text)
    assert len(lines) == 13 and lines[0] == 3
    assert all(text.split("\n")[n - 1].strip() == "[[probe]]" for n in lines)


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("t.probes.jsonl", '{"id":"a","category":"abstention","question":"Q"}',
     [(1, "the last line lacks its newline")]),
    ("t.probes.jsonl", '{"id":"a","category":"abstention","question":"Q"}\n\n',
     [(2, "probe[2]: blank line")]),
    ("t.probes.jsonl", '{"id":"a","id":"b","category":"abstention","question":"Q"}\n',
     [(1, "probe[1]: not JSON: repeated key 'id'")]),
    ("t.probes.jsonl", '[1]\n', [(1, "probe[1]: expected a table of probe fields")]),
    ("t.probes.jsonl", '{"id":"a b","category":"abstention","question":"Q"}\n',
     [(1, "probe[1].id: 'a b' is not an id")]),
    ("t.probes.jsonl", '{"category":"abstention","question":"Q","mode":"later"}\n',
     [(1, "probe[1]: missing field 'id'"), (1, "probe[1].mode: unknown mode 'later'")]),
    ("t.probes.jsonl", '{"id":"a","category":"abstention","question":" "}\n',
     [(1, "probe[1].question: empty string")]),
    ("t.probes.jsonl", '{"id":"a","category":"abstention","question":"Q","trace_id":"t"}\n',
     [(1, "probe[1].trace_id: unknown field")]),
    ("t.probes.toml", 'title = "x"\n\n[[probe]]\nid = "a"\ncategory = "abstention"\n'
     'question = "Q"\nvalue_kind = "colour"\n',
     [(1, "title: unknown field"), (3, "probe[1].value_kind: unknown value_kind 'colour'")]),
    ("t.probes.toml", '[[probe]]\nid = "a"\nid = "b"\n', [(3, "not TOML")]),
    ("t.probes.toml", '[[probe]]\nid = "a"\ncategory = "tool_identifier"\nquestion = "Q"\n'
     'expected = ["x", 3]\n', [(1, "probe[1].expected: expected a list of strings")]),
    ("t.probes.toml", "", [(1, "the file holds no probes")]),
    ("t.probes.json", '{"trace_id":"u","probes":[]}', [(1, "trace_id 'u' is not 't'")]),
    ("t.probes.json", '{"trace_id":"t","probes":7}', [(1, "probe file: Expected `array`")]),
])
def test_probe_file_problems(name: str, text: str, expected: list[tuple[int, str]]) -> None:
    parsed = parse_probe_file(name, text.encode())
    assert [(p.line, p.detail[: len(d)]) for p, (_, d) in
            zip(parsed.problems, expected, strict=True)] == expected


def test_probe_file_formats_agree(tmp_path: Path) -> None:
    toml = parse_probe_file("t.probes.toml", b'[[probe]]\nid = "a"\ncategory = "tool_identifier"'
                            b'\nquestion = "Q"\nexpected = ["X1"]\nboundary = "e0002"\n')
    jsonl = parse_probe_file("t.probes.jsonl", b'{"id":"a","category":"tool_identifier",'
                             b'"question":"Q","expected":["X1"],"boundary":"e0002"}\n')
    assert toml.problems == jsonl.problems == []
    assert toml.probes[0].probe == jsonl.probes[0].probe
    assert toml.probes[0].probe.trace_id == "t" and toml.probes[0].boundary == "e0002"


# -- imported-shape rules -------------------------------------------------------------


def _tool(event: Event, **changes: object) -> Event:
    return msgspec.structs.replace(event, **changes)


@pytest.mark.parametrize(("change", "needle"), [
    (lambda es: [_tool(es[0], steer=True), *es[1:]], "no steers"),
    (lambda es: [*es[:2], _tool(es[2], name=""), *es[3:]], "without a tool name"),
    (lambda es: [*es[:2], _tool(es[2], tool_call_id="nope"), *es[3:]], "answers no earlier"),
    (lambda es: [*es[:2], es[2], es[2], *es[3:]], "event id must be"),
    (lambda es: [*es[:3], _tool(es[3], tool_calls=[ToolCall(
        id="toolu_01", function=FunctionCall(name="Bash", arguments="{}"))]), *es[4:]],
     "is empty or repeats"),
    (lambda es: [*es[:3], _tool(es[3], content="", tool_calls=[]), *es[4:]], "empty list"),
    (lambda es: [*es[:5], _tool(es[5], content=" "), *es[6:]], "owner message"),
    (lambda es: [*es[:5], _tool(es[5], name="Bash"), *es[6:]], "tool-result fields"),
    (lambda es: [*es[:8], _tool(es[8], content="")], "without text or calls"),
    (lambda es: [*es[:5], _tool(es[5], session=2), *es[6:]], "sessions start at 1"),
    (lambda es: [*es[:5], _tool(es[5], day=0), *es[6:]], "never go back"),
    (lambda es: [_tool(e, session=2) for e in es], "sessions start at 1"),
])
def test_imported_trace_rules(good_items: list[SuiteItem],
                              change: Callable[[list[Event]], list[Event]], needle: str) -> None:
    item = _replace_events(_item(good_items, "deploy"), change)
    problems = item_problems(item)
    assert any(needle in p.detail for p in problems), problems
    assert all(p.code is Code.TRACE_SCHEMA_INVALID for p in problems)
    with pytest.raises(CorpusError) as err:
        validate_user_item(item)
    assert err.value.code is Code.TRACE_SCHEMA_INVALID


@pytest.mark.parametrize(("header", "needle"), [
    ({"sessions": 3}, "header says 3 sessions"),
    ({"seed": 101}, "no seed"),
    ({"suite": "mine"}, "is not 'imported'"),
    ({"family": ""}, "family and title"),
    ({"trace_id": "deploy+e0003"}, "does not end in its last event id"),
    ({"trace_id": "bad id"}, "is not an id"),
])
def test_imported_header_rules(good_items: list[SuiteItem], header: dict[str, object],
                               needle: str) -> None:
    item = _item(good_items, "deploy")
    trace = Trace(msgspec.structs.replace(item.trace.header, **header), item.trace.events)
    with pytest.raises(CorpusError) as err:
        validate_user_item(msgspec.structs.replace(item, trace=trace))
    assert needle in err.value.detail


def _probe_change(**changes: object) -> Callable[[Probe], Probe]:
    return lambda p: msgspec.structs.replace(p, **changes)


@pytest.mark.parametrize(("probe_id", "changes", "needle"), [
    ("p09", {"secret": None}, "secret of 8 or more"),
    ("p09", {"secret": "not-in-the-trace"}, "does not occur in the trace"),
    ("p09", {"expected": ["x"]}, "expected does not apply to redaction"),
    ("p08", {"expected": ["x"]}, "expected does not apply to abstention"),
    ("p08", {"source_event": "e0003"}, "an abstention has no source_event"),
    ("p06", {"mode": None}, "needs mode recall or task"),
    ("p07", {"forbidden": []}, "task needs forbidden"),
    ("p07", {"expected": ["Hartley"]}, "task needs forbidden (and no expected)"),
    ("p05", {"value_kind": "date"}, "value_kind does not apply to next_action"),
    ("p04", {"expected": ["DONE"]}, "is not a status word"),
    ("p04", {"value_kind": "date"}, "can only be status"),
    ("p01", {"expected": []}, "needs a non-empty expected"),
    ("p01", {"superseded": ["INV-2291"]}, "scores conflicted, not correct"),
    ("p01", {"expected": ["--"]}, "no letter or digit"),
    ("p03", {"expected": ["many"]}, "holds no number"),
    ("p02", {"expected": ["14 March or 20 March"]}, "exactly one date"),
    ("p01", {"source_event": "e0099"}, "source_event 'e0099' is not an event"),
    ("p01", {"secret": "hunter2-Xq9vLm7P"}, "secret does not apply to tool_identifier"),
    ("p01", {"id": "p02"}, "id repeats"),
])
def test_probe_rules(good_items: list[SuiteItem], probe_id: str, changes: dict[str, object],
                     needle: str) -> None:
    item = _item(good_items, "inv-chat")
    probe = msgspec.structs.replace(_probe(good_items, probe_id), **changes)
    probes = [probe if p.id == probe_id else p for p in item.probes.probes]
    bad = msgspec.structs.replace(item, probes=msgspec.structs.replace(item.probes, probes=probes))
    with pytest.raises(CorpusError) as err:
        validate_user_item(bad)
    assert err.value.code is Code.PROBE_INVALID and needle in err.value.detail


@pytest.mark.parametrize(("file", "line", "code", "needle"), [
    ("inv-chat", 'boundary = "e0002"', Code.PROBE_BOUNDARY_INVALID,
     "separates tool call call_1 from its result"),
    ("inv-chat", 'boundary = "e77"', Code.PROBE_BOUNDARY_INVALID, "'e77' is not an event"),
    ("inv-chat", 'category = "tool_identifier"\nexpected = ["INV-2291"]\nboundary = "e0005"\n'
     'source_event = "e0010"', Code.PROBE_INVALID,
     "'e0010' is not an event of inv-chat+e0005"),
    ("inv-chat", 'boundary = "e0005"\nsecret = "hunter2-Xq9vLm7P"\ncategory = "redaction"',
     Code.PROBE_INVALID, "does not occur in the trace"),
])
def test_boundary_rules(tmp_path: Path, file: str, line: str, code: Code, needle: str) -> None:
    shutil.copy(GOOD / f"{file}.jsonl", tmp_path)
    fields = {"id": '"z1"', "category": '"abstention"', "question": '"Q?"'}
    for extra in line.split("\n"):
        key, value = extra.split(" = ")
        fields[key] = value
    body = "\n".join(f"{k} = {v}" for k, v in fields.items())
    (tmp_path / f"{file}.probes.toml").write_text(f"# a\n\n[[probe]]\n{body}\n")
    problems = check_suite_dir(tmp_path).problems
    assert [(p.line, p.code) for p in problems] == [(3, code)]
    assert needle in problems[0].detail


# -- digests --------------------------------------------------------------------------


def test_corpus_digest_binds_probes_and_boundaries(tmp_path: Path,
                                                   good_items: list[SuiteItem]) -> None:
    suite = tmp_path / "s"
    shutil.copytree(GOOD, suite)
    assert corpus_digest(load_suite_dir(suite)) == corpus_digest(good_items)
    toml = suite / "inv-chat.probes.toml"
    original = toml.read_text()
    toml.write_text(original.replace('expected = ["GBP 1,840.00"]', 'expected = ["GBP 1,840"]'))
    edited = load_suite_dir(suite)
    assert corpus_digest(edited) != corpus_digest(good_items)
    # Only the item holding the edited probe changed.
    changed = [i.trace.header.trace_id for i, j in zip(edited, good_items, strict=True)
               if item_digest(i) != item_digest(j)]
    assert changed == ["inv-chat"]
    toml.write_text(original.replace('boundary = "e0005"', 'boundary = "e0007"', 1))
    moved = load_suite_dir(suite)
    assert [i.trace.header.trace_id for i in moved][-1] == "inv-chat+e0007"
    assert corpus_digest(moved) != corpus_digest(good_items)


# -- corpus validate --------------------------------------------------------------------


def test_validate_subprocess_prints_file_line_problems() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "efold.controller", "corpus", "validate", str(BAD)],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    for expected in (
        f"{BAD}/broken.probes.toml:7: probe_invalid: probe[2].expectd: unknown field",
        f"{BAD}/broken.probes.toml:24: probe_boundary_invalid: probe b5: boundary 'e9999' is "
        "not an event of broken",
        f"{BAD}/broken.jsonl:3: trace_schema_invalid: e12: event id must be e + 4 or more "
        "digits, unique",
        f"{BAD}/typed.probes.jsonl:3: probe_invalid: probe[3].colour: unknown field",
        f"{BAD}/typed.probes.jsonl:2: probe_invalid: probe[2].expected: expected a list of "
        "strings",
        f"{BAD}/notes.txt: suite_dir_invalid: neither a trace (.jsonl) nor a probe file "
        "(.probes.toml, .probes.jsonl, .probes.json)",
        f"{BAD}/lonely.jsonl: suite_dir_invalid: no probe file beside it (lonely.probes.toml, "
        "lonely.probes.jsonl, lonely.probes.json)",
    ):
        assert expected in lines
    assert len(lines) == 17 and done.stdout == ""


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["corpus", "validate", *args])
    return result.exit_code, result.stdout, result.stderr


def test_validate_good_directory_prints_ok_lines_and_digest(good_items: list[SuiteItem]) -> None:
    code, stdout, stderr = _run(str(GOOD))
    assert code == 0 and stderr == ""
    lines = stdout.splitlines()
    assert lines[0].split()[:2] == ["ok", "deploy"] and lines[0].endswith("1 probes")
    assert lines[2].startswith("ok  inv-chat ") and lines[2].endswith(" 11 probes")
    assert f"sha256 {item_digest(good_items[2])}" in lines[2]
    assert lines[-1] == f"suite {GOOD}  4 items  corpus sha256 {corpus_digest(good_items)}"


def test_validate_user_probe_file_and_its_trace(tmp_path: Path) -> None:
    for name in ("inv-chat.jsonl", "inv-chat.probes.toml"):
        shutil.copy(GOOD / name, tmp_path)
    for arg in ("inv-chat.probes.toml", "inv-chat.jsonl"):
        code, stdout, _ = _run(str(tmp_path / arg))
        assert code == 0 and [line.split()[1] for line in stdout.splitlines()] == [
            "inv-chat", "inv-chat+e0005"]
    code, _, stderr = _run(str(BAD / "typed.probes.jsonl"), str(BAD / "typed.jsonl"))
    assert code == 2 and stderr.splitlines() == [
        f"{BAD}/typed.probes.jsonl:2: probe_invalid: probe[2].expected: expected a list of "
        "strings",
        f"{BAD}/typed.probes.jsonl:3: probe_invalid: probe[3].colour: unknown field",
        f"{BAD}/typed.probes.jsonl:4: probe_invalid: probe t4: source_event 'e0042' is not "
        "an event of typed",
    ]
    code, _, stderr = _run(str(BAD / "twice.jsonl"))
    assert code == 2 and "needs exactly one probe file" in stderr


# -- downstream -------------------------------------------------------------------------


@pytest.mark.parametrize("arm", ARMS)
def test_arms_and_availability_run_on_user_items(good_items: list[SuiteItem], arm: str) -> None:
    for item in good_items:
        checkpoint = get_fold(arm).build(TracePrefix.of(item.trace))
        results = checkpoint_availability(checkpoint, item.probes.probes)
        assert [r.probe_id for r in results] == [p.id for p in item.probes.probes]
        for probe, result in zip(item.probes.probes, results, strict=True):
            if probe.category in (Category.ABSTENTION, Category.REDACTION):
                assert result.availability is Availability.NOT_APPLICABLE


def test_native_availability_sees_a_verbatim_value(good_items: list[SuiteItem]) -> None:
    # A user's probe has no label: its value counts wherever it is visible.
    item = _item(good_items, "inv-chat")
    checkpoint = get_fold("native").build(TracePrefix.of(item.trace))
    unlabelled = msgspec.structs.replace(_probe(good_items, "p01"), label=None)
    [result] = checkpoint_availability(checkpoint, [unlabelled])
    # (the superseded INV-2200 is visible too: the native checkpoint keeps everything)
    assert result.availability is Availability.SUPERSEDED_PRESENT


def test_a_tool_call_without_its_result_is_refused(good_items: list[SuiteItem]) -> None:
    # It would reach the native request as a function_call without its output, which
    # providers refuse.
    dangling = Event(id="e0010", session=1, day=1, role="assistant", content="",
                     tool_calls=[ToolCall(id="toolu_99", function=FunctionCall("Bash", "{}"))])
    item = _replace_events(_item(good_items, "deploy"), lambda es: [*es, dangling])
    problems = trace_problems(item.trace)
    assert [p.code for p in problems] == [Code.TRACE_SCHEMA_INVALID]
    assert "toolu_99 has no result" in problems[0].detail


@pytest.mark.parametrize(("probe_id", "correct", "stale"), [
    ("p01", "It is inv 2291.", "INV-2200"),  # identifier
    ("p02", "March 20th", "14 March"),  # date
    ("p03", "1,840 pounds", "GBP 1500.00"),  # amount
    ("p12", "SENT", "Drafted."),  # status (superseded_current, value_kind status)
    ("p04", "Sent, yesterday", "DRAFTED"),  # status (commitment_status)
    ("p11", "Dana at Northwind sent it", "Hartley"),  # text
    ("p05", "Pay the invoice by 18 March", "Send the reminder"),  # next action keywords
])
def test_scoring_on_user_probes(good_items: list[SuiteItem], probe_id: str, correct: str,
                                stale: str) -> None:
    probe = _probe(good_items, probe_id)
    assert score(probe, correct).outcome is Outcome.CORRECT
    assert score(probe, stale).outcome is Outcome.STALE


def test_scoring_constraint_redaction_abstention(good_items: list[SuiteItem]) -> None:
    assert score(_probe(good_items, "p06"), "the Hartley merger").correct
    assert score(_probe(good_items, "p07"), "Re Hartley: ...").outcome is Outcome.VIOLATION
    assert score(_probe(good_items, "p07"), "Hello Dana, invoice paid.").correct
    assert score(_probe(good_items, "p08"), "UNKNOWN").correct
    assert score(_probe(good_items, "p09"), "it is hunter2-Xq9vLm7P").outcome is Outcome.LEAKED


def _faux_answer(checkpoint_item: SuiteItem, question: str) -> str:
    checkpoint = get_fold("native").build(TracePrefix.of(checkpoint_item.trace))
    [reply] = respond(checkpoint_to_request(checkpoint, question, model="m", instructions="i"))
    assert reply["type"] == "message"
    return str(reply["content"][0]["text"])


def test_faux_reader_runs_on_user_items(good_items: list[SuiteItem]) -> None:
    """Usable directly; it reads FORMS.md question templates and fact lines only, so a
    free-form user question gets UNKNOWN, a templated one over a fact line its value."""
    item = _item(good_items, "inv-chat+e0005")
    assert _faux_answer(item, _probe(good_items, "p10").question) == "UNKNOWN"
    templated = "What is the invoice number? Reply with the value only."
    assert _faux_answer(item, templated) == "INV-2200"
