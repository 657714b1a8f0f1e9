"""The report's first screen, under the status banner: which fold keeps what, at what
cost. Two scatters (accuracy against median checkpoint size, and against cost per
correct answer), one reading per role, then a role x category heatmap with counts.
Everything else in the page follows it.
"""

from __future__ import annotations

from html import escape

from efold.report.numbers import brief, count, money_unit
from efold.report.readings import readings
from efold.report.scatter import ScatterPoint, scatter_chart
from efold.report.schema import Results, Tally
from efold.report.table_kit import format_interval, format_proportion

__all__ = ["first_screen_html", "heatmap_html"]


def _size_points(results: Results) -> list[ScatterPoint]:
    return [ScatterPoint(label=role.role, x=float(role.compression.tokens_median),
                         x_text=f"median checkpoint {count(role.compression.tokens_median)} "
                                "tokens", accuracy=role.overall.exact, colour=n)
            for n, role in enumerate(results.results) if role.compression is not None]


def _cost_points(results: Results) -> list[ScatterPoint]:
    unit = money_unit(results.reader_faux)
    points = []
    for n, role in enumerate(results.results):
        cost = role.cost_per_correct
        if cost is None or cost.per_correct is None:
            continue
        points.append(ScatterPoint(
            label=role.role, x=float(cost.per_correct.usd),
            x_text=f"{brief(cost.per_correct.usd)} {unit} per correct answer",
            accuracy=role.overall.exact, colour=n))
    return points


def _shade(rate: float) -> str:
    """White (0%) to the exact colour (100%), light enough to read dark text on."""
    low, high = (255, 255, 255), (120, 165, 220)
    return "#" + "".join(f"{round(a + (b - a) * rate):02x}" for a, b in zip(low, high,
                                                                             strict=True))


def _cell(tally: Tally | None) -> str:
    exact = None if tally is None else tally.exact
    if exact is None or exact.rate is None:
        return '<td class="heat none">\u2014</td>'
    title = f"{format_proportion(exact)}, 95% CI {format_interval(exact.wilson95)}"
    return (f'<td class="heat" style="background:{_shade(exact.rate)}" '
            f'title="{escape(title)}">{count(exact.successes)}/{count(exact.trials)}</td>')


def heatmap_html(results: Results) -> str:
    """Exact counts per role (rows) and category (columns), shaded by rate."""
    head = "".join(f'<th scope="col" title="{escape(c)}">{escape(c.replace("_", " "))}</th>'
                   for c in results.categories)
    rows = []
    for role in results.results:
        by_category = {t.category: t for t in role.categories}
        cells = "".join(_cell(by_category.get(c)) for c in results.categories)
        rows.append(f'<tr><th scope="row">{escape(role.role)}</th>{cells}'
                    f"{_cell(role.overall)}</tr>")
    return ('<div class="scroll"><table class="heatmap"><thead><tr><th>role</th>'
            f'{head}<th scope="col">all</th></tr></thead><tbody>{"".join(rows)}'
            "</tbody></table></div>")


def first_screen_html(results: Results) -> str:
    sizes, costs = _size_points(results), _cost_points(results)
    figures = []
    if sizes:
        figures.append(scatter_chart(sizes, "median checkpoint size (estimated tokens)",
                                     "exact accuracy against median checkpoint size"))
    if costs:
        unit = money_unit(results.reader_faux)
        figures.append(scatter_chart(costs, f"cost per correct answer ({unit})",
                                     "exact accuracy against cost per correct answer"))
    charts = "".join(f'<div class="panel">{figure}</div>' for figure in figures)
    lines = "".join(f"<li>{escape(line)}</li>" for line in readings(results))
    return (
        '<section class="answer"><h2>Which fold keeps what, at what cost</h2>'
        '<p class="caption">Exact accuracy (whiskers: Wilson 95% interval) of each role '
        "against the median size of its checkpoints and its settled cost per correct "
        "answer; then each role's exact counts per category.</p>"
        f'<div class="panels">{charts}</div><ul class="readings">{lines}</ul>'
        f"{heatmap_html(results)}</section>"
    )
