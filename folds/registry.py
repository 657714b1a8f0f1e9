"""Arms by name: the built-in reference arms and third-party plugins.

A plugin registers under the entry-point group ``efold.folds``; the entry point's name
is the arm name and it loads to a ``Fold`` instance, or to a class or zero-argument
factory returning one::

    [project.entry-points."efold.folds"]
    my-fold = "my_package.folds:MyFold"

Built-in names always mean the built-in arm: a plugin that claims one is rejected (and
listed as rejected), never silently preferred or silently dropped. Every checkpoint a
plugin builds passes ``fold.checked`` before anyone writes it.

The compacting built-in arms (``SUMMARISING_ARMS``) can be built with a caller's
summariser (``fold_for(..., summariser=...)``); every other arm ignores one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from efold.errors import Code
from efold.folds.arms import (
    CeilingFold,
    ColdRebuildFold,
    CompactionFold,
    CompactionTwiceFold,
    LedgerColdFold,
    NativeFold,
    NativeLookupFold,
    PackFold,
    RestartSwitchCompactFold,
    StoreCompactionFold,
    StoreFold,
)
from efold.folds.checkpoint import Checkpoint
from efold.folds.errors import FoldError, PluginError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint
from efold.folds.fold import Fold, TracePrefix, checked
from efold.folds.spec import FoldSpec
from efold.folds.summary import Summariser

ENTRY_POINT_GROUP = "efold.folds"

BUILTIN_ARMS: dict[str, Callable[[], Fold]] = {
    "native": NativeFold,
    "native-lookup": NativeLookupFold,
    "cold-rebuild": ColdRebuildFold,
    "compaction": CompactionFold,
    "compaction-2": CompactionTwiceFold,
    "ceiling": CeilingFold,
    "store": StoreFold,
    "store-compaction": StoreCompactionFold,
    "pack": PackFold,
    "restart-switch-compact": RestartSwitchCompactFold,
    "ledger-cold": LedgerColdFold,
    "openai-compact": lambda: _offline_provider_compact("openai-compact"),
    "anthropic-compact": lambda: _offline_provider_compact("anthropic-compact"),
}

# Arms the reference benchmark declares, with the evidence each is to give, that are not
# runnable at this revision: naming one refuses at ``register``
# (``arm_not_available_at_revision``, never ``unknown arm``), and no plugin may take the
# name. Enabling one is moving it into ``BUILTIN_ARMS`` once its feature exists.
DECLARED_ARMS: dict[str, str] = {
    "pack-per-turn": "the pack kept up to date after every turn (maintenance, not "
                     "injection); waits for per-turn pack maintenance",
    "pack-stubs": "the cold pack plus stubs of the tool results it cleared; waits for "
                  "tool-result clearing",
}


def _offline_provider_compact(arm: str) -> Fold:
    """A provider-compaction arm offline: the faux provider's deterministic compaction on
    the arm's wire API. Imported here, not above, so that a process that never builds it
    never imports the guard."""
    from efold.folds.provider_compact import ENDPOINTS, ProviderCompactFold
    from efold.guard.wire.faux import faux_block_compaction, faux_compaction

    endpoint = ENDPOINTS[arm]
    compactor = faux_compaction if arm == "openai-compact" else faux_block_compaction
    return ProviderCompactFold(endpoint, compactor, provider="faux")


# Built-in arms whose reader-visible text names the lookup tools when they are offered,
# each built for a probe mode that offers none (``folds.probe_modes``).
NAMES_LOOKUP: dict[str, Callable[[], Fold]] = {"pack": lambda: PackFold(lookup=False)}


# The built-in arms whose boundary is a compaction: the ones a summariser writes for.
SUMMARISING_ARMS: dict[str, Callable[[Summariser | None], Fold]] = {
    "compaction": CompactionFold,
    "compaction-2": CompactionTwiceFold,
    "ceiling": CeilingFold,
    "store-compaction": StoreCompactionFold,
    "restart-switch-compact": RestartSwitchCompactFold,
}

# Built-in arms built across a restart: a first prep child leaves the agent's durable
# session, a fresh one builds the checkpoint from that session alone
# (``controller.pilot.preparation``).
RESTART_ARMS: frozenset[str] = frozenset({"restart-switch-compact"})


def restarts(spec: FoldSpec) -> bool:
    """Whether a role's checkpoint is built across a restart (a built-in restart arm; a
    command or plugin under that name is not built-in)."""
    return spec.command is None and spec.proxy is None and spec.arm in RESTART_ARMS


# Built-in arms whose checkpoint is built after the progressive ledger's extractions,
# each in a prep child of its own (``folds.ledger``, ``controller.pilot.preparation``).
LEDGER_ARMS: frozenset[str] = frozenset({"ledger-cold"})


def extracts_ledger(spec: FoldSpec) -> bool:
    """Whether a role's checkpoint is built from a progressive ledger."""
    return spec.command is None and spec.proxy is None and spec.arm in LEDGER_ARMS


# Built-in arms whose checkpoint holds a provider's opaque items (``folds.opaque``),
# readable only by the provider and wire API that made them: the provider-compaction
# arms (``folds.provider_compact``). Their one compaction request goes to the run's
# summariser route (offline: the faux provider's deterministic compaction).
OPAQUE_ARMS: frozenset[str] = frozenset({"openai-compact", "anthropic-compact"})


def makes_opaque(arm: str) -> bool:
    """Whether the built-in arm ``arm`` builds a checkpoint of opaque provider items."""
    return arm in OPAQUE_ARMS


