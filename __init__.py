"""efold: measure context folds in LLM agents.

After a long conversation is compacted, rebuilt cold, reseeded or moved into a retained
store, does the agent still know what was discussed and decided? efold replays long
fictional conversations, builds a checkpoint through a fold arm, asks probes in fresh
continuation turns and scores the answers deterministically.
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # Lazy: importlib.metadata costs ~20 ms, and every child process imports `efold`.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("efold")
        except PackageNotFoundError:  # pragma: no cover - an uninstalled tree
            return "0.0.0"
    raise AttributeError(name)


__all__ = ["__version__"]
