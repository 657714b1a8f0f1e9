"""docs/folds.md, the fold authoring guide: its examples are extracted and run.

Each example in the guide is a fenced block right after an ``<!-- example: NAME -->``
comment. Here they are run the way efold runs them:

- the external-command fold through efold's own runner (``ExternalCommandFold``), with
  the environment a prep child gives it (the controller's allowlist) and another
  working directory, on a small synthetic trace and on the original suite;
- the entry-point fold installed from the guide's ``pyproject.toml`` table (a
  dist-info with ``entry_points.txt`` and ``RECORD`` in a temporary directory on
  ``sys.path``, as pip would write it), loaded by efold's registry (``get_fold``: the
  loader's checks, ``CheckedFold`` and ``checked``), written and restored as a snapshot;
- every campaign snippet through the controller's loader (``parse_campaign``); the
  comparison campaign through ``compute_registration``, which pins both folds.

What is not run here: ``pip install`` (the install is emulated in a temporary directory
visible to this process only), and a real prep child. A prep child runs
``python -I``, which cannot see that directory. It also re-checks efold's build digest,
which other edits to the source would race.
"""

from __future__ import annotations

import re
import runpy
import sys
import tomllib
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from efold.controller.campaigns.campaign import Campaign, parse_campaign
from efold.controller.campaigns.registration import compute_registration, folds_document
from efold.controller.errors import CampaignError
from efold.controller.processes.childenv import child_environment
from efold.corpus import original_suite
from efold.errors import Code
from efold.folds import (
    LOOKUP_TOOLS,
    Checkpoint,
    ExternalCommandFold,
    PluginError,
    TracePrefix,
    checkpoint_availability,
    get_fold,
    read_checkpoint,
    write_checkpoint,
)
from efold.folds.checkpoint import BoundaryEvidence
from efold.folds.fold import checked
from efold.folds.registry import CheckedFold, plugin_arms

DOC = Path(__file__).resolve().parents[2] / "docs" / "folds.md"
_EXAMPLE = re.compile(r"<!-- example: ([a-z0-9-]+) -->\n```(\w+)\n(.*?)^```", re.S | re.M)

# Every example the guide promises, and the language of its fence.
EXAMPLES = {
    "builtin-campaign": "toml",
    "command-fold": "python",
    "command-campaign": "toml",
    "entry-point-fold": "python",
    "entry-point-pyproject": "toml",
    "entry-point-campaign": "toml",
    "proxy-fold": "python",
    "proxy-campaign": "toml",
    "local-check": "python",
    "compare-campaign": "toml",
}
# The paths the guide's command roles name, replaced here by this interpreter and the
# extracted script.
DOC_PYTHON = "/usr/bin/python3"
DOC_SCRIPT = "/opt/folds/facts_tail.py"

IDENTIFIER = "Account reference: ACC-7F3K-219"
PASSWORD = "Temporary password: Qz7-29xk-Lm4"


def examples(text: str | None = None) -> dict[str, tuple[str, str]]:
    """name -> (fence language, code) of every marked example."""
    found: dict[str, tuple[str, str]] = {}
    for name, lang, body in _EXAMPLE.findall(DOC.read_text(encoding="utf-8") if text is None
                                             else text):
        assert name not in found, f"two examples are marked {name!r}"
        found[name] = (lang, body)
    return found


def example(name: str) -> str:
    found = examples()
    assert name in found, f"docs/folds.md has no example marked {name!r}"
    return found[name][1]


def with_paths(toml: str, script: Path) -> str:
    """A campaign snippet with the guide's interpreter and script paths made real."""
    assert DOC_PYTHON in toml and DOC_SCRIPT in toml
    return toml.replace(DOC_PYTHON, sys.executable).replace(DOC_SCRIPT, str(script))


@pytest.fixture
def command_script(tmp_path: Path) -> Path:
    script = tmp_path / "folds" / "facts_tail.py"
    script.parent.mkdir()
    script.write_text(example("command-fold"), encoding="utf-8")
    return script


