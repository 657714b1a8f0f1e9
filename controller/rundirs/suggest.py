"""A command the program tells its operator to run, written so that it pastes into a
shell as it reads: each word quoted for the shell, a path that begins with ``-`` made
``./``-relative so that it is not read as an option (``shlex.quote`` leaves both a
space-free ``-h`` and ``--latest`` as they are)."""

from __future__ import annotations

import os
import shlex


def _word(value: str | os.PathLike[str]) -> str:
    """One word of a command, quoted for a shell; a path starting with ``-`` as ``./-…``."""
    text = os.fspath(value)
    return shlex.quote("./" + text if text.startswith("-") else text)


def suggest(command: str, *paths: str | os.PathLike[str]) -> str:
    """``efold-controller COMMAND PATH…`` for the operator to paste (``command`` is the
    program's own words, ``paths`` the operator's, quoted)."""
    return " ".join(["efold-controller", command, *(_word(p) for p in paths)])


def suggest_prune(run: str | os.PathLike[str]) -> str:
    """``efold-controller prune ROOT --run RUN``: what removes the one directory ``run``
    (a run, or a claim that recorded nothing) from its runs root."""
    path = os.path.abspath(run)  # "." or "sub/.." name no directory under its parent
    return f"{suggest('prune', os.path.dirname(path))} --run {_word(path)}"
