"""The sidecar ``ef-boundary.yml``: how a session is used as a boundary case (docs/boundary.md §2).

Rules:

* **Closed schema.** Every block is a frozen Struct with ``forbid_unknown_fields``; keys
  are camelCase (``rename="camel"``). Oracles are the closed union
  ``efold.boundary.oracles.Oracle`` (tag ``type``), duplicate-rule families
  ``efold.boundary.actions.ActionFamily``, capabilities ``Capability``, workloads
  ``Workload``: an unknown field, a wrong type or an unknown name refuses.
* **Every refusal names its field.** ``BoundaryError(BOUNDARY_CASE_INVALID,
  "<file>: <why> - at `$.path`")``, the path in the sidecar's own (camelCase) keys, as
  msgspec writes it; a YAML mapping that repeats a key refuses too (PyYAML would keep
  the last value silently, so the file would not say what the case does).
* **Semantic rules** msgspec cannot state (``check_sidecar``): the id pattern, the tier
  the id letter implies (B hard, X exploratory, R mined), the ranges (``version`` >= 1,
  ``fold.repeat`` 1-8, ``continuation.maxActions`` 1-64, ``tools.test.timeoutSeconds``
  1-600), non-empty stimulus and commands, at least one capability and one oracle,
  every ``tests-pass`` command one of ``tools.test.commands``, a required recall with
  its answer, kebab-case failure signatures, a known ``source.format``, distinct
  ``source.critical`` ids, a ``faux`` script whose fallback plan (no ``when``) is last.
* **Paths are canonical and stay inside.** ``source.session`` (inside the case
  directory) and every path an oracle names (inside the workspace, or
  ``workspace.expected/`` for ``file-equals.expected``; a ``read``/``edit``
  ``tool-action`` target) are relative POSIX paths already in normal form: no leading
  ``/``, no ``.`` or ``..`` or empty segment, no backslash or NUL. A path that escapes
  is refused, never normalized into the tree (``path_problem``, on the rule of
  ``efold.boundary.actions.normalize_path``).

What this module does not check (``efold.boundary.case`` does, with the directory at
hand): that the session exists and holds ``source.boundary`` and every
``source.critical`` event before it, that the workspace and
every ``file-equals`` expected file exist.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

import msgspec

from efold.boundary.actions import ActionFamily, normalize_path
from efold.boundary.errors import BoundaryError
from efold.boundary.faux_agent import FauxScript
from efold.boundary.oracles import (
    ArtifactExists,
    FileChanged,
    FileEquals,
    FileUnchanged,
    ForbiddenPathUnchanged,
    NoCrossSessionRecall,
    Oracle,
    TestsPass,
    ToolActionAbsent,
    ToolActionPresent,
)
from efold.corpus.import_formats import READERS
from efold.errors import Code
from efold.input_files import SIDECAR_LIMIT, InputFileError, read_input
from efold.protocol.regime import FoldMode, FoldTarget, Regime

if TYPE_CHECKING:
    import yaml

SIDECAR_NAME: Final = "ef-boundary.yml"

Workload = Literal["coding", "research", "operations", "writing"]
Tier = Literal["hard", "exploratory", "mined"]
Capability = Literal[
    "constraint-retention", "current-state", "empirical-authority", "failure-lifecycle",
    "obligation-continuity", "exact-recoverability", "structural-legality", "fold-frontier",
    "root-rebase", "session-isolation", "durable-recall", "state-handoff",
    "rejected-approach", "uncertainty", "causal-dependency", "rationale", "search-evidence",
    "child-handoff",
]

# The id letter fixes the tier: B hard gate, X exploratory, R mined from a real session.
TIER_OF_LETTER: Final[dict[str, Tier]] = {"B": "hard", "X": "exploratory", "R": "mined"}
CASE_ID: Final = re.compile(r"[BXR][0-9]{2}(-[a-z0-9]+)*")
_KEBAB: Final = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")

EFOLD_TRACE: Final = "efold-trace"
# ``efold-trace`` (the corpus codec) or an importer's name (``corpus.import_formats``).
SOURCE_FORMATS: Final[tuple[str, ...]] = (EFOLD_TRACE, *READERS)
BOUNDARY_END: Final = "end"

MAX_REPEAT: Final = 8
MAX_ACTIONS: Final = 64
MAX_TEST_TIMEOUT_SECONDS: Final = 600


class _Block(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    pass


class Source(_Block, frozen=True):
    session: str  # canonical relative path inside the case directory
    format: str  # one of SOURCE_FORMATS
    boundary: str  # "end", or the id of the first event after the boundary
    # The events the case claims to test (docs/boundary.md §7): distinct ids of events
    # before the boundary (case.py checks them against the session).
    critical: list[str] = []


class FoldSpec(_Block, frozen=True):
    mode: FoldMode  # leaf, or root: a rebase (``efold.folds.regime``)
    repeat: int = 1  # successive folds, 1..MAX_REPEAT
    target: FoldTarget = "whole"  # or oldest-safe-span (``efold.folds.regime``)
    # The agent process ends after the fold; a new one resumes from the written
    # snapshot alone (``efold.boundary.restart``).
    restart: bool = False

    @property
    def regime(self) -> Regime:
        """The regime ``efold.folds.regime.fold_case`` folds the case's history in."""
        return Regime(mode=self.mode, target=self.target)


