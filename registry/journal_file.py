"""The journal's file: its schema, and how it is created and opened.

Created complete or not at all (``_create_complete``); opened never through a link, only
when private and single-linked, and checked to be the same inode once SQLite has it
(``connect``); read without changing the run (``_reader_uri``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager

from efold.errors import Code
from efold.registry.errors import RegistryError

JOURNAL_NAME = "journal.sqlite"
# The journal while its schema is written (``_create_complete``); never read.
CREATING_NAME = JOURNAL_NAME + ".creating"
# 2: launches.marker; 3: launches.cgroup, assignments.isolation, the run's containment in
# meta; 4: receipts.body
SCHEMA_VERSION = 4
# Journals this build still reads (and reaps): a version-2 journal has no cgroup column
# and no containment in meta; it is a process-group run. Before version 4 a receipt's
# row has its digest only, so a copy lost in a crash cannot be restored.
READABLE_VERSIONS = frozenset({2, 3, SCHEMA_VERSION})

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
-- One row per controller epoch (a controller start on this run).
CREATE TABLE epochs (
    epoch INTEGER PRIMARY KEY, pid INTEGER NOT NULL, start_time INTEGER NOT NULL,
    boot_id TEXT NOT NULL, started_ns INTEGER NOT NULL
);
-- Every child started: identity journaled before its first message is accepted.
CREATE TABLE launches (
    launch_id INTEGER PRIMARY KEY AUTOINCREMENT, epoch INTEGER NOT NULL,
    slot TEXT NOT NULL, kind TEXT NOT NULL, pid INTEGER NOT NULL,
    start_time INTEGER NOT NULL, boot_id TEXT NOT NULL, pgid INTEGER NOT NULL,
    launched_ns INTEGER NOT NULL, exited_ns INTEGER, exit_status INTEGER,
    marker TEXT,  -- the launch's environment marker (controller/processes/marker.py)
    cgroup TEXT  -- the launch's cgroup (controller/processes/run_cgroups.py), None: process-group mode
);
-- Containment: one row per episode, its members persisted before the first signal.
CREATE TABLE containments (
    containment_id INTEGER PRIMARY KEY AUTOINCREMENT, launch_id INTEGER NOT NULL,
    cause TEXT NOT NULL, started_ns INTEGER NOT NULL, finished_ns INTEGER, result TEXT
);
CREATE TABLE members (
    member_id INTEGER PRIMARY KEY AUTOINCREMENT, containment_id INTEGER,
    launch_id INTEGER NOT NULL, pid INTEGER NOT NULL, start_time INTEGER NOT NULL,
    boot_id TEXT NOT NULL, pgid INTEGER NOT NULL, role TEXT NOT NULL,
    recorded_ns INTEGER NOT NULL
);
CREATE TABLE signals (
    signal_id INTEGER PRIMARY KEY AUTOINCREMENT, containment_id INTEGER,
    launch_id INTEGER NOT NULL, pid INTEGER NOT NULL, signal INTEGER NOT NULL,
    via TEXT NOT NULL, sent_ns INTEGER NOT NULL
);
-- Money: a hold exists from admission; consumption and settlement update it.
CREATE TABLE holds (
    permit_id TEXT PRIMARY KEY, epoch INTEGER NOT NULL, slot TEXT NOT NULL,
    request_id TEXT NOT NULL, round INTEGER NOT NULL, payload_digest TEXT NOT NULL,
    hold_units INTEGER NOT NULL, state TEXT NOT NULL, body_digest TEXT,
    outcome TEXT, code TEXT, settled_units INTEGER, partial_units INTEGER,
    usage TEXT, tier TEXT,
    admitted_ns INTEGER NOT NULL, consumed_ns INTEGER, settled_ns INTEGER
);
CREATE TABLE stops (
    stop_id INTEGER PRIMARY KEY AUTOINCREMENT, epoch INTEGER NOT NULL,
    code TEXT NOT NULL, slot TEXT, sticky INTEGER NOT NULL, recorded_ns INTEGER NOT NULL
);
-- Slot execution status as the controller saw it (visited slots only).
CREATE TABLE slot_status (
    slot TEXT PRIMARY KEY, status TEXT NOT NULL, code TEXT, updated_ns INTEGER NOT NULL
);
-- A receipt's bytes are journaled with their digest, so that a copy a crash kept from
-- being published can be restored (`reap`) exactly: nothing re-run, nothing invented.
CREATE TABLE receipts (
    slot TEXT PRIMARY KEY, digest TEXT NOT NULL, recorded_ns INTEGER NOT NULL,
    body BLOB
);
-- What each launch was given, before it starts: a checkpoint's verified snapshot digest,
-- a probe slot's cache key (unique across the run) and the snapshot it restores.
CREATE TABLE assignments (
    slot TEXT PRIMARY KEY, kind TEXT NOT NULL, cache_key TEXT UNIQUE,
    snapshot_digest TEXT NOT NULL, recorded_ns INTEGER NOT NULL,
    isolation TEXT  -- a checkpoint's: how its fold ran isolated (JSON), as its child said
);
"""


