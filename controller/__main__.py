"""The ``efold-controller`` program (its console script, and ``python -m
efold.controller``): ``cli.run``. The command line's modules are imported here, so that
a Ctrl-C in the program's first moments, while they are still being imported, ends as
any other early one does (``interrupted``, status 130, and ``pilot --json``'s closing
line), never as a traceback."""

from __future__ import annotations

try:  # every import inside: the standard library's take time too
    from typing import NoReturn

    from efold.controller import cli
except (KeyboardInterrupt, RuntimeError) as exc:
    # A Ctrl-C, or what one caused (``interrupted_by``: from a class's ``__set_name__``
    # it comes out as a ``RuntimeError``).
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C changes nothing
    from efold.errors import interrupted_by

    if not interrupted_by(exc):
        raise
    from efold.controller import cli  # again: nothing interrupts it now

    cli.interrupted_before_start()


def run() -> NoReturn:
    cli.run()


if __name__ == "__main__":
    run()
