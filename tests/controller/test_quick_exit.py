"""The ``efold-controller`` program ends without the interpreter's teardown
(``cli.run``), and still ends as the interpreter would: the command's status, every
word of its output, its ``atexit`` functions, its temporary directories removed, its
threads that are not daemons joined. Each case runs the real program in a child."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _program(body: str, *args: str) -> subprocess.CompletedProcess[str]:
    code = f"import sys\nsys.argv = ['efold-controller', *sys.argv[1:]]\n{body}\n" \
           "from efold.controller.cli import run\nrun()\n"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, timeout=120)


def test_the_whole_output_reaches_a_pipe_with_the_status() -> None:
    # --help into a pipe is block-buffered: only the final flush delivers its tail.
    quick = subprocess.run([sys.executable, "-m", "efold.controller", "--help"],
                           capture_output=True, text=True, timeout=120)
    torn_down = subprocess.run(  # the same command, ended by the interpreter's teardown
        [sys.executable, "-c", "import sys\nsys.argv[0] = 'python -m efold.controller'\n"
         "from efold.controller.cli import main\nmain()", "--help"],
        capture_output=True, text=True, timeout=120)
    assert quick.returncode == torn_down.returncode == 0, quick.stderr
    assert quick.stdout == torn_down.stdout and "Exit status" in quick.stdout
    usage = subprocess.run([sys.executable, "-m", "efold.controller", "nope"],
                           capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2 and "No such command 'nope'" in usage.stderr


def test_atexit_functions_threads_and_temporary_directories_end_as_at_a_normal_exit(
        tmp_path: Path) -> None:
    marker = tmp_path / "joined"
    done = _program(
        "import atexit, tempfile, threading, time\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "kept = tempfile.TemporaryDirectory()\n"
        "print('tmp', kept.name, flush=True)\n"
        f"def late():\n    time.sleep(0.5)\n    open({str(marker)!r}, 'w').close()\n"
        "threading.Thread(target=late).start()\n",
        "nope")
    assert done.returncode == 2, done.stderr
    assert "atexit ran" in done.stdout
    tmp = next(line.split(" ", 1)[1] for line in done.stdout.splitlines()
               if line.startswith("tmp "))
    assert not Path(tmp).exists()
    assert marker.exists()  # the thread ran to its end before the process left


def test_an_exit_with_a_message_says_it_and_exits_1() -> None:
    done = _program("import efold.controller.cli as cli\n"
                    "def failing(**click_options):\n    raise SystemExit('the reason')\n"
                    "cli.main = failing\n")
    assert done.returncode == 1
    assert done.stderr.strip() == "the reason"


def test_an_exception_keeps_the_interpreter_s_traceback_and_status() -> None:
    done = _program("import efold.controller.cli as cli\n"
                    "def failing(**click_options):\n    raise RuntimeError('boom')\n"
                    "cli.main = failing\n")
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "RuntimeError: boom" in done.stderr


def test_a_closed_stdout_or_stderr_keeps_the_status() -> None:
    """Python starts with ``sys.stdout`` (or ``sys.stderr``) None where that descriptor is
    closed: there is nothing to flush, and the status is the command's."""
    for closed, args, status in ((">&-", "--version", 0), (">&-", "nope", 2),
                                 ("2>&-", "--version", 0), ("2>&-", "nope", 2)):
        done = subprocess.run(
            ["sh", "-c", f'exec "$0" -m efold.controller {args} {closed}', sys.executable],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == status, (closed, args, done.stderr)
        assert "Traceback" not in done.stderr


def test_a_thread_pool_left_open_does_not_hang_the_exit() -> None:
    """The interpreter's threading hooks run first, as at a normal exit: an executor
    shuts down and its worker ends."""
    done = _program("from concurrent.futures import ThreadPoolExecutor\n"
                    "pool = ThreadPoolExecutor(1)\n"
                    "pool.submit(lambda: 0).result()\n", "nope")
    assert done.returncode == 2, done.stderr
