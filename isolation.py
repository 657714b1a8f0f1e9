"""Foreign code without a network and with writes only beneath its own roots.

Fold code (entry-point plugins, external commands, compaction proxies) and the boundary
workspace's test runner run as the operator's user: without this they could rewrite the
run's journal, the burn registry or the operator's files, and call anything on the
network behind the guard's back. Before such code runs, its process calls ``isolate``:

- **Network**: the process moves into a new network namespace whose only interface is
  ``lo`` (brought up here): root by ``unshare(CLONE_NEWNET)``, an ordinary user by
  ``unshare(CLONE_NEWUSER | CLONE_NEWNET)`` with its own uid and gid mapped to
  themselves. Loopback inside is a different loopback: nothing listening on the host,
  on loopback or elsewhere, can be reached. ``CLONE_NEWUSER`` needs a single-threaded
  process, so ``isolate`` runs before any thread is started.
- **Writes**: Landlock (unprivileged, per process, inherited by every descendant and
  never lifted). The ruleset *handles* every filesystem write right the kernel's ABI
  knows (with refer, truncate and device ioctl where the ABI has them) and grants them
  beneath the writable roots only (plus writing ``/dev/null``, ``/dev/zero`` and
  ``/dev/full``). Reading and executing are not handled, so they stay allowed
  everywhere: the same effect as a read/execute rule on ``/``, with no rule to add.
  ``no_new_privs`` is set first (Landlock requires it, and a setuid program cannot
  lift the restriction). From ABI 6 the domain is also *scoped*: it can neither signal
  a process outside it (the controller, the operator's other processes) nor connect to
  an abstract unix socket made outside it.

Neither ever raises for "unavailable": a kernel without Landlock, a disabled Landlock,
refused namespaces all come back as a reason in ``Isolation``; the caller decides
(a campaign may require both: ``fold_isolation_unavailable``). The order is network
first: writing ``/proc/self/uid_map`` is a write Landlock would refuse.

``EFOLD_ISOLATION_SIMULATE`` (``network``, ``writes`` or both, comma-separated) makes
the named isolation report itself unavailable without trying: used only by tests, to
prove the fallback on a kernel that allows both.

Syscalls through ctypes (no dependency); numbers 444/445/446 are the same on x86_64
and aarch64. Imports only the standard library and msgspec: prep children pay for
every import at each launch.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import socket
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Final, Literal

import msgspec

if TYPE_CHECKING:
    import ctypes

# ``ctypes`` (about 1 ms) is imported only where a syscall is made: every child imports
# this module for ``Isolation`` (``ipc.messages``), only a prep child isolates.

SIMULATE_VAR: Final = "EFOLD_ISOLATION_SIMULATE"

_SYS_CREATE_RULESET: Final = 444
_SYS_ADD_RULE: Final = 445
_SYS_RESTRICT_SELF: Final = 446
_CREATE_RULESET_VERSION: Final = 1 << 0
_RULE_PATH_BENEATH: Final = 1
_PR_SET_NO_NEW_PRIVS: Final = 38

# Landlock filesystem rights (linux/landlock.h).
_WRITE_FILE: Final = 1 << 1
_REMOVE_DIR: Final = 1 << 4
_REMOVE_FILE: Final = 1 << 5
_MAKE_CHAR: Final = 1 << 6
_MAKE_DIR: Final = 1 << 7
_MAKE_REG: Final = 1 << 8
_MAKE_SOCK: Final = 1 << 9
_MAKE_FIFO: Final = 1 << 10
_MAKE_BLOCK: Final = 1 << 11
_MAKE_SYM: Final = 1 << 12
_REFER: Final = 1 << 13  # ABI 2
_TRUNCATE: Final = 1 << 14  # ABI 3
_IOCTL_DEV: Final = 1 << 15  # ABI 5
# ABI 6 scopes: no signal to, and no abstract unix socket of, a process outside the
# domain (the controller, the operator's other processes).
_SCOPES: Final = (1 << 0) | (1 << 1)
_WRITES_V1: Final = (_WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_CHAR | _MAKE_DIR
                     | _MAKE_REG | _MAKE_SOCK | _MAKE_FIFO | _MAKE_BLOCK | _MAKE_SYM)
# The rights a rule on a single file (not a directory) may carry.
_FILE_RIGHTS: Final = _WRITE_FILE | _TRUNCATE | _IOCTL_DEV
# Devices every program may write (``subprocess.DEVNULL`` opens /dev/null read-write).
WRITABLE_DEVICES: Final = ("/dev/null", "/dev/zero", "/dev/full")

_CLONE_NEWNET: Final = 0x40000000
_CLONE_NEWUSER: Final = 0x10000000
_SIOCGIFFLAGS: Final = 0x8913
_SIOCSIFFLAGS: Final = 0x8914
_IFF_UP: Final = 0x1
_IFREQ: Final = struct.Struct("16sH22x")  # ifr_name, ifr_flags, the rest of the union

Network = Literal["loopback-only", "host"]
REASON_CHARS: Final = 500  # a reason is cut to this (it crosses the IPC channel)
Reason = Annotated[str, msgspec.Meta(max_length=REASON_CHARS)]
Writes = Annotated[str, msgspec.Meta(pattern=r"^(landlock-abi-[1-9][0-9]{0,2}|unrestricted)$")]


class Isolation(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What isolated the foreign code of one process. A reason says why an isolation is
    absent (``host``, ``unrestricted``); with ``loopback-only`` a network reason is set
    only when ``lo`` could not be brought up (then not even loopback is reachable)."""

    network: Network
    writes: Writes  # "landlock-abi-N" or "unrestricted"
    network_reason: Reason | None = None
    writes_reason: Reason | None = None

    @property
    def complete(self) -> bool:
        return self.network == "loopback-only" and self.writes != "unrestricted"

    def missing(self) -> list[str]:
        """Each absent isolation with its reason, as an operator reads it."""
        out: list[str] = []
        if self.network != "loopback-only":
            out.append(f"network: {self.network_reason}")
        if self.writes == "unrestricted":
            out.append(f"writes: {self.writes_reason}")
        return out


