"""The documentation a user's clone holds stays true to the source and self-contained.

- ``docs/codes.md`` is exactly what ``scripts/gen_codes_doc.py`` generates from
  ``efold.errors.Code`` (every code has a meaning, every meaning names a code);
- ``docs/campaign.md`` names every key of every struct a campaign file decodes into,
  with its default, and its annotated example is the bundled default campaign;
- ``docs/results-schema.md`` names every key (and every closed-set value) of the plan, the
  receipts and ``results.json``;
- no file of the repository cites a file outside it, and every relative link in the
  README and ``docs/`` resolves (anchors included).
"""

from __future__ import annotations

import enum
import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, get_args, get_origin

import msgspec
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GENERATOR = ROOT / "scripts" / "gen_codes_doc.py"


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _generator() -> ModuleType:
    return _load(GENERATOR)


# -- codes.md ---------------------------------------------------------------------------


def test_codes_doc_is_current() -> None:
    from efold.errors import Code

    gen = _generator()
    assert gen.problems([c.value for c in Code], gen.MEANINGS) == []
    listed = [name for _, names in gen.sections() for name in names]
    assert sorted(listed) == sorted(c.name for c in Code), "errors.py sections miss a member"
    assert (DOCS / "codes.md").read_text(encoding="utf-8") == gen.render(), (
        "docs/codes.md is stale: run python scripts/gen_codes_doc.py")
    done = subprocess.run([sys.executable, str(GENERATOR), "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


# -- the rooms of controller/ -----------------------------------------------------------


def test_the_picture_of_the_rooms_is_current() -> None:
    """docs/architecture.md §9 is what ``scripts/draw_rooms.py`` draws from the source."""
    draw = ROOT / "scripts" / "draw_rooms.py"
    picture = _load(draw).render()
    assert picture in (DOCS / "architecture.md").read_text(encoding="utf-8"), (
        "docs/architecture.md's rooms are stale: run python scripts/draw_rooms.py")
    done = subprocess.run([sys.executable, str(draw), "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_the_picture_shows_each_room_and_each_arrow_once(tmp_path: Path) -> None:
    draw = _load(ROOT / "scripts" / "draw_rooms.py")
    for room, body in (("pilot", "from efold.controller.rundirs import reap\n"),
                       ("rundirs", ""), ("processes", "")):
        (tmp_path / "controller" / room).mkdir(parents=True)
        (tmp_path / "controller" / room / "__init__.py").write_text(
            f'"""{room.title()}: what {room} owns.\n\nMore.\n"""\n')
        (tmp_path / "controller" / room / "mod.py").write_text(body)
    (tmp_path / "controller" / "rundirs" / "reap.py").write_text(
        "from efold.controller.processes.mod import x\n")
    picture = draw.render(tmp_path)
    rows = [line for line in picture.splitlines() if line.startswith("| `")]
    assert rows == [
        "| `pilot/` | what pilot owns | mod | `rundirs/` |",
        "| `rundirs/` | what rundirs owns | mod, reap | `processes/` |",
        "| `processes/` | what processes owns | mod | none |",
    ]
    assert "  pilot -->|1| rundirs" in picture and "  rundirs -->|1| processes" in picture
    assert "pilot -->|1| processes" not in picture  # drawn only where an import is


def _drawing_checkout(tmp_path: Path, init_doc: str, module: str) -> Path:
    """A checkout holding draw_rooms.py, a marked docs/architecture.md and one room."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "draw_rooms.py").write_bytes(
        (ROOT / "scripts" / "draw_rooms.py").read_bytes())
    (tmp_path / "docs").mkdir()
    draw = _load(ROOT / "scripts" / "draw_rooms.py")
    (tmp_path / "docs" / "architecture.md").write_text(f"{draw.BEGIN}\n{draw.END}\n")
    (tmp_path / "controller" / "pilot").mkdir(parents=True)
    (tmp_path / "controller" / "pilot" / "__init__.py").write_text(init_doc)
    (tmp_path / "controller" / "pilot" / "slots.py").write_text(module)
    return tmp_path / "scripts" / "draw_rooms.py"


@pytest.mark.parametrize(("init_doc", "module", "expected"), [
    ('"""Pilot: a run."""\n', "x = 1\n\ndef broken(:\n",
     "draw_rooms: controller/pilot/slots.py:3: invalid syntax: the imports are read from "
     "the source, so every module must parse; fix it and run again\n"),
    ("", "x = 1\n",
     "draw_rooms: controller/pilot/__init__.py has no docstring: start it with what the "
     "room owns and what it may import (its first paragraph is drawn in "
     "docs/architecture.md)\n"),
    ('"""   """\n', "x = 1\n",
     "draw_rooms: controller/pilot/__init__.py has no docstring: start it with what the "
     "room owns and what it may import (its first paragraph is drawn in "
     "docs/architecture.md)\n"),
], ids=["syntax-error", "no-docstring", "blank-docstring"])
@pytest.mark.parametrize("mode", ["--check", "--print", None])
def test_draw_rooms_names_what_it_cannot_draw(
    tmp_path: Path, init_doc: str, module: str, expected: str, mode: str | None
) -> None:
    """Exit 2 with the file and the fix, never a traceback, and the doc left as it was."""
    script = _drawing_checkout(tmp_path, init_doc, module)
    before = (tmp_path / "docs" / "architecture.md").read_bytes()
    done = subprocess.run([sys.executable, str(script), *([mode] if mode else [])],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          check=False)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", expected)
    assert (tmp_path / "docs" / "architecture.md").read_bytes() == before


def test_draw_rooms_draws_a_room_whose_docstring_says_what_it_owns(tmp_path: Path) -> None:
    """The counterpart of the refusals above: one character of docstring is enough."""
    script = _drawing_checkout(tmp_path, '"""P"""\n', "x = 1\n")
    done = subprocess.run([sys.executable, str(script), "--print"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "| `pilot/` | P | slots | none |" in done.stdout


def test_the_codes_checker_names_a_missing_an_unknown_and_an_empty_meaning() -> None:
    found = _generator().problems(["kept", "lost", "blank"],
                                  {"kept": "a line", "blank": " ", "invented": "a line"})
    assert found == ["no meaning for code 'lost'",
                     "meaning for 'invented', which is not a code",
                     "empty meaning for 'blank'"]


def test_the_generator_reads_the_sections_of_errors_py() -> None:
    source = (
        "import enum\n"
        "class Code(enum.StrEnum):\n"
        "    # -- First (docs/architecture.md §11) -----\n"
        "    A = 'a'\n"
        "    B = 'b'  # a comment\n"
        "\n"
        "    # -- pkg/ ------------------------------------\n"
        "    C = 'c'\n"
    )
    assert _generator().sections(source) == [("First", ["A", "B"]), ("pkg/", ["C"])]


# -- struct walking ---------------------------------------------------------------------


def _walk(roots: Iterable[Any]) -> tuple[list[type[msgspec.Struct]], set[str]]:
    """Every Struct reachable from ``roots`` through field types (lists, dicts, unions,
    optionals), and every value of the enums and string literals met on the way."""
    structs: list[type[msgspec.Struct]] = []
    values: set[str] = set()

    def visit(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
            if tp not in structs:
                structs.append(tp)
                for field in msgspec.structs.fields(tp):
                    visit(field.type)
        elif isinstance(tp, type) and issubclass(tp, enum.Enum):
            values.update(str(member.value) for member in tp)
        elif get_origin(tp) is Literal:
            values.update(arg for arg in get_args(tp) if isinstance(arg, str))
        else:
            for arg in get_args(tp):
                visit(arg)

    for root in roots:
        visit(root)
    return structs, values


_TICKED = re.compile(r"`([^`\n]+)`")


def _ticked(text: str) -> set[str]:
    """Names a document shows as code: each backticked span, and for a dotted span
    (``deadlines.prep_seconds``) its last part too."""
    names: set[str] = set()
    for span in _TICKED.findall(text):
        names.add(span)
        names.add(span.rsplit(".", 1)[-1])
    return names


def _undocumented(structs: Iterable[type[msgspec.Struct]], text: str) -> list[str]:
    shown = _ticked(text)
    return [f"{tp.__name__}.{field.encode_name}"
            for tp in structs for field in msgspec.structs.fields(tp)
            if field.encode_name not in shown]


class _Colour(enum.StrEnum):
    RED = "red"


class _Leaf(msgspec.Struct):
    depth: int


class _Branch(msgspec.Struct):
    leaves: list[_Leaf]
    by_name: dict[str, _Leaf]
    colour: _Colour | None = None
    mode: Literal["on", "off"] = "on"


def test_the_struct_walk_reaches_nested_and_optional_types() -> None:
    structs, values = _walk([_Branch])
    assert structs == [_Branch, _Leaf]
    assert values == {"red", "on", "off"}
    assert _undocumented(structs, "`leaves`, `x.by_name`, `colour`, `mode`") == ["_Leaf.depth"]


# -- campaign.md ------------------------------------------------------------------------


def _campaign_structs() -> list[type[msgspec.Struct]]:
    """The structs a campaign file decodes into: every struct of the campaign module
    shaped like a campaign (it has ``name``, ``suite`` and ``roles``), and everything
    nested in them. Found by shape, so renaming a class does not hide a field."""
    import efold.controller.campaigns.campaign as campaign

    roots = [
        value for value in vars(campaign).values()
        if isinstance(value, type) and issubclass(value, msgspec.Struct)
        and value.__module__ == campaign.__name__
        and {"name", "suite", "roles"} <= set(value.__struct_fields__)
    ]
    assert roots, "no campaign struct found in efold.controller.campaigns.campaign"
    return _walk(roots)[0]


def test_campaign_doc_names_every_campaign_key() -> None:
    text = (DOCS / "campaign.md").read_text(encoding="utf-8")
    structs = _campaign_structs()
    assert len(structs) >= 5  # campaign, reader, budgets, deadlines, role
    assert _undocumented(structs, text) == []


def _toml_default(value: object) -> str | None:
    """A scalar default as the reference's default column shows it."""
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, int | float):
        return f"`{value!r}`"
    return None


def test_campaign_doc_gives_every_scalar_default() -> None:
    text = (DOCS / "campaign.md").read_text(encoding="utf-8")
    cells: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = re.match(r"\|\s*`([a-z_]+)`\s*\|[^|]*\|([^|]*)\|", line)
        if match:
            cells.setdefault(match.group(1), []).append(match.group(2))
    wrong = []
    for tp in _campaign_structs():
        for field in msgspec.structs.fields(tp):
            shown = _toml_default(field.default)
            if shown is not None and not any(shown in cell for cell in
                                             cells.get(field.encode_name, [])):
                wrong.append(f"{field.encode_name}: default {shown}")
    assert wrong == []


def test_campaign_doc_names_every_suite_and_arm() -> None:
    from efold.controller.campaigns.campaign import ARMS, SUITES

    shown = _ticked((DOCS / "campaign.md").read_text(encoding="utf-8"))
    assert [name for name in (*SUITES, *ARMS) if name not in shown] == []


def test_campaign_doc_example_is_the_bundled_default_campaign() -> None:
    from efold.controller.campaigns.campaign import bundled_campaign, parse_campaign

    text = (DOCS / "campaign.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- campaign-example: default -->\s*```toml\n(.*?)```", text, re.S)
    assert match, "campaign.md has no marked example"
    assert parse_campaign(match.group(1)) == bundled_campaign("default")[0]


def test_every_key_of_the_bundled_campaigns_is_documented() -> None:
    def keys(table: dict[str, Any]) -> Iterator[str]:
        for key, value in table.items():
            yield key
            if isinstance(value, dict):
                yield from keys(value)

    shown = _ticked((DOCS / "campaign.md").read_text(encoding="utf-8"))
    found = {key for path in (ROOT / "controller" / "campaigns").glob("*.toml")
             for key in keys(tomllib.loads(path.read_text(encoding="utf-8")))}
    assert found and sorted(found - shown) == []


# -- results-schema.md -------------------------------------------------------------------------


def test_results_doc_names_every_key_and_value() -> None:
    from efold.protocol.records import Plan, Receipt
    from efold.report import RESULTS_SCHEMA, Results

    text = (DOCS / "results-schema.md").read_text(encoding="utf-8")
    structs, values = _walk([Results, Receipt, Plan])
    assert len(structs) >= 20
    assert _undocumented(structs, text) == []
    shown = _ticked(text)
    assert sorted(values - shown) == []
    assert RESULTS_SCHEMA in shown


# -- self-containment -------------------------------------------------------------------

_TEXT_SUFFIXES = (".md", ".py", ".toml", ".sh", ".txt", ".cfg", ".yml", ".yaml")
# Citations of documents that live outside the repository. Each pattern is split so
# that this file does not match itself.
_OUTSIDE = [re.compile(p) for p in (
    r"\.\./" + "shared", "DESIGN" + r"\.md", "DESIGN" + r"\s*§", "CONVENTIONS" + r"\.md",
    "shared" + "/reference",
)]
_SKIP_DIRS = {".git", ".venv", "venv", ".ci-venv", "build", "dist", "efold-runs", "runs",
              "__pycache__"}


def _repository_files() -> list[Path]:
    """Tracked files, and new files not ignored (so a new document is checked before
    it is committed); a tree without git is walked instead."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, check=True, timeout=30,
        ).stdout.decode()
        names = sorted({name for name in out.split("\0") if name})
    except (OSError, subprocess.CalledProcessError):
        names = []
        for directory, subdirs, files in os.walk(ROOT):
            subdirs[:] = [d for d in subdirs
                          if d not in _SKIP_DIRS and not d.endswith(".egg-info")]
            names += [os.path.relpath(os.path.join(directory, f), ROOT) for f in files]
    return [ROOT / n for n in names if n.endswith(_TEXT_SUFFIXES) and (ROOT / n).is_file()]


def _outside_citations(path: Path) -> list[str]:
    """One entry per line that cites a file outside the repository."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return [f"{path.name}:{number}: {line.strip()[:100]}"
            for number, line in enumerate(lines, 1)
            if any(pattern.search(line) for pattern in _OUTSIDE)]


def test_no_file_cites_a_file_outside_the_repository() -> None:
    files = _repository_files()
    assert ROOT / "docs" / "architecture.md" in files and ROOT / "errors.py" in files
    assert [f"{path.parent.relative_to(ROOT)}/{hit}"
            for path in files for hit in _outside_citations(path)] == []


def test_the_citation_check_sees_every_kind_of_citation(tmp_path: Path) -> None:
    planted = tmp_path / "planted.md"
    cited = ["../" + "shared/notes.md", "DESIGN" + ".md", "DESIGN" + " §4",
             "CONVENTIONS" + ".md", "shared" + "/reference/protocol.md"]
    planted.write_text("\n".join(["a clean line", *(f"see {c}" for c in cited)]) + "\n",
                       encoding="utf-8")
    assert [hit.split(":")[1] for hit in _outside_citations(planted)] == ["2", "3", "4", "5", "6"]


# -- links ------------------------------------------------------------------------------

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_LINK = re.compile(r"^\s*\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _prose(text: str) -> str:
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces to hyphens,
    repeats numbered."""
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    for line in _FENCE.sub("", text).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _broken_links(page: Path, root: Path = ROOT) -> list[str]:
    text = page.read_text(encoding="utf-8")
    prose = _prose(text)
    broken = []
    for target in [*_LINK.findall(prose), *_REF_LINK.findall(prose)]:
        if _SCHEME.match(target):
            continue  # a URL: nothing in the clone to check
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(root)}: {target}"
        if not resolved.is_relative_to(root):
            broken.append(f"{where} (outside the repository)")
        elif not resolved.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and resolved.suffix == ".md" and \
                anchor not in _anchors(resolved.read_text(encoding="utf-8")):
            broken.append(f"{where} (no such heading)")
    return broken


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert _broken_links(page) == []


def test_the_link_check_sees_broken_links(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "codes.md").write_text("# Codes\n\n## A `real` heading\n",
                                               encoding="utf-8")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Title\n\n[ok](codes.md) [ok](#title) [ok](codes.md#a-real-heading)\n"
        "[ok](https://example.org/x) [ok](../docs/codes.md)\n"
        "[gone](nowhere.md) [anchor](codes.md#no-such-heading) [up](../../etc/passwd)\n"
        "`[code](not-a-link.md)`\n\n```\n[fenced](not-a-link.md)\n```\n"
        "[ref]: missing.md\n",
        encoding="utf-8",
    )
    assert [b.split(": ", 1)[1] for b in _broken_links(page, root=tmp_path)] == [
        "nowhere.md (no such file)",
        "codes.md#no-such-heading (no such heading)",
        "../../etc/passwd (outside the repository)",
        "missing.md (no such file)",
    ]
