"""The history store: retained records in SQLite with an FTS5 index.

A store is built once in memory in the prep child (``HistoryStore.build``), serialized
to one file inside the checkpoint snapshot (``to_bytes``), and restored read-only in the
probe child from the snapshot's verified bytes (``HistoryStore.from_bytes``), so a probe
can neither read unverified bytes nor change the file the snapshot digest covers.
Records keep their trace event ids.

This module is the unmetered engine. The reader only ever reaches it through
``lookup.LookupTool``, which validates arguments and cursors and charges the meter.

Search semantics: the query is split on whitespace; each piece becomes an FTS5 phrase
(so ``ACC-7F3K-219`` matches the three tokens in order); pieces are OR-ed and ranked by
bm25, newer records first on ties. Pages are slices of a record's UTF-8 text of at most
``PAGE_BYTES`` bytes, cut on character boundaries.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import msgspec

from efold.errors import Code
from efold.folds.checkpoint import HistoryRecord, RetainedStore
from efold.folds.errors import FoldError

STORE_SCHEMA_VERSION = "2"
PAGE_BYTES = 8 * 1024
MAX_QUERY_TERMS = 32
SNIPPET_TOKENS = 24

_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE records(
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    kind TEXT NOT NULL,
    session INTEGER NOT NULL,
    day INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    pages INTEGER NOT NULL,
    text TEXT NOT NULL
);
CREATE VIRTUAL TABLE records_fts USING fts5(
    text, content='records', content_rowid='seq', tokenize='unicode61'
);
"""

_TERM = re.compile(r"[^\s\"]+")
_HAS_WORD = re.compile(r"\w")


class SearchHit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: str
    kind: str
    session: int
    day: int
    bytes: int
    pages: int
    snippet: str


def split_pages(text: str, page_bytes: int = PAGE_BYTES) -> list[str]:
    """Slices of ``text`` of at most ``page_bytes`` UTF-8 bytes, cut between characters.
    An empty text is one empty page."""
    data = text.encode("utf-8")
    if not data:
        return [""]
    pages: list[str] = []
    start = 0
    while start < len(data):
        end = min(start + page_bytes, len(data))
        # Back off to a character boundary: never split a multi-byte sequence.
        while end < len(data) and (data[end] & 0xC0) == 0x80:
            end -= 1
        pages.append(data[start:end].decode("utf-8"))
        start = end
    return pages


def page_count(text: str) -> int:
    return len(split_pages(text))


def records_digest(records: Sequence[HistoryRecord]) -> str:
    """sha256 of the canonical (msgspec JSON) encoding of the record list."""
    return hashlib.sha256(msgspec.json.encode(list(records))).hexdigest()


def fts_query(query: str) -> str:
    """The FTS5 expression for a free-text query (see the module docstring)."""
    terms = [t for t in _TERM.findall(query) if _HAS_WORD.search(t)][:MAX_QUERY_TERMS]
    if not terms:
        raise FoldError(Code.HISTORY_QUERY_INVALID, "the query has no searchable term")
    return " OR ".join(f'"{t}"' for t in terms)


