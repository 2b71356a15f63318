"""The embedded default store: one SQLite file, WAL, one transaction per batch, FTS5 for recall."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pydantic_ai_compaction.protocols.archive import ArchivedResult, ArchiveError, Hit, LogLine, Note
from pydantic_ai_compaction.runtime.stores._query import (
    ARCHIVED_COLUMNS,
    archived_from_row,
    archived_row,
    line_context,
    words,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (
    conversation_id TEXT NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, name)
);
CREATE TABLE IF NOT EXISTS archived (
    conversation_id TEXT NOT NULL, ref TEXT NOT NULL, result_id TEXT NOT NULL, tool_name TEXT NOT NULL,
    tool_call_id TEXT NOT NULL, args_json TEXT NOT NULL, payload BLOB NOT NULL, note TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (conversation_id, ref)
);
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id TEXT NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS indexed_parts (
    conversation_id TEXT NOT NULL, fingerprint TEXT NOT NULL, PRIMARY KEY (conversation_id, fingerprint)
);
CREATE VIRTUAL TABLE IF NOT EXISTS log USING fts5(
    text, context, conversation_id UNINDEXED, source UNINDEXED, tool_name UNINDEXED, args UNINDEXED,
    result_id UNINDEXED, line_no UNINDEXED, tokenize = 'unicode61'
);
"""


class SQLiteArchiveStore:
    """A store in one SQLite file, safe for several processes (WAL) and threads (one connection, a lock)."""

    def __init__(self, path: str | Path = 'compaction.sqlite3', *, busy_timeout_ms: int = 10_000) -> None:
        """Open (and create) the database.

        Args:
            path: Database file; `:memory:` for a private in-memory database.
            busy_timeout_ms: How long a writer waits for another process's transaction.
        """
        if busy_timeout_ms < 0:
            raise ValueError(f'busy_timeout_ms must not be negative, got {busy_timeout_ms!r}')
        self.path = str(path)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute(f'PRAGMA busy_timeout = {int(busy_timeout_ms)}')
        if self.path != ':memory:':
            self._db.execute('PRAGMA journal_mode = WAL')
        self._db.execute('PRAGMA synchronous = NORMAL')
        with self._transaction() as db:
            for statement in _SCHEMA.split(';'):
                if statement.strip():
                    db.execute(statement)

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    @contextmanager
    def _transaction(self) -> Generator[sqlite3.Connection, None, None]:
        with self._lock:
            try:
                self._db.execute('BEGIN IMMEDIATE')
            except sqlite3.Error as error:
                raise ArchiveError(f'SQLite archive unavailable: {error}') from error
            try:
                yield self._db
            except BaseException as error:
                self._db.execute('ROLLBACK')
                if isinstance(error, sqlite3.Error):
                    raise ArchiveError(f'SQLite archive operation failed, nothing was stored: {error}') from error
                raise
            else:
                self._db.execute('COMMIT')

    @contextmanager
    def _reading(self) -> Generator[sqlite3.Connection, None, None]:
        with self._lock:
            try:
                yield self._db
            except sqlite3.Error as error:
                raise ArchiveError(f'SQLite archive read failed: {error}') from error

    def next_numbers(self, conversation_id: str, counter: str, count: int) -> list[int]:
        """Reserve consecutive numbers in one transaction."""
        with self._transaction() as db:
            row = db.execute(
                'SELECT value FROM counters WHERE conversation_id = ? AND name = ?', (conversation_id, counter)
            ).fetchone()
            start = int(row[0]) if row else 0
            db.execute(
                'INSERT INTO counters (conversation_id, name, value) VALUES (?, ?, ?) '
                'ON CONFLICT (conversation_id, name) DO UPDATE SET value = excluded.value',
                (conversation_id, counter, start + count),
            )
        return list(range(start + 1, start + count + 1))

    def put_archived(self, entries: Sequence[ArchivedResult]) -> None:
        """One transaction for the whole batch."""
        with self._transaction() as db:
            db.executemany(
                f'INSERT INTO archived ({ARCHIVED_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
                [archived_row(entry) for entry in entries],
            )

    def get_archived(self, conversation_id: str, ref: str) -> ArchivedResult | None:
        """This conversation's entry only."""
        with self._reading():
            row = self._db.execute(
                f'SELECT {ARCHIVED_COLUMNS} FROM archived WHERE conversation_id = ? AND ref = ?',
                (conversation_id, ref),
            ).fetchone()
        return archived_from_row(row)

    def add_note(self, conversation_id: str, note: Note) -> None:
        """Append a note."""
        with self._transaction() as db:
            db.execute(
                'INSERT INTO notes (conversation_id, kind, text) VALUES (?, ?, ?)',
                (conversation_id, note.kind, note.text),
            )

    def notes(self, conversation_id: str) -> list[Note]:
        """Oldest first."""
        with self._reading():
            rows = self._db.execute(
                'SELECT kind, text FROM notes WHERE conversation_id = ? ORDER BY id', (conversation_id,)
            ).fetchall()
        return [Note(kind, text) for kind, text in rows]

    def indexed(self, conversation_id: str, fingerprints: Sequence[str]) -> set[str]:
        """Known fingerprints."""
        if not fingerprints:
            return set()
        with self._reading():
            known: set[str] = set()
            for start in range(0, len(fingerprints), 500):
                chunk = list(fingerprints[start : start + 500])
                marks = ','.join('?' * len(chunk))
                rows = self._db.execute(
                    f'SELECT fingerprint FROM indexed_parts WHERE conversation_id = ? AND fingerprint IN ({marks})',
                    (conversation_id, *chunk),
                ).fetchall()
                known.update(row[0] for row in rows)
        return known

    def index_lines(self, lines: Sequence[LogLine]) -> int:
        """Add lines of parts not indexed yet, in one transaction."""
        if not lines:
            return 0
        with self._transaction() as db:
            added = 0
            fresh: dict[tuple[str, str], bool] = {}
            for line in lines:
                key = (line.conversation_id, line.fingerprint)
                if key not in fresh:
                    cursor = db.execute(
                        'INSERT OR IGNORE INTO indexed_parts (conversation_id, fingerprint) VALUES (?, ?)', key
                    )
                    fresh[key] = cursor.rowcount == 1
                if fresh[key]:
                    db.execute(
                        'INSERT INTO log (text, context, conversation_id, source, tool_name, args, result_id, line_no) '
                        'VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
                        (
                            line.text, line_context(line), line.conversation_id,
                            line.source, line.tool_name, line.args, line.result_id, line.line_no,
                        ),
                    )  # fmt: skip
                    added += 1
        return added

    def search(self, conversation_id: str, query: str, limit: int = 8) -> list[Hit]:
        """FTS5 over the line and its call; every word, else any word; tool output first."""
        wanted = words(query)
        if not wanted:
            return []
        for joiner in (' AND ', ' OR '):
            match = joiner.join(f'"{word}"*' for word in wanted)
            with self._reading():
                rows = self._db.execute(
                    'SELECT text, source, tool_name, args, result_id, line_no, bm25(log) FROM log '
                    'WHERE log MATCH ? AND conversation_id = ? '
                    "ORDER BY source != 'tool', bm25(log), rowid DESC LIMIT ?",
                    (match, conversation_id, limit),
                ).fetchall()
            if rows:
                return [Hit(r[0], r[1], r[2], r[3], r[4], int(r[5]), -float(r[6])) for r in rows]
        return []
