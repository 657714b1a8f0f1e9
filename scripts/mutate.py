"""Mutation testing for a few rules: would the tests notice if the rule were wrong?

    python scripts/mutate.py --target controller/processes/proof.py:prove \\
        --tests tests/containment/test_proof.py [--tests ...] [--timeout 300]

Run it with the development environment's interpreter (the one with efold's
dependencies and pytest). It never touches this checkout: it copies the tree to a
temporary directory, makes a throwaway virtual environment there whose ``efold`` is the
copy (a ``.pth`` file: ``<tmp>/pkgroot`` holds ``efold``, a symlink to the copy, then
this interpreter's site-packages for the dependencies; so children started with
``python -I`` import the copy too), checks that ``import efold`` resolves into the
copy, and runs the tests there, first unmutated (they must pass), then once per
mutant. Each mutant is one source change to one target file of the copy:

* a comparison operator flipped (``==``/``!=``, ``<``/``<=``, ``>``/``>=``,
  ``is``/``is not``, ``in``/``not in``);
* one operand of an ``and``/``or`` dropped, and ``and``/``or`` swapped;
* a ``not`` dropped;
* the condition of an ``if``, ``while``, conditional expression or ``assert``
  replaced by ``True`` and by ``False`` (``False`` on an ``if`` deletes its clause);
* an integer constant changed by one (up and down); ``True``/``False`` swapped.

A mutant is **killed** when the tests fail (or time out) on it, **survived** when they
pass. The file is written back byte-exact (and its mtime restored, its cached bytecode
removed) after every mutant, in a ``finally``, so an interrupted run (Ctrl-C) leaves
the copy as it was; the copy is removed at the end unless ``--keep``. Docstrings,
f-strings, annotations, decorators and class keywords are never mutated. Exit 0 when every mutant was run, 2 when the setup or the
unmutated tests failed, 130 on Ctrl-C.

``--target FILE[:FUNC[,FUNC...]]`` (repeatable) limits the mutations to those functions
(``name`` or ``Class.name``); without functions the whole file (module-level constants
included). ``--list`` prints the mutants without running anything.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COPY_IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "venv", ".ci-venv", "build", "dist", "*.egg-info", "__pycache__",
    "*.pyc", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", "efold-runs",
    "runs")

FLIPPED: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.LtE, ast.LtE: ast.Lt,
    ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
    ast.In: ast.NotIn, ast.NotIn: ast.In,
}


@dataclass(frozen=True)
class Mutant:
    """One source change: bytes [start, end) of ``path`` become ``new``."""

    path: str  # relative to the tree
    line: int
    column: int
    where: str  # the enclosing function, or "<module>"
    operator: str
    old: str
    new: str
    start: int
    end: int

    def describe(self) -> str:
        old = " ".join(self.old.split())
        new = " ".join(self.new.split())
        return (f"{self.path}:{self.line}:{self.column} {self.where} [{self.operator}] "
                f"{old} -> {new}")


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    killed: bool
    how: str  # "failed", "timeout" or "passed"
    seconds: float


# -- finding mutants -------------------------------------------------------------------------

def _offsets(source: bytes) -> list[int]:
    """The byte offset of each line's start (1-based lines: index 0 unused)."""
    starts = [0, 0]
    for index, byte in enumerate(source):
        if byte == 0x0A:
            starts.append(index + 1)
    return starts


def _span(node: ast.AST, starts: list[int]) -> tuple[int, int]:
    # ast columns are UTF-8 byte offsets into their line.
    start = starts[node.lineno] + node.col_offset  # type: ignore[attr-defined]
    end = starts[node.end_lineno] + node.end_col_offset  # type: ignore[attr-defined]
    return start, end


