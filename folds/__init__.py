"""folds: fold arms, the plugin loader, the history store and its metered lookup tool,
checkpoint snapshots, and availability analysis (docs/architecture.md §7).

The prep child builds a checkpoint (``get_fold(name).build(TracePrefix.of(trace))``) and
writes it (``write_checkpoint``); the probe child restores it (``read_checkpoint``),
builds the first request (``checkpoint_to_request``) and serves lookups
(``RestoredCheckpoint.lookup_tool()``, a fresh meter per probe); the evaluator judges
what a fold kept without a model (``checkpoint_availability``).

Public names are re-exported lazily (PEP 562): a probe child that needs only the
snapshot and the lookup tool does not pay for the plugin loader (importlib.metadata),
the external-command runner (subprocess) or the evaluator's availability analysis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from efold.lazy import lazy_exports

if TYPE_CHECKING:
    from efold.folds.availability import AvailabilityResult as AvailabilityResult
    from efold.folds.availability import checkpoint_availability as checkpoint_availability
    from efold.folds.availability import probe_availability as probe_availability
    from efold.folds.checkpoint import HISTORY_GET as HISTORY_GET
    from efold.folds.checkpoint import HISTORY_SEARCH as HISTORY_SEARCH
    from efold.folds.checkpoint import LOOKUP_TOOLS as LOOKUP_TOOLS
    from efold.folds.checkpoint import Checkpoint as Checkpoint
    from efold.folds.checkpoint import FoldReceipt as FoldReceipt
    from efold.folds.checkpoint import HistoryRecord as HistoryRecord
    from efold.folds.checkpoint import ReaderMessage as ReaderMessage
    from efold.folds.checkpoint import RetainedStore as RetainedStore
    from efold.folds.errors import FoldError as FoldError
    from efold.folds.errors import PluginError as PluginError
    from efold.folds.external import ExternalCommandFold as ExternalCommandFold
    from efold.folds.fold import Fold as Fold
    from efold.folds.fold import TracePrefix as TracePrefix
    from efold.folds.lookup import LookupTool as LookupTool
    from efold.folds.lookup import lookup_tool_schemas as lookup_tool_schemas
    from efold.folds.meter import LOOKUP_BYTE_BUDGET as LOOKUP_BYTE_BUDGET
    from efold.folds.meter import LOOKUP_CALL_BUDGET as LOOKUP_CALL_BUDGET
    from efold.folds.meter import Meter as Meter
    from efold.folds.meter import MeterWitness as MeterWitness
    from efold.folds.registry import BUILTIN_ARMS as BUILTIN_ARMS
    from efold.folds.registry import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
    from efold.folds.registry import arm_names as arm_names
    from efold.folds.registry import get_fold as get_fold
    from efold.folds.request import checkpoint_to_request as checkpoint_to_request
    from efold.folds.snapshot import RestoredCheckpoint as RestoredCheckpoint
    from efold.folds.snapshot import SnapshotManifest as SnapshotManifest
    from efold.folds.snapshot import copy_snapshot as copy_snapshot
    from efold.folds.snapshot import read_checkpoint as read_checkpoint
    from efold.folds.snapshot import write_checkpoint as write_checkpoint
    from efold.folds.store import HistoryStore as HistoryStore

__getattr__, __dir__ = lazy_exports(__name__, __file__)