class Continuation(_Block, frozen=True):
    input: list[str]  # one or more non-empty owner messages
    max_actions: int  # tool calls the agent may make, 1..MAX_ACTIONS


class TestTool(_Block, frozen=True):
    __test__ = False  # not a pytest test class, whatever its name
    commands: list[list[str]]  # the only argv the test tool may run; non-empty, each non-empty
    timeout_seconds: int  # 1..MAX_TEST_TIMEOUT_SECONDS


class Tools(_Block, frozen=True):
    edit: bool = False  # read and search are always offered
    test: TestTool | None = None  # None: no test tool (and no tests-pass oracle)


class OracleSet(_Block, frozen=True):
    success: list[Oracle]  # at least one; every one must pass


class DuplicateRule(_Block, frozen=True):
    family: ActionFamily


class Behavior(_Block, frozen=True):
    duplicate_rules: list[DuplicateRule] = []


class Recall(_Block, frozen=True):
    required: bool = False  # true: ``answer`` must be absent from the checkpoint surface
    answer: str | None = None  # non-empty when required


class Classification(_Block, frozen=True):
    expected_capability: list[Capability]  # at least one
    failure_signatures: list[str] = []  # free kebab-case names


class Sidecar(_Block, frozen=True):
    """One case's ``ef-boundary.yml``, decoded and checked (``decode_sidecar``)."""

    version: int  # the case's revision, >= 1 (docs/boundary.md §3)
    id: str  # CASE_ID; its letter fixes ``tier``
    workload: Workload
    tier: Tier
    source: Source
    fold: FoldSpec
    continuation: Continuation
    tools: Tools
    oracle: OracleSet
    classification: Classification
    behavior: Behavior = Behavior()
    recall: Recall = Recall()
    faux: FauxScript | None = None  # the faux agent's script (docs/boundary.md §6)


def _invalid(name: str, why: str, path: str) -> BoundaryError:
    return BoundaryError(Code.BOUNDARY_CASE_INVALID, f"{name}: {why} - at `{path}`")


def path_problem(path: str, inside: str = "the workspace") -> str | None:
    """Why ``path`` is no canonical relative POSIX path inside ``inside``, or None.

    The rule of action paths (``efold.boundary.actions.normalize_path``): a path that is
    empty, absolute, holds a NUL or a backslash, or leaves the tree is refused, never
    normalized into it. Beyond it, a path must already be in the normal form
    (``./a``, ``a//b``, ``a/`` are refused with the form to write instead), so that
    every path has one spelling, and must name something inside, not the tree itself."""
    try:
        normal = normalize_path(path, field="")
    except BoundaryError as exc:
        return exc.detail.removeprefix(": ").replace("the workspace", inside)
    if normal == ".":
        return f"{path!r} names {inside} itself, not a path inside it"
    if normal != path:
        return f"{path!r} is not in normal form; write {normal!r}"
    return None


