"""``fork`` straight into a cgroup: ``clone3`` with ``CLONE_INTO_CGROUP`` (Linux 5.7+).

Moving a running process into a cgroup (a write to ``cgroup.procs``) takes the kernel's
cgroup threadgroup lock for writing, which waits for an RCU grace period whenever no
other move happened in the last few milliseconds: 5 to 11 ms per launch on this
project's machines (``benchmarks/bench_spawn.py``). A process born in its cgroup pays
none of it. The fork-server template forks each worker's *intermediate* this way; the
intermediate's own ``os.fork`` then gives the worker, born in the same cgroup.

Only for the intermediate: a raw ``clone3`` leaves the child's thread-control block
naming the parent's thread id (glibc's ``fork`` corrects it, this cannot), which
matters only to ``raise``/``pthread_kill`` in that process; the intermediate only
forks, writes pipes and exits, and the worker it forks with ``os.fork`` is corrected by
glibc as usual. Python's fork bookkeeping runs around the call (``PyOS_BeforeFork``,
``PyOS_AfterFork_Child`` / ``_Parent``), as ``os.fork`` does.

Where ``clone3`` is refused (an old kernel, a seccomp filter, no permission on the
cgroup) the caller falls back to ``os.fork``; the controller proves every worker's
cgroup from /proc and moves it there itself when it was not born there.
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
from typing import Final

CLONE_INTO_CGROUP: Final = 0x200000000
# clone3 is 435 on every architecture with the generic syscall table (x86_64, aarch64).
_SYS_CLONE3: Final = 435
_SUPPORTED_MACHINES: Final = frozenset({"x86_64", "aarch64"})


class _CloneArgs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size",
        "tls", "set_tid", "set_tid_size", "cgroup")]


def fork_into(cgroup_fd: int) -> int:
    """Fork a child born in the cgroup whose directory ``cgroup_fd`` is: the child's pid
    in the parent, 0 in the child. Raises ``OSError`` when the kernel refuses (nothing
    was forked); the caller then uses ``os.fork``."""
    if platform.machine() not in _SUPPORTED_MACHINES:
        raise OSError(38, "clone3 number unknown on this architecture")  # ENOSYS
    # PyDLL: the GIL stays held across the syscall, as ``os.fork`` holds it.
    libc = ctypes.PyDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    args = _CloneArgs(flags=CLONE_INTO_CGROUP, exit_signal=signal.SIGCHLD,
                      cgroup=cgroup_fd)
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    pid = libc.syscall(ctypes.c_long(_SYS_CLONE3), ctypes.byref(args),
                       ctypes.c_size_t(ctypes.sizeof(args)))
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return int(pid)
