"""The template's fork: a worker born the controller's child, in its launch's cgroup.

``clone3`` with ``CLONE_PARENT`` gives the new process the template's own parent, the
controller, from its first instruction: no intermediate process, no reparenting, and a
page-table copy of the template made once per worker instead of twice (with its
teardown). ``CLONE_INTO_CGROUP`` (Linux 5.7+), when the launch relays its cgroup, has
it born there too: moving a running process into a cgroup (a write to
``cgroup.procs``) takes the kernel's cgroup threadgroup lock for writing, which waits
for an RCU grace period whenever no other move happened in the last few milliseconds:
5 to 11 ms per launch on this project's machines (``benchmarks/bench_spawn.py``).

Where ``clone3`` is refused (a kernel before 5.7, a seccomp filter that answers
``ENOSYS``, no permission on the cgroup) the plain ``clone`` syscall with
``CLONE_PARENT`` is used; the controller then moves the worker into its cgroup (it
proves every worker's cgroup from /proc either way). Where that is refused too, the
call raises and the template refuses the fork: the controller spawns instead.

A raw clone is not glibc's ``fork``, and three differences are handled here:

* the C library's ``pthread_atfork`` handlers do not run: the template never starts
  a thread (so no lock can be held by another thread across the clone), and
  OpenSSL's random generator, which such a handler would reseed before 3.0, is
  reseeded explicitly in the child then (``_reseed``); OpenSSL 3 checks the pid itself;
* the child's thread-control block keeps the template's thread id, which glibc reads
  only for locks that record their owner (still one id per thread in the child: the
  template is alive, so no thread of the child can have its id) and, before glibc
  2.34, for ``raise``; the worker raises no signal at itself;
* Python's own fork bookkeeping runs around the call (``PyOS_BeforeFork``,
  ``PyOS_AfterFork_Child`` / ``_Parent``), as ``os.fork`` does: its lock, its
  ``os.register_at_fork`` handlers (``random`` reseeds there).
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import signal
import sys
from typing import Final

CLONE_PARENT: Final = 0x00008000
CLONE_INTO_CGROUP: Final = 0x200000000
# clone3 is 435 on every architecture with the generic syscall table; clone's number
# differs (its first two arguments, flags and stack, are in the same place on both).
_SYS_CLONE3: Final = 435
_SYS_CLONE: Final = {"x86_64": 56, "aarch64": 220}


class _CloneArgs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size",
        "tls", "set_tid", "set_tid_size", "cgroup")]


def fork_sibling(cgroup_fd: int | None) -> int:
    """Fork a child whose parent is this process's parent, born in the cgroup whose
    directory ``cgroup_fd`` is when given (and the kernel allows it): the child's pid
    here, 0 in the child. Raises ``OSError`` when no clone was possible (nothing was
    forked)."""
    libc, number = _libc()
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    pid, errno = _clone3(libc, cgroup_fd)
    if pid < 0:
        pid = libc.syscall(ctypes.c_long(number), ctypes.c_ulong(CLONE_PARENT | signal.SIGCHLD),
                           ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0),
                           ctypes.c_ulong(0))
        errno = ctypes.get_errno()
    if pid == 0:
        api.PyOS_AfterFork_Child()
        _reseed()
        return 0
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(errno, os.strerror(errno))
    return int(pid)


@functools.cache
def _libc() -> tuple[ctypes.PyDLL, int]:
    """This process's C library, for ``syscall``, and the ``clone`` number of this
    machine: looked up once, not at every fork."""
    number = _SYS_CLONE.get(platform.machine())
    if number is None:
        raise OSError(38, "clone numbers unknown on this architecture")  # ENOSYS
    # PyDLL: the GIL stays held across the syscall, as ``os.fork`` holds it.
    libc = ctypes.PyDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc, number


def _clone3(libc: ctypes.PyDLL, cgroup_fd: int | None) -> tuple[int, int]:
    """(pid, errno) of ``clone3``: CLONE_PARENT, into the cgroup when one is given.
    ``exit_signal`` stays 0: with CLONE_PARENT the kernel gives the child the caller's
    own (SIGCHLD to the controller)."""
    flags = CLONE_PARENT | (CLONE_INTO_CGROUP if cgroup_fd is not None else 0)
    args = _CloneArgs(flags=flags, cgroup=cgroup_fd if cgroup_fd is not None else 0)
    pid = libc.syscall(ctypes.c_long(_SYS_CLONE3), ctypes.byref(args),
                       ctypes.c_size_t(ctypes.sizeof(args)))
    return int(pid), ctypes.get_errno() if pid < 0 else 0


def _reseed() -> None:
    """Mix fresh entropy into OpenSSL's generator, if this process loaded it (the
    template preloads the HTTP client's TLS context) and it is older than 3.0: no two
    workers may share its state. OpenSSL 3 compares the process id at every draw and
    reseeds itself in a new process (its ``fork_id``), so there this would only repeat,
    at ~0.6 ms and ~180 page faults a worker, what its first draw does anyway; an older
    one may count forks through the ``pthread_atfork`` handler a raw clone skips."""
    ssl = sys.modules.get("ssl")
    if ssl is not None and ssl.OPENSSL_VERSION_INFO < (3,):
        ssl.RAND_add(os.urandom(32), 32.0)
