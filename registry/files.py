"""Durable and private files: the only way efold writes a file that must never be
overwritten or half-written, and reads a file it must trust.

Rules (docs/architecture.md §4):

* **Publish** = temp file ``O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC`` in the same directory →
  write → fsync → ``os.link`` to the final name (``EEXIST`` = taken; never ``rename``,
  which overwrites) → fsync the directory → unlink the temp → fsync the directory.
  After ``publish_exclusive`` returns, the file is complete and durable; if it raises,
  the final name either did not appear or belongs to someone else.
* **Private read**: every directory on the path is opened ``O_DIRECTORY|O_NOFOLLOW``
  (a symlink anywhere refuses), the file is named through ``dir_fd``, and the file must
  be a regular, single-link, owned file that is not group/other-writable, whose
  ``st_dev/st_ino`` is the same before opening, after opening and after reading.
* **fsync errors are fatal** (``FSYNC_FAILED``) and never retried: after a failed fsync
  the kernel may have dropped the dirty pages, so a retry can "succeed" over lost data.

Paths are resolved component by component from ``/`` without following symlinks, so a
symlink planted at any parent is refused, not just one at the last component.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from efold.errors import Code
from efold.input_files import read_bounded as read_to_eof  # the one bounded read
from efold.registry.errors import RegistryError

__all__ = [
    "check_owner_safe",
    "fsync_dir",
    "fsync_fd",
    "make_private_dir",
    "not_writable",
    "open_dir_nofollow",
    "open_private_child",
    "publish_exclusive",
    "read_private",
    "read_to_eof",
    "shared_dir_reason",
    "unsafe_file_reason",
    "write_all",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in at the name must not hang the reader; it is refused
# by the regular-file check right after.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _check_name(name: str) -> None:
    """A caller bug, not a filesystem condition: names are single components."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"not a single path component: {name!r}")


def fsync_fd(fd: int) -> None:
    """fsync, mapping failure to the fatal ``FSYNC_FAILED``. Never retried."""
    try:
        os.fsync(fd)
    except OSError as exc:
        raise RegistryError(Code.FSYNC_FAILED, f"fsync failed: errno {exc.errno}") from exc


