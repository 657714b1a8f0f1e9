"""efold: measure context folds in LLM agents.

After a long conversation is compacted, rebuilt cold, reseeded or moved into a retained
store, does the agent still know what was discussed and decided? efold replays long
fictional conversations, builds a checkpoint through a fold arm, asks probes in fresh
continuation turns and scores the answers deterministically.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("efold")
except PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
    __version__ = "0.0.0"

__all__ = ["__version__"]