def _schema_statements() -> list[str]:
    # Comments are dropped first: a ';' inside one must not split a statement.
    # (executescript would COMMIT outside our transaction.)
    lines = [line for line in _SCHEMA.splitlines() if not line.lstrip().startswith("--")]
    return [stmt.strip() for stmt in "\n".join(lines).split(";") if stmt.strip()]


def journal_path(run_dir: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(run_dir), JOURNAL_NAME)


def _refuse_unsafe(st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise RegistryError(Code.JOURNAL_INVALID, "journal is not a regular file")
    if st.st_nlink != 1:
        raise RegistryError(Code.JOURNAL_INVALID, "journal has another hard link")
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise RegistryError(Code.JOURNAL_INVALID, "journal is not owner-only")


def _open_journal_file(run_dir: str | os.PathLike[str], *, create: bool) -> int:
    """Check (or create complete and 0600: ``_create_complete``) ``journal.sqlite``
    without following a link anywhere in its path: its inode. A symlink, a hard link,
    another owner or a group/other-writable file refuses (``path_refused`` for a linked
    directory, ``journal_invalid`` for the file). SQLite then opens the path; the caller checks the
    inode again once connected, so a swap in between is refused too."""
    from efold.registry.files import open_dir_nofollow

    dir_fd = open_dir_nofollow(run_dir)
    try:
        try:
            st = os.stat(JOURNAL_NAME, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            if not create:
                raise RegistryError(Code.JOURNAL_INVALID, "journal does not exist") from None
            for suffix in ("-wal", "-shm", "-journal"):
                try:
                    os.stat(JOURNAL_NAME + suffix, dir_fd=dir_fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                raise RegistryError(Code.JOURNAL_INVALID, f"a stray {suffix} file exists") from None
            return _create_complete(run_dir, dir_fd)
        _refuse_unsafe(st)
        return st.st_ino
    finally:
        os.close(dir_fd)


def _create_complete(run_dir: str | os.PathLike[str], dir_fd: int) -> int:
    """Create the journal complete or not at all; its inode. It is turned to WAL mode,
    its schema written, committed and synced under ``CREATING_NAME`` (closed, SQLite
    leaves nothing beside it), then renamed to ``JOURNAL_NAME``, which was just found
    absent, and the directory synced. Created in place, a controller killed before its
    schema's first commit left an empty ``journal.sqlite``, and one killed while it
    turned the file to WAL mode a hot rollback journal that no read-only reader can
    replay: every later ``recover`` and ``reap`` refused either (``journal_invalid``).
    Now such a kill leaves no journal at all, as one before the creation does: the run
    recorded and launched nothing."""
    flags = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_WRONLY | os.O_CLOEXEC
    try:
        fd = os.open(CREATING_NAME, flags, 0o600, dir_fd=dir_fd)
    except FileExistsError:
        raise RegistryError(Code.JOURNAL_INVALID,
                            f"a stray {CREATING_NAME} exists (a journal's creation was "
                            "cut short there)") from None
    try:
        try:
            os.fchmod(fd, 0o600)
            inode = os.fstat(fd).st_ino
            path = os.path.join(os.fspath(run_dir), CREATING_NAME)
            conn = sqlite3.connect(path, isolation_level=None)
            try:
                _same_file(path, inode)  # SQLite opened the file we made, not a swap
                if str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower() != "wal":
                    raise RegistryError(Code.JOURNAL_INVALID, "journal is not in WAL mode")
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute("BEGIN IMMEDIATE")
                for stmt in _schema_statements():
                    conn.execute(stmt)
                conn.execute("INSERT INTO meta VALUES ('schema_version', ?)",
                             (str(SCHEMA_VERSION),))
                conn.execute("COMMIT")
            finally:
                conn.close()
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(CREATING_NAME, JOURNAL_NAME, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except sqlite3.Error as exc:
        raise RegistryError(Code.JOURNAL_WRITE_FAILED, str(exc)) from exc
    finally:
        with contextlib.suppress(FileNotFoundError):  # renamed: nothing left by that name
            os.unlink(CREATING_NAME, dir_fd=dir_fd)
    os.fsync(dir_fd)
    return inode


def _same_file(path: str, inode: int) -> None:
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise RegistryError(Code.JOURNAL_INVALID, "journal vanished") from exc
    if st.st_ino != inode:
        raise RegistryError(Code.JOURNAL_INVALID, "journal replaced while opening")
    _refuse_unsafe(st)


@contextmanager
def closed_on_error(conn: sqlite3.Connection) -> Iterator[None]:
    """Close ``conn`` if the block raises; an SQLite error is ``JOURNAL_INVALID``."""
    try:
        yield
    except sqlite3.Error as exc:
        conn.close()
        raise RegistryError(Code.JOURNAL_INVALID, str(exc)) from exc
    except BaseException:
        conn.close()
        raise


def _reader_uri(path: str) -> str:
    """The URI a reader opens ``path`` with. A reader must leave the run as it found it.

    * No ``-wal`` (and no rollback ``-journal``) beside the journal: no connection is
      open (a live WAL connection always keeps its ``-wal``) and everything is in the
      main file. Open ``mode=ro&immutable=1``: nothing to replay, no locks, no files
      created. Plain ``mode=ro`` would not do: on a WAL database SQLite creates
      ``journal.sqlite-wal`` *and* ``-shm`` even for a read-only connection and leaves
      both behind after close (checked with SQLite 3.40: a clean run's directory gains
      two files from a single read).
    * A ``-wal`` exists: a controller is live, or died before its last checkpoint. Open
      ``mode=ro``: the committed rows still in the WAL must be read (``immutable`` ignores
      the WAL and would report the run as of its last checkpoint, missing them). Its
      ``-shm`` already exists beside it, or SQLite recreates it (it needs the wal-index
      to read the WAL); the WAL itself is never checkpointed or removed by a reader.

    A writer that opens between this check and the read cannot be seen by an immutable
    reader; a reader on a run with no live controller (``recover``, ``aggregate``, tests
    after the fact) is a snapshot anyway, and readers during a run (workers) always find
    the live controller's ``-wal`` and read through the WAL.
    """
    uri = "file:" + urllib.parse.quote(path)  # a '?', '#' or '%' in the path stays a path
    if any(os.path.lexists(path + suffix) for suffix in ("-wal", "-journal")):
        return uri + "?mode=ro"
    return uri + "?mode=ro&immutable=1"


def connect(run_dir: str | os.PathLike[str], *, writer: bool) -> sqlite3.Connection:
    """Connect to the checked journal file (the writer creates it when absent, the
    reader opens it read-only, see ``_reader_uri``) and check the inode again once
    connected."""
    path = journal_path(run_dir)
    inode = _open_journal_file(run_dir, create=writer)
    try:
        if writer:
            conn = sqlite3.connect(path, isolation_level=None)
        else:
            conn = sqlite3.connect(_reader_uri(path), uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise RegistryError(Code.JOURNAL_INVALID, str(exc)) from exc
    with closed_on_error(conn):
        _same_file(path, inode)
        conn.row_factory = sqlite3.Row
    return conn