@functools.cache
def _libc() -> ctypes.CDLL:
    """Loaded once, in the parent before any fork: a forked child of a threaded parent
    must not ``dlopen`` (``ChildIsolation``)."""
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _simulated(which: str) -> bool:
    return which in os.environ.get(SIMULATE_VAR, "").split(",")


def _strerror(err: int) -> str:
    return f"{errno.errorcode.get(err, str(err))}: {os.strerror(err)}"


# -- Landlock ------------------------------------------------------------------------


def landlock_abi() -> int | str:
    """The kernel's Landlock ABI version, or why there is none."""
    import ctypes

    if _simulated("writes"):
        return "Landlock unavailable (simulated by EFOLD_ISOLATION_SIMULATE)"
    libc = _libc()
    version = int(libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0),
                               ctypes.c_uint32(_CREATE_RULESET_VERSION)))
    if version >= 1:
        return version
    err = ctypes.get_errno()
    if err == errno.ENOSYS:
        return "Landlock is not in this kernel (ENOSYS)"
    if err == errno.EOPNOTSUPP:
        return "Landlock is disabled on this kernel (EOPNOTSUPP)"
    return f"Landlock refused ({_strerror(err)})"


def write_rights(abi: int) -> int:
    """Every filesystem write right ABI ``abi`` knows (refer, truncate, ioctl_dev
    included where it has them)."""
    rights = _WRITES_V1
    if abi >= 2:
        rights |= _REFER
    if abi >= 3:
        rights |= _TRUNCATE
    if abi >= 5:
        rights |= _IOCTL_DEV
    return rights


class Ruleset:
    """A built Landlock ruleset, not yet enforced: ``fd`` survives a fork, so a parent
    can build it and a child (``preexec_fn``) only enforce it (``enforce``)."""

    def __init__(self, fd: int, abi: int) -> None:
        self.fd = fd  # invariant: an open ruleset descriptor until ``close``
        self.abi = abi

    def close(self) -> None:
        os.close(self.fd)


