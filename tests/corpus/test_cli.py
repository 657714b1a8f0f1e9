"""``efold-controller corpus generate | validate | show``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from efold.controller.cli import main
from efold.controller.commands.corpus import parse_seeds
from efold.corpus import SuiteItem, dump_probes, dump_trace, trace_digest


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["corpus", *args])
    return result.exit_code, result.stdout, result.stderr


def test_generate_writes_each_trace_once_and_validate_accepts_it(tmp_path: Path) -> None:
    out = tmp_path / "hard"
    code, stdout, _ = run("generate", "--suite", "hard", "--seeds", "101-102", "--out", str(out))
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "gen-cider-102.jsonl", "gen-cider-102.probes.json",
        "gen-kiln-101.jsonl", "gen-kiln-101.probes.json",
    ]
    assert "corpus sha256" in stdout
    code, stdout, _ = run("validate", *map(str, sorted(out.glob("*.jsonl"))))
    assert code == 0 and stdout.count("ok  ") == 2
    # Never overwritten: a second run refuses with the fixed code.
    code, _, stderr = run("generate", "--suite", "hard", "--seeds", "101", "--out", str(out))
    assert code == 2 and "publish_target_exists" in stderr


def test_generate_refuses_out_of_range_seeds(tmp_path: Path) -> None:
    code, _, stderr = run("generate", "--seeds", "99-101", "--out", str(tmp_path))
    assert code == 2 and "trace_seed_out_of_range" in stderr
    assert list(tmp_path.iterdir()) == []


def test_validate_reports_each_rejection_by_code(tmp_path: Path,
                                                 original_items: list[SuiteItem]) -> None:
    good, bad = original_items[0], original_items[1]
    (tmp_path / "a.jsonl").write_bytes(dump_trace(good.trace))
    (tmp_path / "a.probes.json").write_bytes(dump_probes(good.probes))
    text = dump_trace(bad.trace).replace(b'"fictional":true', b'"fictional":false')
    (tmp_path / "b.jsonl").write_bytes(text)
    (tmp_path / "b.probes.json").write_bytes(dump_probes(bad.probes))
    (tmp_path / "c.jsonl").write_bytes(dump_trace(good.trace))  # no probes file
    code, stdout, stderr = run("validate", *(str(tmp_path / n) for n in
                                             ("a.jsonl", "b.probes.json", "c.jsonl")))
    assert code == 2
    assert f"ok  {good.trace.header.trace_id}" in stdout
    assert "rejected: trace_not_fictional" in stderr
    assert "rejected: trace_schema_invalid" in stderr


def test_show_hides_answers_unless_evaluator(tmp_path: Path,
                                             original_items: list[SuiteItem]) -> None:
    item = original_items[0]
    (tmp_path / "t.jsonl").write_bytes(dump_trace(item.trace))
    (tmp_path / "t.probes.json").write_bytes(dump_probes(item.probes))
    code, stdout, _ = run("show", str(tmp_path / "t.jsonl"))
    assert code == 0
    for needle in ("sessions   5", "37 owner", "1 steers", "28 records", "probes     13",
                   trace_digest(item.trace)):
        assert needle in stdout
    answers = [v for p in item.probes.probes for v in (*p.expected, *p.superseded, *p.forbidden)]
    assert answers and not any(v in stdout for v in answers)
    code, stdout, _ = run("show", "--evaluator", str(tmp_path / "t.jsonl"))
    assert code == 0 and all(v in stdout for v in answers)


@pytest.mark.parametrize(("text", "seeds"), [
    ("101-103", [101, 102, 103]), ("101,105", [101, 105]), ("110-111,101", [110, 111, 101]),
    ("107", [107]),
])
def test_parse_seeds(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["a-b", "108-101", "", "101-"])
def test_parse_seeds_refuses_nonsense(text: str) -> None:
    import click

    with pytest.raises(click.BadParameter):
        parse_seeds(text)