def uses_summariser(arm: str) -> bool:
    """Whether the arm named ``arm`` is a built-in compaction arm, whose summaries a
    summariser writes. (A role that runs an external command uses none, whatever its
    arm name: ``fold_for`` ignores the summariser when given a command.)"""
    return arm in SUMMARISING_ARMS


def calls_summariser(spec: FoldSpec) -> bool:
    """Whether a role's fold asks the run's summariser: a built-in compaction arm (for
    its summaries), a provider-compaction arm (for its compaction request), the ledger
    arm (for its extractions: ``folds.ledger_model``) or a proxy fold (for the proxy's
    own upstream calls). An external command and an entry-point plugin never do."""
    if spec.proxy is not None:
        return True
    return spec.command is None and (uses_summariser(spec.arm) or makes_opaque(spec.arm)
                                     or spec.arm in LEDGER_ARMS)


@dataclass(frozen=True)
class RejectedPlugin:
    name: str
    code: Code


class CheckedFold:
    """A plugin fold behind the validation every plugin checkpoint must pass; a plugin
    exception becomes ``fold_plugin_failed`` with the cause chained."""

    def __init__(self, name: str, inner: Fold) -> None:
        self._name = name
        self._inner = inner

    @property
    def name(self) -> str:
        return self._name

    @property
    def derives_from_source(self) -> bool:
        """The plugin's own declaration (``Fold``'s optional attribute), passed through."""
        return getattr(self._inner, "derives_from_source", False) is True

    def build(self, prefix: TracePrefix) -> Checkpoint:
        try:
            built = self._inner.build(prefix)
        except FoldError:
            raise
        except Exception as exc:  # the plugin's fault; mapped once, here
            raise PluginError(Code.FOLD_PLUGIN_FAILED, f"plugin {self._name} raised") from exc
        return checked(built, self._name, prefix)


def _plugin_entry_points() -> list[EntryPoint]:
    # Imported here: importlib.metadata is ~25 ms of a process's start, and only a
    # plugin's lookup needs it (not the fork-server template, nor a built-in arm's prep).
    from importlib.metadata import entry_points

    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def plugin_arms() -> tuple[list[str], list[RejectedPlugin]]:
    """Installed plugin arm names (sorted) and the plugins rejected without loading."""
    names: list[str] = []
    rejected: list[RejectedPlugin] = []
    seen: set[str] = set()
    for entry in _plugin_entry_points():
        if entry.name in BUILTIN_ARMS or entry.name in DECLARED_ARMS or entry.name in seen:
            rejected.append(RejectedPlugin(entry.name, Code.FOLD_PLUGIN_INVALID))
            continue
        seen.add(entry.name)
        names.append(entry.name)
    return names, rejected


def arm_names() -> list[str]:
    """Every arm name a campaign may select: built-ins first, then valid plugins."""
    return [*BUILTIN_ARMS, *plugin_arms()[0]]


def plugin_entry_point(name: str) -> EntryPoint:
    """The one installed entry point of the plugin arm ``name``: ``fold_unknown`` if
    none, ``fold_plugin_invalid`` if it claims a built-in name or is registered twice."""
    if name in BUILTIN_ARMS:
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{name!r} is a built-in arm, not a plugin")
    matches = [ep for ep in _plugin_entry_points() if ep.name == name]
    if not matches:
        raise FoldError(Code.FOLD_UNKNOWN, f"no arm named {name!r}")
    if len(matches) > 1:
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{name!r} is registered twice")
    return matches[0]


def _load_plugin(name: str) -> Fold:
    entry = plugin_entry_point(name)
    try:
        target = entry.load()
        # A class passes a runtime Protocol check too (it has ``name`` and ``build``):
        # instantiate classes and factories, take instances as they are.
        is_factory = isinstance(target, type) or (callable(target) and not isinstance(target, Fold))
        fold = target() if is_factory else target
    except Exception as exc:
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"plugin {name!r} does not load") from exc
    if not isinstance(fold, Fold) or not callable(getattr(fold, "build", None)):
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"plugin {name!r} is not a Fold")
    if fold.name != name:
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"plugin {name!r} calls itself {fold.name!r}")
    return fold


def get_fold(name: str) -> Fold:
    """The arm named ``name``: a built-in, or a plugin wrapped in ``CheckedFold``."""
    factory = BUILTIN_ARMS.get(name)
    if factory is not None:
        return factory()
    return CheckedFold(name, _load_plugin(name))


def fold_for(
    arm: str,
    command: Sequence[str] | None = None,
    *,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    summariser: Summariser | None = None,
    lookup: bool = True,
) -> Fold:
    """The fold a campaign role stands for: an external command when ``command`` is
    given (named ``arm``, run with ``env`` in ``cwd``; ``timeout_s`` None is the external
    default),
    otherwise ``get_fold(arm)``, except that a compaction arm (``uses_summariser``) is
    built with ``summariser`` when one is given. Other arms ignore ``summariser``.
    ``lookup`` False: the probe mode offers no lookup, and an arm whose text would name
    the lookup tools (``NAMES_LOOKUP``) is built without naming them."""
    if command is None:
        if summariser is not None and arm in SUMMARISING_ARMS:
            return SUMMARISING_ARMS[arm](summariser)
        if not lookup and arm in NAMES_LOOKUP:
            return NAMES_LOOKUP[arm]()
        return get_fold(arm)
    from efold.folds.external import DEFAULT_TIMEOUT_S, ExternalCommandFold

    return ExternalCommandFold(
        arm, command, timeout_s=DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s, env=env,
        cwd=cwd,
    )