def build_ruleset(writable: Sequence[str]) -> Ruleset | str:
    """A ruleset allowing writes beneath ``writable`` (and to ``WRITABLE_DEVICES``), or
    why none can be built. A writable root that does not exist is a reason, not a
    silent narrowing."""
    import ctypes

    abi = landlock_abi()
    if isinstance(abi, str):
        return abi
    handled = write_rights(abi)
    libc = _libc()
    # handled_access_fs (ABI 1's struct); from ABI 6 also handled_access_net (none: the
    # namespace does that) and ``scoped``.
    attr = (struct.pack("=QQQ", handled, 0, _SCOPES) if abi >= 6
            else struct.pack("=Q", handled))
    fd = int(libc.syscall(_SYS_CREATE_RULESET, attr, ctypes.c_size_t(len(attr)),
                          ctypes.c_uint32(0)))
    if fd < 0:
        return f"Landlock ruleset refused ({_strerror(ctypes.get_errno())})"
    ruleset = Ruleset(fd, abi)
    grants = [(root, handled) for root in writable]
    grants += [(dev, handled & _FILE_RIGHTS) for dev in WRITABLE_DEVICES
               if os.path.exists(dev)]
    for path, rights in grants:
        reason = _add_rule(libc, fd, path, rights)
        if reason is not None:
            ruleset.close()
            return reason
    return ruleset


def _add_rule(libc: ctypes.CDLL, ruleset_fd: int, path: str, rights: int) -> str | None:
    import ctypes

    try:
        target = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as exc:
        return f"writable root {path} cannot be opened ({_strerror(exc.errno or 0)})"
    try:
        attr = ctypes.create_string_buffer(struct.pack("=Qi", rights, target))
        if int(libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset_fd),
                            ctypes.c_int(_RULE_PATH_BENEATH), attr, ctypes.c_uint32(0))) != 0:
            return f"Landlock rule for {path} refused ({_strerror(ctypes.get_errno())})"
    finally:
        os.close(target)
    return None


def enforce(ruleset: Ruleset) -> str | None:
    """``no_new_privs``, then restrict this process (and every later descendant) to
    ``ruleset``; None when done, else why not. Minimal work: safe in ``preexec_fn``."""
    import ctypes

    libc = _libc()
    if int(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) != 0:
        return f"no_new_privs refused ({_strerror(ctypes.get_errno())})"
    if int(libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset.fd),
                        ctypes.c_uint32(0))) != 0:
        return f"Landlock restrict_self refused ({_strerror(ctypes.get_errno())})"
    return None


def restrict_writes(writable: Sequence[str]) -> tuple[str, str | None]:
    """(``writes`` value, reason): this process may write only beneath ``writable``."""
    ruleset = build_ruleset(writable)
    if isinstance(ruleset, str):
        return "unrestricted", ruleset
    try:
        reason = enforce(ruleset)
    finally:
        ruleset.close()
    if reason is not None:
        return "unrestricted", reason
    return f"landlock-abi-{ruleset.abi}", None


# -- Network namespace ---------------------------------------------------------------


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _write_proc(name: str, text: str) -> None:
    fd = os.open(f"/proc/self/{name}", os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def _unshare(libc: ctypes.CDLL, flags: int) -> int:
    """0, or the errno of a refused ``unshare``."""
    import ctypes

    return 0 if int(libc.unshare(ctypes.c_int(flags))) == 0 else ctypes.get_errno()


def _loopback_up() -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            got = fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, _IFREQ.pack(b"lo", 0))
            flags = _IFREQ.unpack(got)[1]
            fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS, _IFREQ.pack(b"lo", flags | _IFF_UP))
    except OSError as exc:
        return f"loopback could not be brought up ({_strerror(exc.errno or 0)})"
    return None