def _duplicate_key(node: yaml.Node, path: str) -> str | None:
    """The path of the first mapping key that ``node`` repeats, or None."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else str(key.value)
            if name in seen:
                return f"{path}.{name}"
            seen.add(name)
            found = _duplicate_key(value, f"{path}.{name}")
            if found is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found = _duplicate_key(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def decode_sidecar(data: bytes, name: str = SIDECAR_NAME) -> Sidecar:
    """The sidecar in ``data`` (``name`` prefixes every refusal), decoded against the
    closed schema and checked (``check_sidecar``)."""
    try:
        sidecar = msgspec.yaml.decode(data, type=Sidecar)
    except msgspec.ValidationError as exc:
        message = _one_line(str(exc))
        if " - at `" not in message:
            message += " - at `$`"
        raise BoundaryError(Code.BOUNDARY_CASE_INVALID, f"{name}: {message}") from exc
    except (msgspec.DecodeError, RecursionError) as exc:
        raise BoundaryError(Code.BOUNDARY_CASE_INVALID,
                            f"{name}: not YAML: {_one_line(str(exc))}") from exc
    import yaml  # here: ~15 ms of a process's start, and only a sidecar's check needs it

    try:
        node = yaml.compose(data, Loader=yaml.SafeLoader)
        duplicate = None if node is None else _duplicate_key(node, "$")
    except (yaml.YAMLError, RecursionError) as exc:  # pragma: no cover - decoded above
        raise BoundaryError(Code.BOUNDARY_CASE_INVALID,
                            f"{name}: not YAML: {_one_line(str(exc))}") from exc
    if duplicate is not None:
        raise _invalid(name, "a key given twice", duplicate)
    check_sidecar(sidecar, name)
    return sidecar


def load_sidecar(path: Path) -> Sidecar:
    """Read and decode ``path`` (an ``ef-boundary.yml``)."""
    try:
        data = read_input(path, what="sidecar", limit=SIDECAR_LIMIT)
    except InputFileError as exc:
        if exc.code is not Code.INPUT_FILE_UNREADABLE:
            raise  # a FIFO, a device, too large: its own code, nothing read
        raise BoundaryError(Code.BOUNDARY_CASE_INVALID, exc.detail) from exc
    return decode_sidecar(data, str(path))


def _check_range(name: str, value: int, low: int, high: int | None, path: str) -> None:
    if value < low or (high is not None and value > high):
        bound = f"{low}-{high}" if high is not None else f">= {low}"
        raise _invalid(name, f"{value} is outside {bound}", path)


def check_sidecar(sidecar: Sidecar, name: str = SIDECAR_NAME) -> None:
    """The semantic rules of the module docstring; the first broken one refuses."""
    if not CASE_ID.fullmatch(sidecar.id):
        raise _invalid(name, f"id {sidecar.id!r} is not a letter B, X or R, two digits and "
                       "optional -lowercase-words (B01-explicit-api-constraint)", "$.id")
    implied = TIER_OF_LETTER[sidecar.id[0]]
    if sidecar.tier != implied:
        raise _invalid(name, f"tier {sidecar.tier!r} does not match id {sidecar.id!r} "
                       f"(an {sidecar.id[0]} case is {implied!r})", "$.tier")
    _check_range(name, sidecar.version, 1, None, "$.version")
    _check_source(name, sidecar.source)
    _check_range(name, sidecar.fold.repeat, 1, MAX_REPEAT, "$.fold.repeat")
    if not sidecar.continuation.input:
        raise _invalid(name, "no stimulus: give one or more owner messages",
                       "$.continuation.input")
    for index, text in enumerate(sidecar.continuation.input):
        if not text.strip():
            raise _invalid(name, "an empty message", f"$.continuation.input[{index}]")
    _check_range(name, sidecar.continuation.max_actions, 1, MAX_ACTIONS,
                 "$.continuation.maxActions")
    commands = _check_test_tool(name, sidecar.tools.test)
    if not sidecar.oracle.success:
        raise _invalid(name, "no oracle: a case needs at least one", "$.oracle.success")
    for index, oracle in enumerate(sidecar.oracle.success):
        _check_oracle(name, oracle, commands, f"$.oracle.success[{index}]")
    if sidecar.recall.required and not (sidecar.recall.answer or "").strip():
        raise _invalid(name, "recall.required needs the exact answer string", "$.recall.answer")
    if not sidecar.classification.expected_capability:
        raise _invalid(name, "name at least one capability",
                       "$.classification.expectedCapability")
    for index, signature in enumerate(sidecar.classification.failure_signatures):
        if not _KEBAB.fullmatch(signature):
            raise _invalid(name, f"{signature!r} is not kebab-case (a-z, 0-9, single '-')",
                           f"$.classification.failureSignatures[{index}]")
    if sidecar.faux is not None:
        _check_faux(name, sidecar.faux)


def _check_source(name: str, source: Source) -> None:
    problem = path_problem(source.session, "the case directory")
    if problem is not None:
        raise _invalid(name, problem, "$.source.session")
    if source.format not in SOURCE_FORMATS:
        raise _invalid(name, f"unknown format {source.format!r} (one of "
                       f"{', '.join(SOURCE_FORMATS)})", "$.source.format")
    if not source.boundary:
        raise _invalid(name, f"give {BOUNDARY_END!r} or the id of the first event after "
                       "the boundary", "$.source.boundary")
    seen: set[str] = set()
    for index, event_id in enumerate(source.critical):
        if not event_id or event_id in seen:
            raise _invalid(name, f"critical event {event_id!r} is empty or named twice",
                           f"$.source.critical[{index}]")
        seen.add(event_id)


def _check_faux(name: str, faux: FauxScript) -> None:
    if not faux.plans:
        raise _invalid(name, "a faux script with no plan", "$.faux.plans")
    for index, plan in enumerate(faux.plans):
        if plan.when is None and index != len(faux.plans) - 1:
            raise _invalid(name, "the fallback plan (no `when`) must be the last one",
                           f"$.faux.plans[{index}]")
        if plan.when is not None and not plan.when.strip():
            raise _invalid(name, "an empty `when`", f"$.faux.plans[{index}].when")
        for action_index, action in enumerate(plan.actions):
            if not action.tool:
                raise _invalid(name, "an empty tool name",
                               f"$.faux.plans[{index}].actions[{action_index}].tool")
    if faux.recall is not None and not faux.recall.strip():
        raise _invalid(name, "an empty recall query", "$.faux.recall")


def _check_test_tool(name: str, test: TestTool | None) -> list[list[str]]:
    """The allowed test commands (none without a test tool)."""
    if test is None:
        return []
    if not test.commands:
        raise _invalid(name, "a test tool with no command", "$.tools.test.commands")
    for index, command in enumerate(test.commands):
        if not command:
            raise _invalid(name, "an empty command", f"$.tools.test.commands[{index}]")
        for arg_index, arg in enumerate(command):
            if not arg:
                raise _invalid(name, "an empty argument",
                               f"$.tools.test.commands[{index}][{arg_index}]")
    _check_range(name, test.timeout_seconds, 1, MAX_TEST_TIMEOUT_SECONDS,
                 "$.tools.test.timeoutSeconds")
    return test.commands


def _check_oracle(name: str, oracle: Oracle, commands: list[list[str]], at: str) -> None:
    for field in oracle.__struct_fields__:
        value = getattr(oracle, field)
        if isinstance(value, str) and not value and field != "value":
            raise _invalid(name, "an empty string", f"{at}.{_camel(field)}")
    if isinstance(oracle, TestsPass) and oracle.command not in commands:
        allowed = "; ".join(" ".join(c) for c in commands) or "none: no tools.test"
        raise _invalid(name, f"command {' '.join(oracle.command)!r} is not one of "
                       f"tools.test.commands ({allowed})", f"{at}.command")
    if isinstance(oracle, (FileEquals, FileUnchanged, FileChanged, ForbiddenPathUnchanged,
                           ArtifactExists)):
        _check_path(name, oracle.path, "the workspace", f"{at}.path")
    if isinstance(oracle, FileEquals):
        _check_path(name, oracle.expected, "workspace.expected/", f"{at}.expected")
    if isinstance(oracle, NoCrossSessionRecall):
        if not oracle.sessions:
            raise _invalid(name, "list the sessions recall may return", f"{at}.sessions")
        for index, session in enumerate(oracle.sessions):
            _check_range(name, session, 1, None, f"{at}.sessions[{index}]")
    if isinstance(oracle, (ToolActionAbsent, ToolActionPresent)):
        if oracle.family is None and oracle.tool is None and oracle.target is None:
            raise _invalid(name, "name a family, a tool or a target to match", at)
        if oracle.target is not None and oracle.family in ("read", "edit"):
            _check_path(name, oracle.target, "the workspace", f"{at}.target")


def _check_path(name: str, path: str, inside: str, at: str) -> None:
    problem = path_problem(path, inside)
    if problem is not None:
        raise _invalid(name, problem, at)


def _camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(part.title() for part in rest)
