"""Where a run's cgroups come from: the cgroup2 mount and this process's own cgroup.

The mount is found in /proc/self/mountinfo (fs type ``cgroup2``; not always
/sys/fs/cgroup: hybrid hosts mount it at /sys/fs/cgroup/unified), the own cgroup in the
``0::`` line of /proc/self/cgroup. The parsing functions take the text, so fixtures can
stand for hosts we are not on. "Unavailable" is never an error: ``find_cgroup2`` returns
``NoCgroup2`` with the reason, and the caller falls back to process-group containment.

Also the one place where an ``OSError`` of a cgroup operation becomes a
``ControllerError`` with a fixed code (``mapped``), and the one way a cgroup path is
opened (``open_below``: one component at a time with O_NOFOLLOW) for ``cgroups``.
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final, Literal

from efold.controller.errors import ControllerError
from efold.errors import Code

RUN_PREFIX: Final = "efold-"
DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# errno -> fixed code; anything else is CGROUP_FAILED. The one place an OSError of a
# cgroup operation becomes an efold error.
_ERRNO_CODES: Final = {
    errno.ELOOP: Code.CGROUP_PATH_REFUSED,  # a symlink where a cgroup belongs (O_NOFOLLOW)
    errno.ENOTDIR: Code.CGROUP_PATH_REFUSED,
    errno.ENOENT: Code.CGROUP_NOT_FOUND,
    errno.EEXIST: Code.CGROUP_EXISTS,
    errno.EACCES: Code.CGROUP_NOT_PERMITTED,
    errno.EPERM: Code.CGROUP_NOT_PERMITTED,
    errno.EROFS: Code.CGROUP_NOT_PERMITTED,
    errno.EBUSY: Code.CGROUP_NOT_EMPTY,  # rmdir of a populated cgroup, or one with children
    errno.ESRCH: Code.CGROUP_PLACE_UNVERIFIED,  # place: no such process (it is gone)
}


def failure(operation: str, exc: OSError) -> ControllerError:
    code = _ERRNO_CODES.get(exc.errno or 0, Code.CGROUP_FAILED)
    return ControllerError(code, f"{operation}: {errno.errorcode.get(exc.errno or 0, '?')}")


@contextmanager
def mapped(operation: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise failure(operation, exc) from exc


# -- where the cgroup comes from ------------------------------------------------------


@dataclass(frozen=True)
class Cgroup2:
    """A writable cgroup2 hierarchy: ``mount`` (its mount point) and ``own`` (this
    process's cgroup, relative to the hierarchy root as /proc/PID/cgroup shows it)."""

    mount: str
    own: str
    mode: Literal["cgroup"] = "cgroup"

    @property
    def own_path(self) -> str:
        return os.path.join(self.mount, self.own.lstrip("/"))


@dataclass(frozen=True)
class NoCgroup2:
    """No writable cgroup2 here; ``reason`` says why (for the run's banner and status)."""

    reason: str
    mode: Literal["process-group"] = "process-group"


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_own_cgroup(proc_cgroup: str) -> str | NoCgroup2:
    """This process's cgroup2 path from the text of /proc/self/cgroup (its ``0::`` line)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            path = line[3:]
            if not path.startswith("/") or "/.." in path:
                # Outside our cgroup namespace: we cannot name it from here.
                return NoCgroup2(f"own cgroup {path!r} is outside this cgroup namespace")
            return path
    return NoCgroup2("this process is in no cgroup2 hierarchy (no 0:: line in /proc/self/cgroup)")


def parse_cgroup2_mount(mountinfo: str, own: str) -> Cgroup2 | NoCgroup2:
    """The cgroup2 mount holding ``own`` from the text of /proc/self/mountinfo: a
    ``cgroup2`` file system mounted read-write whose root is ``own`` or above it."""
    read_only = False
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        sep = fields.index("-", 6)
        if len(fields) < sep + 4 or fields[sep + 1] != "cgroup2":
            continue
        root, mount = _unescape(fields[3]), _unescape(fields[4])
        options = fields[5].split(",") + fields[sep + 3].split(",")
        inside = root == "/" or own == root or own.startswith(root.rstrip("/") + "/")
        if not inside:
            continue
        if "ro" in options:
            read_only = True
            continue
        rel = own if root == "/" else own[len(root.rstrip("/")):] or "/"
        return Cgroup2(mount=mount, own=rel)
    if read_only:
        return NoCgroup2("cgroup2 is mounted read-only here")
    return NoCgroup2("no cgroup2 file system is mounted here (cgroup v1 only)")


def find_cgroup2(mountinfo: str | None = None, proc_cgroup: str | None = None
                 ) -> Cgroup2 | NoCgroup2:
    """The cgroup2 hierarchy this process can create run cgroups in, or why not. Reads
    /proc/self/mountinfo and /proc/self/cgroup unless given their text, then proves the
    own cgroup writable: a child can be created there and has ``cgroup.kill``
    (Linux 5.14+). Never raises for "unavailable"."""
    try:
        if proc_cgroup is None:
            with open("/proc/self/cgroup", encoding="utf-8") as f:
                proc_cgroup = f.read()
        if mountinfo is None:
            with open("/proc/self/mountinfo", encoding="utf-8") as f:
                mountinfo = f.read()
    except OSError as exc:
        return NoCgroup2(f"cannot read /proc: {errno.errorcode.get(exc.errno or 0, '?')}")
    own = parse_own_cgroup(proc_cgroup)
    if isinstance(own, NoCgroup2):
        return own
    found = parse_cgroup2_mount(mountinfo, own)
    if isinstance(found, NoCgroup2):
        return found
    probe = f"{RUN_PREFIX}probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        own_fd = open_below(found.mount, found.own)
    except ControllerError as exc:
        return NoCgroup2(f"own cgroup {found.own} cannot be opened ({exc.code.value})")
    try:
        try:
            os.mkdir(probe, 0o755, dir_fd=own_fd)
        except OSError as exc:
            return NoCgroup2(f"cannot create a child of own cgroup {found.own} "
                             f"({errno.errorcode.get(exc.errno or 0, '?')})")
        nested = f"{probe}/launch"
        try:
            has_kill = exists(own_fd, f"{probe}/cgroup.kill")
            # A run needs two levels (run, then launch): cgroup.max.depth or
            # cgroup.max.descendants may allow one and refuse the second.
            try:
                os.mkdir(nested, 0o755, dir_fd=own_fd)
                nested_error = None
            except OSError as exc:
                nested_error = errno.errorcode.get(exc.errno or 0, "?")
        finally:
            for path in (nested, probe):
                try:
                    os.rmdir(path, dir_fd=own_fd)
                except OSError:
                    pass  # absent, or an empty cgroup we made: nothing of a run is in it
        if not has_kill:
            return NoCgroup2("the kernel has no cgroup.kill (needs Linux 5.14 or later)")
        if nested_error is not None:
            return NoCgroup2(f"own cgroup {found.own} allows one level of child cgroups, a "
                             f"run needs two ({nested_error}: cgroup.max.depth or "
                             "cgroup.max.descendants)")
        return found
    finally:
        os.close(own_fd)


def exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return True


def open_below(mount: str, rel: str) -> int:
    """A directory fd for ``mount``/``rel``, opened one component at a time with
    O_NOFOLLOW: a symlink, ``.`` or ``..`` anywhere is refused."""
    parts = [p for p in rel.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise ControllerError(Code.CGROUP_PATH_REFUSED, f"{rel!r} has . or .. components")
    with mapped("open cgroup2 mount"):
        fd = os.open(mount, DIR_FLAGS)
    try:
        for part in parts:
            with mapped("open cgroup"):
                nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