def enter_loopback_netns() -> tuple[Network, str | None]:
    """(``network`` value, reason): move this process into a network namespace with
    only ``lo`` (up). Root unshares the namespace alone; an ordinary user (or root
    refused that) goes through a user namespace mapping its own ids to themselves,
    which only a single-threaded process may enter."""
    if _simulated("network"):
        return "host", "network namespace unavailable (simulated by EFOLD_ISOLATION_SIMULATE)"
    libc = _libc()
    err = _unshare(libc, _CLONE_NEWNET) if os.geteuid() == 0 else errno.EPERM
    if err == errno.EPERM:
        if _threads() != 1:
            return "host", "a user namespace needs a single-threaded process"
        uid, gid = os.geteuid(), os.getegid()
        err = _unshare(libc, _CLONE_NEWUSER | _CLONE_NEWNET)
        if err == 0:
            try:
                _write_proc("setgroups", "deny")
                _write_proc("uid_map", f"{uid} {uid} 1")
                _write_proc("gid_map", f"{gid} {gid} 1")
            except OSError as exc:
                return "host", f"user namespace id map refused ({_strerror(exc.errno or 0)})"
    if err != 0:
        return "host", f"network namespace refused ({_strerror(err)})"
    reason = _loopback_up()
    # In the new namespace even when lo stays down: then nothing at all is reachable.
    return "loopback-only", reason


def isolate(writable: Sequence[str], *, network: bool = True,
            network_reason: str | None = None) -> Isolation:
    """Isolate this process for foreign code: the loopback-only namespace (unless
    ``network`` is false; ``network_reason`` then says why), then Landlock with
    ``writable`` as the only writable roots. Never raises for "unavailable"."""
    net: Network = "host"
    if network:
        net, network_reason = enter_loopback_netns()
    writes, writes_reason = restrict_writes(writable)
    return Isolation(network=net, writes=writes, network_reason=_cut(network_reason),
                     writes_reason=_cut(writes_reason))


def _cut(reason: str | None) -> str | None:
    return None if reason is None else reason[:REASON_CHARS]


# -- A child between fork and exec -----------------------------------------------------


class ChildIsolation:
    """Isolation for a child about to exec foreign code, split so that the child does
    the least: the parent builds the Landlock ruleset and a status pipe (``__init__``);
    the child, as ``preexec_fn``, enters the loopback-only namespace, enforces the
    ruleset and writes its ``Isolation`` to the pipe (``apply``); the parent reads it
    (``result``) and closes what it holds (``close``). The pipe's write end is
    close-on-exec, so the foreign code never holds it."""

    def __init__(self, writable: Sequence[str]) -> None:
        _libc()  # loaded here, never in the child
        built = build_ruleset(writable)
        self._ruleset = built if isinstance(built, Ruleset) else None
        self._writes_reason = built if isinstance(built, str) else None
        self._read, self._write = os.pipe()  # invariant: both open until ``close``

    def apply(self) -> None:
        """In the child (``preexec_fn``): minimal work, never raises."""
        net, net_reason = enter_loopback_netns()
        writes, writes_reason = "unrestricted", self._writes_reason
        if self._ruleset is not None:
            writes_reason = enforce(self._ruleset)
            if writes_reason is None:
                writes = f"landlock-abi-{self._ruleset.abi}"
        status = Isolation(network=net, writes=writes, network_reason=_cut(net_reason),
                           writes_reason=_cut(writes_reason))
        os.write(self._write, msgspec.json.encode(status))

    def result(self) -> Isolation | None:
        """What the child reported (after the exec or a failed start); None when it
        reported nothing (it never ran ``apply``)."""
        os.close(self._write)
        self._write = -1
        chunks: list[bytes] = []
        while chunk := os.read(self._read, 4096):
            chunks.append(chunk)
        try:
            return msgspec.json.decode(b"".join(chunks), type=Isolation)
        except msgspec.DecodeError:
            return None

    def close(self) -> None:
        for fd in (self._read, self._write):
            if fd >= 0:
                os.close(fd)
        self._read = self._write = -1
        if self._ruleset is not None:
            self._ruleset.close()
            self._ruleset = None
