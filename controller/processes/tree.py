"""Tree limits for what a prep child leaves behind (reference "Offline preparation
feasibility"): regular files only, link count one, owner-only write, 64 MiB per file,
512 MiB in all. Walks with ``lstat`` (never follows a link) and classifies every entry
that breaks a rule; an empty classification is a clean tree. The root itself must be a
real directory (a symlink there is rejected, never walked), owned by this user and not
group/other-writable; every directory below is opened ``O_NOFOLLOW`` through its
parent's descriptor, so one swapped for a link after listing is rejected too."""

from __future__ import annotations

import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_TREE_BYTES = 512 * 1024 * 1024
# A snapshot tree is shallow; the bound keeps the descriptor walk's open directories few.
MAX_DEPTH = 32
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class TreeReport:
    files: int = 0
    bytes: int = 0
    largest: int = 0
    rejected: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.rejected


def _reject_shared(report: TreeReport, info: os.stat_result) -> None:
    """A directory or file others could change: group/other-writable, or not ours."""
    if info.st_mode & 0o022:
        report.rejected["group_or_other_writable"] += 1
    if info.st_uid != os.getuid():
        report.rejected["foreign_owner"] += 1


def _open_dir(name: str | Path, dir_fd: int | None) -> int:
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _open_failure(name: str | Path, dir_fd: int | None) -> str:
    """Why a directory did not open: a symlink (``O_NOFOLLOW`` answers ``ELOOP`` or,
    with ``O_DIRECTORY``, ``ENOTDIR``), or anything else."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return "unreadable_directory"
    return "symlink" if stat.S_ISLNK(info.st_mode) else "unreadable_directory"


def inspect_tree(root: Path, *, max_file: int = MAX_FILE_BYTES,
                 max_total: int = MAX_TREE_BYTES) -> TreeReport:
    report = TreeReport()
    try:
        root_fd = _open_dir(root, None)
    except OSError:
        report.rejected[_open_failure(root, None)] += 1
        return report
    _reject_shared(report, os.fstat(root_fd))
    # Depth first over descriptors: every directory is opened O_NOFOLLOW through its
    # parent's descriptor, so a directory swapped for a symlink after it was listed is
    # refused, never walked through.
    stack: list[tuple[int, list[os.DirEntry[str]], int]] = []
    try:
        stack.append((root_fd, _entries(report, root_fd), 0))
        while stack:
            directory, entries, depth = stack[-1]
            if not entries:
                stack.pop()
                os.close(directory)
                continue
            entry = entries.pop()
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:  # vanished or unreadable between listing and stat
                report.rejected["unreadable_entry"] += 1
                continue
            if stat.S_ISLNK(info.st_mode):
                report.rejected["symlink"] += 1
            elif stat.S_ISDIR(info.st_mode):
                _reject_shared(report, info)
                if depth + 1 > MAX_DEPTH:
                    report.rejected["tree_too_deep"] += 1
                    continue
                try:
                    child = _open_dir(entry.name, directory)
                except OSError:
                    report.rejected[_open_failure(entry.name, directory)] += 1
                    continue
                opened = os.fstat(child)
                if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
                    os.close(child)
                    report.rejected["replaced_entry"] += 1
                    continue
                stack.append((child, _entries(report, child), depth + 1))
            elif not stat.S_ISREG(info.st_mode):
                report.rejected["special_file"] += 1
            else:
                report.files += 1
                report.bytes += info.st_size
                report.largest = max(report.largest, info.st_size)
                if info.st_nlink != 1:
                    report.rejected["hard_link"] += 1
                _reject_shared(report, info)
                if info.st_size > max_file:
                    report.rejected["file_too_large"] += 1
    finally:
        for directory, _, _ in stack:
            os.close(directory)
    if report.bytes > max_total:
        report.rejected["tree_too_large"] += 1
    return report


def _entries(report: TreeReport, dir_fd: int) -> list[os.DirEntry[str]]:
    """The directory's entries, in reverse name order (popped from the end)."""
    try:
        with os.scandir(dir_fd) as listing:
            return sorted(listing, key=lambda e: e.name, reverse=True)
    except OSError:
        report.rejected["unreadable_directory"] += 1
        return []
