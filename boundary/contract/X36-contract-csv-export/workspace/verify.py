"""Check the implementation against contract.json; exit 0 only if every vector matches.

contract.json names the module and the function, and lists the vectors: each one's
arguments and the sha256 of the canonical JSON (sorted keys, no spaces, ASCII) of its
expected result. A call that raises has the result {"raises": "<exception type>"}. This
script holds no expected value of its own: everything it checks is in contract.json.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def outcome(function: Any, args: list[Any]) -> Any:
    try:
        result = function(*args)
    except Exception as exc:  # a vector may expect the call to raise
        return {"raises": type(exc).__name__}
    return json.loads(json.dumps(result))  # tuples become lists, as JSON holds them


def main() -> int:
    contract = json.loads((HERE / "contract.json").read_text(encoding="utf-8"))
    sys.path.insert(0, str(HERE))
    function = getattr(importlib.import_module(contract["module"]), contract["function"])
    vectors = contract["vectors"]
    matched = 0
    for vector in vectors:
        try:
            got = canonical(outcome(function, vector["args"]))
        except (TypeError, ValueError) as exc:
            got = f"<not JSON: {exc}>"
        ok = hashlib.sha256(got.encode("utf-8")).hexdigest() == vector["expect_sha256"]
        matched += ok
        call = f"{contract['function']}({canonical(vector['args'])[1:-1]})"
        print(f"{vector['id']} {'ok' if ok else 'MISMATCH'}  {call[:100]} -> {got[:100]}")
    print(f"{matched} of {len(vectors)} vectors match")
    return 0 if vectors and matched == len(vectors) else 1


if __name__ == "__main__":
    sys.exit(main())
