"""Install a real entry-point fold plugin for a test, where a child started with
``python -I -m efold.worker`` imports it too: the venv's own site-packages (``-I``
ignores PYTHONPATH, so ``sys.path`` tricks would reach only this process).

    with installed_plugin("tail-only", SOURCE) as module:  # Path of the installed module
        ...                                                # edit module to simulate drift

What is written: ``<purelib>/<module>.py`` and ``<purelib>/<dist>-<version>.dist-info/``
(``METADATA``, ``entry_points.txt`` with ``[efold.folds] <name> = <module>:<attr>``,
``RECORD`` with sha256 hashes and sizes, as pip writes it). Everything is removed on
exit (with the module's bytecode cache and its ``sys.modules`` entry), and the import
and metadata caches are invalidated on entry and exit so this process sees each change.

Names are random by default (``efold-test-plugin-<hex>``) because the venv is shared:
another process that lists plugins meanwhile sees one more, never a clash.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import re
import secrets
import shutil
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def purelib() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _normalized(dist: str) -> str:
    """The distribution name as a dist-info directory spells it (PEP 503 + ``_``)."""
    return re.sub(r"[-_.]+", "_", dist).lower()


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def refresh() -> None:
    """Make this process re-read installed distributions and importable modules."""
    importlib.invalidate_caches()  # also clears importlib.metadata's path cache


def _write_record(info: Path, root: Path, files: list[Path]) -> None:
    """``info/RECORD`` as pip writes it: path relative to ``root``, sha256, size; RECORD
    itself last, unhashed."""
    rows: list[str] = []
    for path in files:
        data = path.read_bytes()
        rows.append(f"{path.relative_to(root).as_posix()},{_record_hash(data)},{len(data)}")
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")


@contextmanager
def installed_plugin(
    name: str,
    module_source: str,
    *,
    version: str = "1.0",
    dist: str | None = None,
    attr: str = "Fold",
) -> Iterator[Path]:
    """Install ``module_source`` as a one-module distribution whose entry point ``name``
    (group ``efold.folds``) loads ``<module>:<attr>``; yields the module's path. The
    module is named after the distribution (``-`` -> ``_``)."""
    dist = dist or f"efold-test-plugin-{secrets.token_hex(4)}"
    module = _normalized(dist)
    root = purelib()
    module_path = root / f"{module}.py"
    info = root / f"{module}-{version}.dist-info"
    if module_path.exists() or info.exists():
        raise FileExistsError(f"{module_path} or {info} already exists")
    try:
        module_path.write_text(module_source)
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
            "Summary: a fold plugin installed by efold's tests\n")
        (info / "entry_points.txt").write_text(f"[efold.folds]\n{name} = {module}:{attr}\n")
        (info / "INSTALLER").write_text("efold-tests\n")
        _write_record(info, root, [module_path, *(info / n for n in
                                                  ("METADATA", "entry_points.txt", "INSTALLER"))])
        refresh()
        yield module_path
    finally:
        module_path.unlink(missing_ok=True)
        shutil.rmtree(info, ignore_errors=True)
        for cached in (root / "__pycache__").glob(f"{module}.*.pyc"):
            cached.unlink(missing_ok=True)
        sys.modules.pop(module, None)
        refresh()
