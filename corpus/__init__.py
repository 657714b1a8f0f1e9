"""corpus: traces and probes (schemas, the bundled original suite, the generator of the
medium and hard suites,
validation, scorers, the reader projection and digests).

Surface forms every trace uses are documented in ``corpus/FORMS.md``; that file is the
contract for readers and folds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from efold.lazy import lazy_exports

if TYPE_CHECKING:
    from efold.corpus.codec import dump_probes as dump_probes
    from efold.corpus.codec import dump_trace as dump_trace
    from efold.corpus.codec import load_probes as load_probes
    from efold.corpus.codec import load_trace as load_trace
    from efold.corpus.digest import corpus_digest as corpus_digest
    from efold.corpus.digest import item_digest as item_digest
    from efold.corpus.digest import probes_digest as probes_digest
    from efold.corpus.digest import trace_digest as trace_digest
    from efold.corpus.errors import CorpusError as CorpusError
    from efold.corpus.forms import estimate_tokens as estimate_tokens
    from efold.corpus.generator import generate as generate
    from efold.corpus.generator import generate_hard as generate_hard
    from efold.corpus.model import Availability as Availability
    from efold.corpus.model import Category as Category
    from efold.corpus.model import Event as Event
    from efold.corpus.model import Outcome as Outcome
    from efold.corpus.model import Probe as Probe
    from efold.corpus.model import ProbeFile as ProbeFile
    from efold.corpus.model import SuiteItem as SuiteItem
    from efold.corpus.model import Trace as Trace
    from efold.corpus.model import TraceHeader as TraceHeader
    from efold.corpus.projection import reader_projection as reader_projection
    from efold.corpus.scoring import Score as Score
    from efold.corpus.scoring import score as score
    from efold.corpus.shapes import HARD_DEFAULT_SEEDS as HARD_DEFAULT_SEEDS
    from efold.corpus.shapes import SUITES as SUITES
    from efold.corpus.suites import load_suite as load_suite
    from efold.corpus.suites import original_suite as original_suite
    from efold.corpus.user_suite import load_suite_dir as load_suite_dir
    from efold.corpus.user_validation import validate_user_item as validate_user_item
    from efold.corpus.validation import validate as validate

__getattr__, __dir__ = lazy_exports(__name__, __file__)
