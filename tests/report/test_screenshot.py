"""The README's picture is made, not drawn: ``scripts/screenshot_report.py`` runs the main
job and has headless Chromium render the report's first screen; the README shows the
file it writes."""

from __future__ import annotations

import importlib.util
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "screenshot_report.py"
PICTURE = "docs/images/report-first-screen.png"


def test_the_readme_shows_the_picture_the_script_makes() -> None:
    spec = importlib.util.spec_from_file_location("screenshot_report", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.DEFAULT_OUTPUT == ROOT / PICTURE
    assert f"]({PICTURE})" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert (ROOT / PICTURE).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="headless Chromium not installed (apt-get install -y chromium)")
def test_the_script_renders_a_real_runs_first_screen(tmp_path: Path) -> None:
    out = tmp_path / "shot.png"
    done = subprocess.run([sys.executable, str(SCRIPT), "--output", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert (width, height) == (1400, 1000)
    assert len(data) > 50_000  # a page with two charts and a table, not a blank one