def _skipped_nodes(tree: ast.Module) -> set[int]:
    """ids of nodes never mutated: docstrings, f-string parts, annotations, decorators
    and class keywords."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            skipped.add(id(body[0].value))
        inner: list[ast.AST] = []
        if isinstance(node, ast.JoinedStr):
            inner.append(node)
        if isinstance(node, ast.AnnAssign):
            inner.append(node.annotation)
        if isinstance(node, ast.arg) and node.annotation is not None:
            inner.append(node.annotation)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            inner.append(node.returns)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            # Decorators and class keywords configure (dataclass, msgspec options); the
            # rules under test are in the bodies.
            inner.extend(node.decorator_list)
            if isinstance(node, ast.ClassDef):
                inner.extend(k.value for k in node.keywords)
        for part in inner:
            skipped.update(id(n) for n in ast.walk(part))
    return skipped


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + child.name, child
                yield from walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")
    yield from walk(tree, "")


def _unparse(node: ast.expr) -> str:
    return f"({ast.unparse(node)})"


def _variants(node: ast.AST) -> Iterator[tuple[str, ast.AST, str]]:
    """(operator, the node replaced, its replacement source) for one node."""
    if isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            flipped = FLIPPED.get(type(op))
            if flipped is not None:
                ops = list(node.ops)
                ops[index] = flipped()
                yield "flip-compare", node, _unparse(
                    ast.Compare(left=node.left, ops=ops, comparators=node.comparators))
    elif isinstance(node, ast.BoolOp):
        if len(node.values) >= 2:
            for index in range(len(node.values)):
                rest = node.values[:index] + node.values[index + 1:]
                kept = rest[0] if len(rest) == 1 else ast.BoolOp(op=node.op, values=rest)
                yield "drop-operand", node, _unparse(kept)
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield "swap-and-or", node, _unparse(ast.BoolOp(op=other, values=node.values))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "drop-not", node, _unparse(node.operand)
    elif isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            yield "swap-bool", node, str(not value)
        elif isinstance(value, int):
            yield "constant+1", node, f"({value + 1})"
            yield "constant-1", node, f"({value - 1})"
    if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        for value in ("True", "False"):
            yield f"condition-{value}", node.test, value


def find_mutants(tree_root: Path, target: str, functions: Sequence[str]) -> list[Mutant]:
    source = (tree_root / target).read_bytes()
    tree = ast.parse(source)
    starts = _offsets(source)
    skipped = _skipped_nodes(tree)
    named = dict(_functions(tree))
    unknown = [f for f in functions if f not in named]
    if unknown:
        raise SystemExit(f"{target}: no function {', '.join(unknown)} "
                         f"(has: {', '.join(sorted(named))})")
    scopes: list[tuple[str, ast.AST]] = (
        [(f, named[f]) for f in functions] if functions else [("<module>", tree)])
    seen: set[tuple[int, int, str]] = set()
    mutants: list[Mutant] = []
    for scope_name, scope in scopes:
        for node in ast.walk(scope):
            if id(node) in skipped:
                continue
            for operator, replaced, new in _variants(node):
                if id(replaced) in skipped:
                    continue
                start, end = _span(replaced, starts)
                key = (start, end, new)
                if key in seen:
                    continue
                seen.add(key)
                mutated = source[:start] + new.encode() + source[end:]
                try:
                    compile(mutated, target, "exec")
                except SyntaxError:
                    continue
                where = scope_name if functions else _enclosing(named, replaced)
                mutants.append(Mutant(
                    path=target, line=replaced.lineno,  # type: ignore[attr-defined]
                    column=replaced.col_offset + 1,  # type: ignore[attr-defined]
                    where=where, operator=operator,
                    old=source[start:end].decode(errors="replace"), new=new,
                    start=start, end=end))
    return sorted(mutants, key=lambda m: (m.start, m.end, m.operator, m.new))


def _enclosing(named: dict[str, ast.AST], node: ast.AST) -> str:
    line = node.lineno  # type: ignore[attr-defined]
    best = "<module>"
    for name, fn in named.items():
        if fn.lineno <= line <= fn.end_lineno:  # type: ignore[attr-defined]
            best = name  # the innermost comes last (nested names are longer)
    return best


# -- the sandbox ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Sandbox:
    root: Path  # the temporary directory
    tree: Path  # the copy of the repository
    python: Path  # the throwaway venv's interpreter

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PATH"] = os.pathsep.join([str(self.python.parent), env.get("PATH", "")])
        return env


def make_sandbox(keep_root: Path | None = None) -> Sandbox:
    root = Path(tempfile.mkdtemp(prefix="efold-mutate-")) if keep_root is None else keep_root
    tree = root / "efold"
    shutil.copytree(REPO, tree, symlinks=True, ignore=COPY_IGNORED)
    pkgroot = root / "pkgroot"
    pkgroot.mkdir()
    (pkgroot / "efold").symlink_to(tree)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")],
                   check=True, timeout=300)
    python = root / "venv" / "bin" / "python"
    sites = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (venv_site,) = (root / "venv" / "lib").glob("python*/site-packages")
    (venv_site / "efold-mutate.pth").write_text(
        "\n".join([str(pkgroot), *sites]) + "\n", encoding="utf-8")
    # Tests that run the console script find the copy's, first on PATH.
    script = python.parent / "efold-controller"
    script.write_text(f"#!{python}\nfrom efold.controller.cli import main\nmain()\n")
    script.chmod(0o755)
    sandbox = Sandbox(root=root, tree=tree, python=python)
    where = subprocess.run(
        [str(python), "-I", "-c", "import efold; print(efold.__file__)"], cwd=tree,
        env=sandbox.environment(), capture_output=True, text=True, timeout=120)
    resolved = Path(where.stdout.strip()).resolve() if where.returncode == 0 else None
    if resolved is None or not resolved.is_relative_to(tree.resolve()):
        raise SystemExit(f"import efold does not resolve into the copy ({where.stdout.strip()}"
                         f"{where.stderr.strip()}); refusing to mutate")
    return sandbox


def run_tests(sandbox: Sandbox, tests: Sequence[str], timeout: float,
              quiet: bool = True) -> tuple[str, float]:
    """("passed" | "failed" | "timeout", seconds) of one pytest run in the copy."""
    started = time.monotonic()
    # One process (`-n 0`): a mutant's few tests gain nothing from xdist's workers.
    command = [str(sandbox.python), "-m", "pytest", "-q", "-x", "-n", "0",
               "-p", "no:cacheprovider", *tests]
    process = subprocess.Popen(command, cwd=sandbox.tree, env=sandbox.environment(),
                               stdout=subprocess.DEVNULL if quiet else None,
                               stderr=subprocess.DEVNULL if quiet else None,
                               start_new_session=True)
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return "timeout", time.monotonic() - started
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    finally:
        _kill_leftovers(process.pid)
    if code == 5:
        raise SystemExit(f"pytest collected no tests from {' '.join(tests)}")
    return ("passed" if code == 0 else "failed"), time.monotonic() - started


def _kill_leftovers(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _drop_bytecode(file: Path) -> None:
    cache = file.parent / "__pycache__"
    for pyc in cache.glob(f"{file.stem}.*.pyc") if cache.is_dir() else ():
        pyc.unlink(missing_ok=True)


def run_mutant(sandbox: Sandbox, mutant: Mutant, tests: Sequence[str],
               timeout: float) -> Outcome:
    """Apply ``mutant`` to the copy, run the tests, and always write the original back."""
    file = sandbox.tree / mutant.path
    original = file.read_bytes()
    stat = file.stat()
    try:
        file.write_bytes(original[:mutant.start] + mutant.new.encode() + original[mutant.end:])
        # A later mtime than any cached bytecode of the original: never a stale .pyc.
        os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))
        _drop_bytecode(file)
        how, seconds = run_tests(sandbox, tests, timeout)
    finally:
        file.write_bytes(original)
        os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        _drop_bytecode(file)
        if file.read_bytes() != original:  # pragma: no cover - the write above failed
            raise SystemExit(f"{file}: the original could not be restored")
    return Outcome(mutant=mutant, killed=how != "passed", how=how, seconds=seconds)


# -- the command ------------------------------------------------------------------------

def _parse_target(text: str) -> tuple[str, list[str]]:
    path, _, functions = text.partition(":")
    return path, [f for f in functions.split(",") if f]


def _summary(outcomes: Sequence[Outcome]) -> list[str]:
    lines: list[str] = []
    for path in dict.fromkeys(o.mutant.path for o in outcomes):
        mine = [o for o in outcomes if o.mutant.path == path]
        killed = sum(o.killed for o in mine)
        lines.append(f"{path}: {killed} of {len(mine)} killed ({killed / len(mine):.0%})")
    if outcomes:
        killed = sum(o.killed for o in outcomes)
        lines.append(f"total: {killed} of {len(outcomes)} killed "
                     f"({killed / len(outcomes):.0%})")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", action="append", required=True,
                        help="FILE[:FUNC,...] relative to the repository (repeatable)")
    parser.add_argument("--tests", action="append", default=[],
                        help="a pytest path or node id to run per mutant (repeatable)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds per test run; a mutant that times out is killed")
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy")
    parser.add_argument("--json", type=Path, default=None,
                        help="also write every outcome to this file")
    args = parser.parse_args(argv)
    targets = [_parse_target(t) for t in args.target]
    mutants = [m for path, functions in targets for m in find_mutants(REPO, path, functions)]
    if args.list:
        for mutant in mutants:
            print(mutant.describe())
        print(f"{len(mutants)} mutants")
        return 0
    if not args.tests:
        parser.error("--tests is required unless --list")
    sandbox = make_sandbox()
    outcomes: list[Outcome] = []
    status = 0
    try:
        print(f"copy: {sandbox.tree}", flush=True)
        how, seconds = run_tests(sandbox, args.tests, args.timeout, quiet=False)
        if how != "passed":
            print(f"the unmutated tests {how} ({seconds:.1f} s): nothing to measure",
                  file=sys.stderr)
            return 2
        print(f"unmutated: passed in {seconds:.1f} s; {len(mutants)} mutants", flush=True)
        for index, mutant in enumerate(mutants, 1):
            outcome = run_mutant(sandbox, mutant, args.tests, args.timeout)
            outcomes.append(outcome)
            verdict = "killed  " if outcome.killed else "SURVIVED"
            print(f"[{index}/{len(mutants)}] {verdict} ({outcome.how}, {outcome.seconds:.1f} s) "
                  f"{mutant.describe()}", flush=True)
    except KeyboardInterrupt:
        print("interrupted: the copy was restored; partial figures below", file=sys.stderr)
        status = 130
    finally:
        if not args.keep:
            shutil.rmtree(sandbox.root, ignore_errors=True)
    for line in _summary(outcomes):
        print(line)
    if args.json is not None:
        args.json.write_text(json.dumps(
            [asdict(o.mutant) | {"killed": o.killed, "how": o.how, "seconds": o.seconds}
             for o in outcomes], indent=1) + "\n", encoding="utf-8")
    return status


if __name__ == "__main__":
    sys.exit(main())
