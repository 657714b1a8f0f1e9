"""Check the implementation against contract.json; exit 0 only if every vector matches.

contract.json names the module and the function, and lists the vectors: each one's
arguments and the sha256 of the canonical JSON (sorted keys, no spaces, ASCII) of its
expected result. A call that raises has the result {"raises": "<exception type>"}. This
script holds no expected value of its own: everything it checks is in contract.json.
The implementation runs in a child process of this script, so nothing it does decides
the exit status: only the outcomes it reports are compared, here.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MARK = "efold-contract-outcomes: "


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def outcome(function: Any, args: list[Any]) -> Any:
    try:
        result = function(*args)
    except Exception as exc:  # a vector may expect the call to raise
        return {"raises": type(exc).__name__}
    return json.loads(json.dumps(result))  # tuples become lists, as JSON holds them


def outcomes(contract: dict[str, Any]) -> list[str]:
    """Every vector's result, as canonical JSON (run in the child: ``--outcomes``)."""
    sys.path.insert(0, str(HERE))
    function = getattr(importlib.import_module(contract["module"]), contract["function"])
    found = []
    for vector in contract["vectors"]:
        try:
            found.append(canonical(outcome(function, vector["args"])))
        except (TypeError, ValueError) as exc:
            found.append(f"<not JSON: {exc}>")
    return found


def main() -> int:
    contract = json.loads((HERE / "contract.json").read_text(encoding="utf-8"))
    if sys.argv[1:] == ["--outcomes"]:
        print(MARK + json.dumps(outcomes(contract)))
        return 0
    # The implementation runs in a child process: whatever it does (exit early, exit 0
    # from inside a call), only the outcomes it printed are judged, here.
    child = subprocess.run([sys.executable, str(HERE / "verify.py"), "--outcomes"],
                           cwd=HERE, capture_output=True, text=True, check=False)
    lines = [line for line in child.stdout.splitlines() if line.startswith(MARK)]
    vectors = contract["vectors"]
    try:
        got = json.loads(lines[-1][len(MARK):]) if lines else None
    except ValueError:
        got = None
    if not isinstance(got, list) or len(got) != len(vectors):
        print(f"the implementation gave no outcomes (exit {child.returncode}): "
              f"{(child.stderr or child.stdout)[-300:]}")
        return 1
    matched = 0
    for vector, result in zip(vectors, got):
        ok = hashlib.sha256(str(result).encode("utf-8")).hexdigest() == vector["expect_sha256"]
        matched += ok
        call = f"{contract['function']}({canonical(vector['args'])[1:-1]})"
        print(f"{vector['id']} {'ok' if ok else 'MISMATCH'}  {call[:100]} -> {str(result)[:100]}")
    print(f"{matched} of {len(vectors)} vectors match")
    return 0 if vectors and matched == len(vectors) else 1


if __name__ == "__main__":
    sys.exit(main())
