"""Tree limits for what a prep child leaves behind (reference "Offline preparation
feasibility"): regular files only, link count one, owner-only write, 64 MiB per file,
512 MiB in all. Walks with ``lstat`` (never follows a link) and classifies every entry
that breaks a rule; an empty classification is a clean tree."""

from __future__ import annotations

import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_TREE_BYTES = 512 * 1024 * 1024


@dataclass
class TreeReport:
    files: int = 0
    bytes: int = 0
    largest: int = 0
    rejected: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.rejected


def inspect_tree(root: Path, *, max_file: int = MAX_FILE_BYTES,
                 max_total: int = MAX_TREE_BYTES) -> TreeReport:
    report = TreeReport()
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            report.rejected["unreadable_directory"] += 1
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:  # vanished or unreadable between listing and stat
                report.rejected["unreadable_entry"] += 1
                continue
            if stat.S_ISLNK(info.st_mode):
                report.rejected["symlink"] += 1
            elif stat.S_ISDIR(info.st_mode):
                if info.st_mode & 0o022:
                    report.rejected["group_or_other_writable"] += 1
                stack.append(Path(entry.path))
            elif not stat.S_ISREG(info.st_mode):
                report.rejected["special_file"] += 1
            else:
                report.files += 1
                report.bytes += info.st_size
                report.largest = max(report.largest, info.st_size)
                if info.st_nlink != 1:
                    report.rejected["hard_link"] += 1
                if info.st_mode & 0o022:
                    report.rejected["group_or_other_writable"] += 1
                if info.st_uid != os.getuid():
                    report.rejected["foreign_owner"] += 1
                if info.st_size > max_file:
                    report.rejected["file_too_large"] += 1
    if report.bytes > max_total:
        report.rejected["tree_too_large"] += 1
    return report
