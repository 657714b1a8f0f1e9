"""The README's picture: the first screen of ``report.html`` from a real run.

    python scripts/screenshot_report.py [--output docs/images/report-first-screen.png]

Runs the README's main job (``efold-controller pilot --faux``, the bundled default
campaign, offline) in a temporary directory, then has headless Chromium (Debian's
``chromium``) render the run's ``report.html`` at 1,400 x 1,000 px and save it as a PNG.
Nothing is drawn by hand: the picture is what a user's first run shows. Chromium runs
with networking off (every host resolves to nothing); the page needs none.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = ROOT / "docs" / "images" / "report-first-screen.png"
WIDTH, HEIGHT = 1400, 1000
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def chromium() -> str | None:
    return next((path for name in ("chromium", "chromium-browser", "google-chrome")
                 if (path := shutil.which(name))), None)


def run_pilot(workdir: Path) -> Path:
    """The main job in ``workdir``; returns its run directory."""
    run = workdir / "run"
    subprocess.run([sys.executable, "-m", "efold.controller", "pilot", "--faux", "--quiet",
                    "--run-dir", str(run)], cwd=workdir, check=True, timeout=600,
                   stdout=subprocess.DEVNULL)
    return run


def screenshot(page: Path, output: Path, browser: str, profile: Path) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--no-first-run", f"--user-data-dir={profile}",
         "--host-resolver-rules=MAP * ~NOTFOUND", f"--window-size={WIDTH},{HEIGHT}",
         f"--screenshot={output}", page.as_uri()],
        check=True, timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not output.read_bytes().startswith(PNG_MAGIC):
        raise SystemExit(f"{output}: Chromium wrote no PNG")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    browser = chromium()
    if browser is None:
        print("needs headless Chromium (apt-get install -y chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="efold-screenshot-") as tmp:
        work = Path(tmp)
        work.chmod(0o700)
        run = run_pilot(work)
        screenshot(run / "report.html", args.output.resolve(), browser, work / "profile")
    print(args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
