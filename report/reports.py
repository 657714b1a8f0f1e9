"""The three report files of a run, rendered together from one ``Results``."""

from __future__ import annotations

from efold.report.render_html import render_html
from efold.report.render_json import render_json
from efold.report.render_markdown import render_markdown
from efold.report.schema import Results

__all__ = ["REPORT_FILES", "render_reports"]

REPORT_FILES = ("results.json", "summary.md", "report.html")


def render_reports(results: Results) -> dict[str, bytes]:
    """File name -> exact bytes (UTF-8). Deterministic: the same results always give
    the same bytes, so the files can be hashed and compared. Writing them durably is
    the caller's job (registry publish)."""
    return {
        "results.json": render_json(results),
        "summary.md": render_markdown(results).encode("utf-8"),
        "report.html": render_html(results).encode("utf-8"),
    }
