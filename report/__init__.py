"""report: statistics and renderers for a run's content-free results.

Reads nothing but the plan and the receipts (``efold.protocol.records``), plus the
journal facts its caller read (``RunFacts``: stops, launches, containment episodes, the
run lease; it never opens the journal itself); builds the ``results-v1`` schema and
renders it as ``results.json``, ``summary.md`` and a self-contained ``report.html``, each
opening with the run's status. The aggregate command calls::

    results = build_results(plan, receipts, faux=True, run_facts=facts)
    files = render_reports(results)  # {"results.json": b..., "summary.md": b..., ...}
"""

from efold.report.errors import ReportError as ReportError
from efold.report.render_html import render_html as render_html
from efold.report.render_json import decode_results as decode_results
from efold.report.render_json import render_json as render_json
from efold.report.render_markdown import render_markdown as render_markdown
from efold.report.reports import REPORT_FILES as REPORT_FILES
from efold.report.reports import render_reports as render_reports
from efold.report.results import FAUX_NOTE as FAUX_NOTE
from efold.report.results import build_results as build_results
from efold.report.results import money as money
from efold.report.schema import RESULTS_SCHEMA as RESULTS_SCHEMA
from efold.report.schema import Results as Results
from efold.report.schema import RunStatus as RunStatus
from efold.report.stats import Z95 as Z95
from efold.report.stats import flip_count as flip_count
from efold.report.stats import nearest_rank as nearest_rank
from efold.report.stats import newcombe_paired_interval as newcombe_paired_interval
from efold.report.stats import paired_counts as paired_counts
from efold.report.stats import proportion as proportion
from efold.report.stats import repeat_spread as repeat_spread
from efold.report.stats import wilson_interval as wilson_interval
from efold.report.status import EpisodeFact as EpisodeFact
from efold.report.status import LaunchFact as LaunchFact
from efold.report.status import MoneyFact as MoneyFact
from efold.report.status import RunFacts as RunFacts
from efold.report.status import StopFact as StopFact
from efold.report.status import status_banner as status_banner