def open_dir_nofollow(path: str | os.PathLike[str]) -> int:
    """Open ``path`` as a directory, walking from ``/`` one component at a time with
    ``O_NOFOLLOW``: a symlink at any component refuses (``PATH_REFUSED``). The caller
    owns (and closes) the returned descriptor.

    The path is made absolute lexically (``..`` collapsed). Because no component may be
    a symlink, the lexical and the physical path are the same directory."""
    absolute = os.path.abspath(os.fspath(path))
    fd = os.open("/", _DIR_FLAGS)
    try:
        for part in absolute.split("/"):
            if not part:
                continue
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                why = {errno.ELOOP: "is a symlink", errno.ENOTDIR: "is not a directory",
                       errno.ENOENT: "is missing"}.get(exc.errno or 0, f"errno {exc.errno}")
                raise RegistryError(Code.PATH_REFUSED,
                                    f"{absolute}: directory component {part!r} {why}") from exc
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def _opened_dir(path: str | os.PathLike[str]) -> Iterator[int]:
    fd = open_dir_nofollow(path)
    try:
        yield fd
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a directory's entries durable (a created, linked or removed name)."""
    with _opened_dir(path) as fd:
        fsync_fd(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` (``os.write`` may write less than asked). OSError
    propagates; the caller maps it to its own code."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def publish_exclusive(
    directory: str | os.PathLike[str], name: str, data: bytes, *, mode: int = 0o600,
    replace: bool = False, sync_dir: bool = True,
) -> None:
    """Publish ``data`` at ``directory/name`` exactly once, complete and durable.

    ``sync_dir=False``: the data is durable before the name exists, but the name itself
    only once the caller fsyncs ``directory`` (once for many names: a power loss before
    that leaves each name whole or absent, never torn).

    Raises ``PUBLISH_TARGET_EXISTS`` if the name is taken by anything (a file, a
    directory, a dangling symlink): the existing entry is never touched. With
    ``replace`` (a record derived again from the truth, e.g. a cluster run's reports
    after ``cluster collect``) a file there is replaced whole, by rename.
    ``PATH_NOT_WRITABLE`` (naming the directory) if this user may not create in it.
    ``PATH_REFUSED`` if the directory path holds a symlink; ``FSYNC_FAILED`` (fatal) or
    ``PUBLISH_FAILED`` on an I/O error, after which the final name is absent."""
    _check_name(name)
    with _opened_dir(directory) as dir_fd:
        temp = f".{name}.tmp-{os.getpid()}-{os.urandom(8).hex()}"
        try:
            fd = os.open(temp, _TEMP_FLAGS, mode, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in NOT_WRITABLE_ERRNOS:
                raise not_writable(directory, name, exc) from exc
            raise RegistryError(Code.PUBLISH_FAILED, f"temp create: errno {exc.errno}") from exc
        linked = False
        try:
            try:
                os.fchmod(fd, mode)  # the umask must not widen or narrow the mode
                write_all(fd, data)
            except OSError as exc:
                raise RegistryError(Code.PUBLISH_FAILED, f"write: errno {exc.errno}") from exc
            fsync_fd(fd)
            try:
                if replace:
                    os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                else:
                    os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd,
                            follow_symlinks=False)
            except FileExistsError as exc:
                raise RegistryError(
                    Code.PUBLISH_TARGET_EXISTS,
                    f"{os.path.join(os.fspath(directory), name)} exists (never overwritten)",
                ) from exc
            except OSError as exc:
                raise RegistryError(Code.PUBLISH_FAILED, f"link: errno {exc.errno}") from exc
            linked = True
        finally:
            os.close(fd)
            # The temp name is ours alone (O_EXCL + random suffix): always remove it,
            # before the one directory fsync below makes the new name and the removal
            # durable together. A crash before that fsync leaves the name whole or
            # absent (and perhaps the temp, a second link, as between two fsyncs).
            try:
                os.unlink(temp, dir_fd=dir_fd)
            except FileNotFoundError:
                if not (linked and replace):
                    if linked and sync_dir:
                        fsync_fd(dir_fd)  # a published name stays durable, error or not
                    raise
            except OSError as exc:
                if linked:
                    if sync_dir:
                        fsync_fd(dir_fd)
                    raise RegistryError(
                        Code.PUBLISH_FAILED, f"temp unlink: errno {exc.errno}"
                    ) from exc
        if sync_dir:
            fsync_fd(dir_fd)


def unsafe_file_reason(st: os.stat_result, *, owner_only: bool = False) -> str | None:
    """Why ``st`` is no file efold may trust (each caller raises it with its own code),
    or ``None``: not a regular file, a link count other than 1, another owner, group/
    other-writable, or (``owner_only``) any group/other permission at all."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_nlink != 1:
        return "link count is not 1"
    if st.st_uid != os.geteuid():
        return "not owned by this user"
    if st.st_mode & 0o022:
        return "group/other-writable"
    if owner_only and st.st_mode & 0o077:
        return "group/other-accessible"
    return None


def shared_dir_reason(st: os.stat_result) -> str | None:
    """Why a directory holding trusted state is shared (each caller raises it with its own
    code and wording), or ``None``: it must be ours, and nobody else may create or swap
    names in it (a sticky bit does not help: others could still plant new names)."""
    if st.st_uid != os.geteuid():
        return "not owned by this user"
    if st.st_mode & 0o022:
        return "group/other-writable"
    return None


def _refuse_unsafe_file(st: os.stat_result, *, owner_only: bool) -> None:
    why = "symlink" if stat.S_ISLNK(st.st_mode) else unsafe_file_reason(st, owner_only=owner_only)
    if why is not None:
        raise RegistryError(Code.PRIVATE_READ_REFUSED, why)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def read_private(
    directory: str | os.PathLike[str], name: str, *, max_bytes: int, owner_only: bool = False
) -> bytes:
    """Read a file efold must trust. Refuses (``PRIVATE_READ_REFUSED``) a symlink, a
    non-regular file, link count ≠ 1, a file not owned by this user, a group/other-
    writable file (with ``owner_only``: any group/other permission), a file larger than
    ``max_bytes``, and a name whose ``st_dev/st_ino`` changes between the checks.
    ``PRIVATE_FILE_MISSING`` if the name does not exist."""
    _check_name(name)
    with _opened_dir(directory) as dir_fd:
        try:
            before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError as exc:
            raise RegistryError(Code.PRIVATE_FILE_MISSING, "no such file") from exc
        _refuse_unsafe_file(before, owner_only=owner_only)
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError as exc:
            raise RegistryError(Code.PRIVATE_READ_REFUSED, "file vanished") from exc
        except OSError as exc:
            raise RegistryError(Code.PRIVATE_READ_REFUSED, f"open: errno {exc.errno}") from exc
        try:
            opened = os.fstat(fd)
            if not _same_file(before, opened):
                raise RegistryError(Code.PRIVATE_READ_REFUSED, "file replaced before open")
            _refuse_unsafe_file(opened, owner_only=owner_only)
            if opened.st_size > max_bytes:
                raise RegistryError(Code.PRIVATE_READ_REFUSED, "file larger than allowed")
            data = read_to_eof(fd, max_bytes)
            if data is None:
                raise RegistryError(Code.PRIVATE_READ_REFUSED, "file larger than allowed")
            # Re-check both the open file (a link added meanwhile) and the name (a
            # rename over it meanwhile): what we read must still be what the name means.
            _refuse_unsafe_file(os.fstat(fd), owner_only=owner_only)
        except OSError as exc:
            raise RegistryError(Code.PRIVATE_READ_REFUSED, f"read: errno {exc.errno}") from exc
        finally:
            os.close(fd)
        try:
            after = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError as exc:
            raise RegistryError(Code.PRIVATE_READ_REFUSED, "file vanished") from exc
        if not _same_file(opened, after):
            raise RegistryError(Code.PRIVATE_READ_REFUSED, "file replaced while reading")
        return data


def _refuse_unsafe_dir(st: os.stat_result) -> None:
    why = "not a directory" if not stat.S_ISDIR(st.st_mode) else shared_dir_reason(st)
    if why is not None:
        raise RegistryError(Code.PRIVATE_DIR_REFUSED, why)


def make_private_dir(path: str | os.PathLike[str], *, parents: bool = False) -> None:
    """Create ``path`` as an owner-only (0700) directory and make its name durable (the
    parent is fsynced). An existing directory is accepted only if it is a real directory
    (not a symlink) owned by this user and not group/other-writable; otherwise
    ``PRIVATE_DIR_REFUSED``. With ``parents``, missing ancestors are created the same
    way (existing ancestors are only required to contain no symlink)."""
    absolute = os.path.abspath(os.fspath(path))
    parent, name = os.path.split(absolute)
    if not name:
        raise ValueError("the root directory cannot be made private")
    if parents:
        prefix = "/"
        for part in parent.split("/"):
            prefix = os.path.join(prefix, part)
            if part and not os.path.lexists(prefix):
                make_private_dir(prefix)
    with _opened_dir(parent) as parent_fd:
        try:
            os.close(open_private_child(parent_fd, name, exclusive=False))
        except RegistryError as exc:
            if exc.code is Code.PATH_NOT_WRITABLE and isinstance(exc.__cause__, OSError):
                raise not_writable(parent, name, exc.__cause__) from exc.__cause__
            raise


def open_private_child(dir_fd: int, name: str, *, exclusive: bool, durable: bool = True) -> int:
    """Create ``name`` (0700) in the directory ``dir_fd`` and return it opened without
    following a link; the new name is durable (``dir_fd`` fsynced) unless ``durable`` is
    False (the caller fsyncs ``dir_fd`` later, once for many names). An existing entry
    is refused when ``exclusive``, else accepted only as a real directory owned by this
    user and not group/other-writable (``PRIVATE_DIR_REFUSED`` otherwise). The caller
    owns the returned descriptor."""
    try:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
        created = True
    except FileExistsError as exc:
        if exclusive:
            raise RegistryError(Code.PRIVATE_DIR_REFUSED, "already exists") from exc
        created = False
    except OSError as exc:
        if exc.errno in NOT_WRITABLE_ERRNOS:  # the caller names the directory (its path)
            raise RegistryError(Code.PATH_NOT_WRITABLE, f"cannot create {name}") from exc
        raise RegistryError(Code.PRIVATE_DIR_REFUSED, f"mkdir: errno {exc.errno}") from exc
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        why = "symlink" if exc.errno == errno.ELOOP else f"errno {exc.errno}"
        raise RegistryError(Code.PRIVATE_DIR_REFUSED, why) from exc
    try:
        if created:
            os.fchmod(fd, 0o700)  # exact mode whatever the umask
        _refuse_unsafe_dir(os.fstat(fd))
        if created and durable:
            fsync_fd(dir_fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"


# What a create in a directory fails with when this user may not write there.
NOT_WRITABLE_ERRNOS: frozenset[int] = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def not_writable(directory: str | os.PathLike[str], name: str, exc: OSError) -> RegistryError:
    """``PATH_NOT_WRITABLE`` for a failed create of ``name`` in ``directory``
    (``exc.errno`` in ``NOT_WRITABLE_ERRNOS``): the directory, its mode and owner, who
    we are, and the fix."""
    absolute = os.path.abspath(os.fspath(directory))
    try:
        st = os.stat(absolute)
        how = f" (mode {stat.S_IMODE(st.st_mode):04o}, owner {_user_name(st.st_uid)})"
    except OSError:
        how = ""
    why = "read-only file system" if exc.errno == errno.EROFS else \
        f"not writable by {_user_name(os.geteuid())}"
    return RegistryError(Code.PATH_NOT_WRITABLE,
                         f"{absolute}{how} is {why}: cannot create {name} in it; fix: "
                         "choose a directory you can write")


# Said only of a group- (not world-) writable directory: what it most likely is.
_UMASK_HINT = (" (a directory made under umask 002 is group-writable, and its group is "
               "shared)")


def _only_owner_may_write(st: os.stat_result) -> bool:
    """A directory that is group- but not world-writable, whose group is its owner's
    user-private group: named as the owner and with no member but the owner. That is
    what `mkdir` under umask 002 makes on distributions with user-private groups (and
    what `git clone` leaves there), and only its owner may write in it. The rule is
    OpenSSH's for its own files on Debian (`StrictModes` with user-private groups).
    Anything else group-writable is shared with somebody."""
    if st.st_mode & 0o002:
        return False
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
        group = grp.getgrgid(st.st_gid)
    except KeyError:
        return False
    if group.gr_name != owner or any(member != owner for member in group.gr_mem):
        return False
    # A member by primary group is listed only in the password database.
    return all(user.pw_gid != st.st_gid or user.pw_name == owner for user in pwd.getpwall())


def check_owner_safe(path: str | os.PathLike[str], *, what: str = "directory") -> None:
    """Refuse (``PATH_REFUSED``) unless every directory from ``/`` to ``path`` is a real
    directory (no symlink) owned by root or this user, and not writable by group/other
    unless it has the sticky bit (as ``/tmp`` does: others there cannot rename or delete
    our entries) or its group is its owner's private group (``_only_owner_may_write``).
    This is what "owner-safe ancestors" means for the burn registry and
    the run root: nobody else can swap a directory on the way.

    The refusal names the directory, says why (its mode in octal, owner and group) and
    the fix; ``path`` itself is called ``what`` (the caller's name for it, e.g. "runs
    root"), the directories above it "ancestor"."""
    absolute = os.path.abspath(os.fspath(path))
    current = "/"
    for part in [""] + [p for p in absolute.split("/") if p]:
        current = os.path.join(current, part) if part else "/"
        with _opened_dir(current) as fd:
            st = os.fstat(fd)
        label = what if current == absolute else "ancestor"
        mode = f"mode {stat.S_IMODE(st.st_mode):04o}, owner {_user_name(st.st_uid)}, " \
               f"group {_group_name(st.st_gid)}"
        if st.st_uid not in (0, os.geteuid()):
            raise RegistryError(
                Code.PATH_REFUSED,
                f"{label} owned by another user: {current} ({mode}); someone else could "
                "swap what efold writes below it; fix: use a directory of your own")
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX \
                and not _only_owner_may_write(st):
            raise RegistryError(
                Code.PATH_REFUSED,
                f"{label} writable by others: {current} ({mode}); someone else could swap "
                f"what efold writes below it{_UMASK_HINT if not st.st_mode & 0o002 else ''}; "
                f"fix: chmod g-w,o-w {current}")