@pytest.fixture
def installed_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The guide's entry-point fold installed from its pyproject: the module and a
    dist-info (METADATA, entry_points.txt from the ``efold.folds`` table, RECORD) in
    a directory on this process's ``sys.path``."""
    project = tomllib.loads(example("entry-point-pyproject"))
    meta = project["project"]
    (module,) = project["tool"]["setuptools"]["py-modules"]
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{module}.py").write_text(example("entry-point-fold"), encoding="utf-8")
    info = site / f"{meta['name']}-{meta['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n")
    points = meta["entry-points"]["efold.folds"]
    (info / "entry_points.txt").write_text(
        "[efold.folds]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    listed = [f"{module}.py", f"{info.name}/METADATA", f"{info.name}/entry_points.txt"]
    (info / "RECORD").write_text("".join(f"{p},,\n" for p in [*listed, f"{info.name}/RECORD"]))
    monkeypatch.syspath_prepend(str(site))  # also invalidates the import caches
    yield site
    sys.modules.pop(module, None)


def _trace(synthetic):
    t = synthetic("guide")
    t.owner("Before we start:\nRule: never mention the second site to any counterparty.")
    t.reply("Understood.")
    t.tool(f"Message from the bank\n{IDENTIFIER}\nRegards", steer="Keep it short.")
    t.tool(f"Portal access\n{PASSWORD}")
    t.next_day()
    t.owner("Next: book the van by 14 March 2031.")
    t.reply("Booked the van for 14 March 2031.")
    return t


def _notes(checkpoint: Checkpoint) -> str:
    first = checkpoint.messages[0]
    assert first.role == "user" and first.content.startswith("Notes carried over:")
    return first.content


# -- the marks ------------------------------------------------------------------------


def test_every_promised_example_is_marked_once() -> None:
    found = examples()
    assert {name: lang for name, (lang, _) in found.items()} == EXAMPLES


def test_the_extractor_sees_a_missing_and_a_doubled_mark() -> None:
    text = "<!-- example: a -->\n```toml\nx = 1\n```\n\n<!-- example: b -->\n```python\npass\n```\n"
    assert examples(text) == {"a": ("toml", "x = 1\n"), "b": ("python", "pass\n")}
    with pytest.raises(AssertionError, match="two examples"):
        examples(text + text)


# -- the external-command fold --------------------------------------------------------


def test_the_command_fold_builds_a_valid_checkpoint(synthetic, command_script: Path,
                                                    tmp_path: Path) -> None:
    t = _trace(synthetic)
    elsewhere = tmp_path / "elsewhere"  # a prep child runs in the operator's directory
    elsewhere.mkdir()
    fold = ExternalCommandFold("facts-tail", [sys.executable, str(command_script)],
                               timeout_s=30, env=child_environment(), cwd=str(elsewhere))
    prefix = t.prefix()
    checkpoint = fold.build(prefix)  # decoded and ``checked`` by efold's runner
    assert checked(checkpoint, "facts-tail", prefix) is checkpoint
    assert (checkpoint.arm, checkpoint.trace_id) == ("facts-tail", "guide")
    assert checkpoint.tools == [] and checkpoint.store is None
    assert checkpoint.receipt.boundary == BoundaryEvidence(kind="external", verified=True)
    assert checkpoint.receipt.pressure == []
    notes = _notes(checkpoint)
    assert IDENTIFIER in notes and "Rule: never mention the second site" in notes
    assert "Next: book the van by 14 March 2031." in notes
    assert "password" not in notes.lower() and "Steer:" not in notes  # what it promises
    # The tail: the text messages (owner, steer, assistant), newest last.
    assert [m.content for m in checkpoint.messages[1:]][-2:] == [
        "Next: book the van by 14 March 2031.", "Booked the van for 14 March 2031."]
    # The snapshot the prep child writes and the controller verifies.
    manifest = write_checkpoint(checkpoint, tmp_path / "snapshot")
    restored = read_checkpoint(tmp_path / "snapshot", expected_digest=manifest.digest)
    assert restored.checkpoint == checkpoint


@pytest.mark.parametrize(("old", "new", "code"), [
    ('"tools": []', '"tools": ["history_get", "history_search"]', Code.FOLD_PLUGIN_INVALID),
    ('"boundary_crossed": True}', '"boundary_crossed": True, "note": 1}',
     Code.FOLD_PLUGIN_INVALID),
    ("    return 0\n", "    return 1\n", Code.FOLD_PLUGIN_FAILED),
])
def test_a_broken_copy_of_the_command_fold_is_refused(synthetic, tmp_path: Path, old: str,
                                                      new: str, code: Code) -> None:
    """The harness above can fail: the same runner refuses a copy broken in one place."""
    source = example("command-fold")
    assert source.count(old) == 1
    script = tmp_path / "broken.py"
    script.write_text(source.replace(old, new), encoding="utf-8")
    fold = ExternalCommandFold("facts-tail", [sys.executable, str(script)], timeout_s=30,
                               env=child_environment())
    with pytest.raises(PluginError) as refused:
        fold.build(_trace(synthetic).prefix())
    assert refused.value.code is code


def test_the_local_check_runs_and_the_command_fold_keeps_every_probed_fact(
        command_script: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    check = command_script.parent / "check.py"
    check.write_text(example("local-check"), encoding="utf-8")
    monkeypatch.chdir(command_script.parent)  # the snippet names "facts_tail.py"
    runpy.run_path(str(check), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    traces = sorted(item.trace.header.trace_id for item in original_suite())
    assert sorted(line.split()[0] for line in lines) == traces
    for line in lines:
        assert "failed:" not in line and " tokens " in line, line
        assert "absent" not in line, line  # availability: nothing the probes ask was lost


# -- the entry-point fold -------------------------------------------------------------


def test_the_entry_point_fold_loads_and_passes_the_plugin_checks(
        installed_entry_point: Path, synthetic, tmp_path: Path) -> None:
    names, rejected = plugin_arms()
    assert "facts-store" in names and "facts-store" not in [r.name for r in rejected]
    fold = get_fold("facts-store")  # the loader's checks: a Fold, named as its entry point
    assert isinstance(fold, CheckedFold) and fold.name == "facts-store"
    prefix = _trace(synthetic).prefix()
    checkpoint = fold.build(prefix)  # CheckedFold applies ``checked``
    assert (checkpoint.arm, checkpoint.trace_id) == ("facts-store", "guide")
    assert checkpoint.tools == list(LOOKUP_TOOLS) and checkpoint.store is not None
    assert checkpoint.receipt.boundary.verified
    notes = _notes(checkpoint)
    assert IDENTIFIER in notes and "password" not in notes.lower()
    # efold's standard store: every event but the tool result holding a credential.
    ids = [r.id for r in checkpoint.store.records]
    credential = next(e.id for e in prefix.events if PASSWORD in e.content)
    assert credential not in ids and len(ids) == len(prefix.events) - 1
    assert checkpoint.store.omitted_credential == 1
    assert checkpoint.receipt.store is not None and checkpoint.receipt.store.records == len(ids)
    manifest = write_checkpoint(checkpoint, tmp_path / "snapshot")
    assert [f.name for f in manifest.files] == ["checkpoint.json", "store.sqlite"]
    restored = read_checkpoint(tmp_path / "snapshot", expected_digest=manifest.digest)
    assert restored.checkpoint == checkpoint


def test_the_entry_point_fold_keeps_every_probed_fact(installed_entry_point: Path) -> None:
    fold = get_fold("facts-store")
    for item in original_suite():
        checkpoint = fold.build(TracePrefix.of(item.trace))
        kept = Counter(r.availability.value
                       for r in checkpoint_availability(checkpoint, item.probes.probes))
        assert kept["absent"] == 0, (item.trace.header.trace_id, kept)


def test_a_broken_entry_point_fold_is_refused(installed_entry_point: Path, synthetic) -> None:
    """The plugin checks can fail: a fold whose store goes without its tools."""
    module = installed_entry_point / "factsfold.py"
    source = module.read_text(encoding="utf-8")
    old = "tools = list(LOOKUP_TOOLS)"
    assert source.count(old) == 1
    module.write_text(source.replace(old, "tools = []"), encoding="utf-8")
    with pytest.raises(PluginError) as refused:
        get_fold("facts-store").build(_trace(synthetic).prefix())
    assert refused.value.code is Code.FOLD_PLUGIN_INVALID


# -- the campaigns --------------------------------------------------------------------


def test_the_builtin_and_command_campaigns_validate(command_script: Path) -> None:
    builtin = parse_campaign(example("builtin-campaign"))
    assert [(r.name, r.arm) for r in builtin.roles] == [
        (a, a) for a in ("native", "cold-rebuild", "compaction", "pack")]
    command = parse_campaign(with_paths(example("command-campaign"), command_script))
    (role,) = command.roles
    assert (role.name, role.arm, role.timeout_seconds) == ("facts-tail", "facts-tail", 30)
    assert role.command == [sys.executable, str(command_script)]


def test_the_entry_point_campaign_needs_the_installed_distribution() -> None:
    # Nothing named facts-store is installed in this process (see the next test).
    with pytest.raises(CampaignError) as refused:
        parse_campaign(example("entry-point-campaign"))
    assert refused.value.code is Code.CAMPAIGN_INVALID


def test_the_entry_point_and_comparison_campaigns_validate_and_pin(
        installed_entry_point: Path, command_script: Path) -> None:
    (role,) = parse_campaign(example("entry-point-campaign")).roles
    assert (role.name, role.arm, role.command) == ("facts-store", "facts-store", None)
    text = with_paths(example("compare-campaign"), command_script)
    campaign: Campaign = parse_campaign(text)
    assert [r.name for r in campaign.roles] == [
        "native", "cold-rebuild", "compaction", "pack", "facts-tail", "facts-store"]
    registration = compute_registration(campaign, text.encode())
    assert registration.cap_units >= registration.rmax_units
    pins = {r.name: pin for r, pin in zip(campaign.roles, folds_document(campaign),
                                         strict=True)}
    assert pins["native"] == {"kind": "builtin", "arm": "native"}
    assert pins["facts-tail"]["kind"] == "command"
    assert list(pins["facts-tail"]["argument_files"]) == [str(command_script)]
    assert {k: pins["facts-store"][k] for k in ("kind", "name", "distribution", "version")} == {
        "kind": "entry_point", "name": "facts-store", "distribution": "factsfold",
        "version": "0.1.0"}
    assert msgspec.json.encode(registration)  # it serializes like any registration