class HistoryStore:
    """A retained store, open for reading. Not thread-safe: one per probe."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._db = connection
        self._check_schema()

    # -- construction ------------------------------------------------------------------

    @classmethod
    def build(cls, retained: RetainedStore) -> HistoryStore:
        """An in-memory store holding ``retained``'s records, indexed."""
        db = sqlite3.connect(":memory:")
        db.execute("PRAGMA page_size=4096")
        db.executescript(_SCHEMA)
        db.executemany(
            "INSERT INTO records(seq, id, role, kind, session, day, bytes, pages, text)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    r.seq, r.id, r.role, r.kind, r.session, r.day,
                    len(r.text.encode("utf-8")), page_count(r.text), r.text,
                )
                for r in retained.records
            ],
        )
        db.execute("INSERT INTO records_fts(rowid, text) SELECT seq, text FROM records")
        db.executemany(
            "INSERT INTO meta(key, value) VALUES (?, ?)",
            [
                ("schema", STORE_SCHEMA_VERSION),
                ("omitted_credential", str(retained.omitted_credential)),
                ("records_digest", records_digest(retained.records)),
            ],
        )
        db.commit()
        return cls(db)

    @classmethod
    def from_bytes(cls, image: bytes) -> HistoryStore:
        """A read-only store restored from a database image (the verified bytes of a
        snapshot's store file): nothing can swap the file after verification, and
        nothing is ever written next to it."""
        db = sqlite3.connect(":memory:")
        try:
            db.deserialize(image)
            db.execute("PRAGMA query_only = 1")
        except sqlite3.Error as exc:
            db.close()
            raise FoldError(Code.HISTORY_STORE_INVALID, "not a database image") from exc
        try:
            return cls(db)
        except FoldError:
            db.close()
            raise

    def to_bytes(self) -> bytes:
        """The database image (what the snapshot writes as its store file)."""
        return self._db.serialize()

    def close(self) -> None:
        self._db.close()

    def _check_schema(self) -> None:
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        except sqlite3.Error as exc:
            raise FoldError(Code.HISTORY_STORE_INVALID, "not a history store") from exc
        if row is None or row[0] != STORE_SCHEMA_VERSION:
            raise FoldError(Code.HISTORY_STORE_INVALID, "unknown history store schema")

    @contextmanager
    def _mapped(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise FoldError(Code.HISTORY_STORE_INVALID, "history store query failed") from exc

    # -- reading -----------------------------------------------------------------------

    def retained(self) -> RetainedStore:
        """Every record and the omission count, as built (restores a Checkpoint)."""
        with self._mapped():
            rows = self._db.execute(
                "SELECT id, seq, role, kind, session, day, text FROM records ORDER BY seq"
            ).fetchall()
            omitted = self._db.execute(
                "SELECT value FROM meta WHERE key = 'omitted_credential'"
            ).fetchone()
        records = [
            HistoryRecord(id=i, seq=s, role=r, kind=k, session=se, day=d, text=t)
            for (i, s, r, k, se, d, t) in rows
        ]
        return RetainedStore(records=records, omitted_credential=int(omitted[0]))

    def meta(self, key: str) -> str | None:
        with self._mapped():
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def search(self, query: str, *, limit: int, offset: int) -> tuple[list[SearchHit], bool]:
        """One page of hits and whether more follow."""
        expression = fts_query(query)
        with self._mapped():
            # Rank first, then compute snippets for the page only: snippet() tokenizes a
            # whole record, and SQLite would otherwise run it for every match.
            rows = self._db.execute(
                "SELECT r.id, r.kind, r.session, r.day, r.bytes, r.pages,"
                f" snippet(records_fts, 0, '', '', ' … ', {SNIPPET_TOKENS})"
                " FROM records_fts JOIN records r ON r.seq = records_fts.rowid"
                " WHERE records_fts MATCH ?1 AND records_fts.rowid IN ("
                "   SELECT rowid FROM records_fts WHERE records_fts MATCH ?1"
                "   ORDER BY bm25(records_fts), rowid DESC LIMIT ?2 OFFSET ?3)"
                " ORDER BY bm25(records_fts), r.seq DESC",
                (expression, limit + 1, offset),
            ).fetchall()
        hits = [
            SearchHit(id=i, kind=k, session=s, day=d, bytes=b, pages=p, snippet=snip)
            for (i, k, s, d, b, p, snip) in rows[:limit]
        ]
        return hits, len(rows) > limit

    def record(self, record_id: str) -> HistoryRecord | None:
        with self._mapped():
            row = self._db.execute(
                "SELECT id, seq, role, kind, session, day, text FROM records WHERE id = ?",
                (record_id,),
            ).fetchone()
        if row is None:
            return None
        i, s, r, k, se, d, t = row
        return HistoryRecord(id=i, seq=s, role=r, kind=k, session=se, day=d, text=t)

    def count(self) -> int:
        with self._mapped():
            (n,) = self._db.execute("SELECT count(*) FROM records").fetchone()
        return int(n)
