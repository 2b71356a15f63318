"""A PostgreSQL store (psycopg 3) for many workers: the same tables, full-text search for recall."""

from __future__ import annotations

import threading
from collections.abc import Generator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from pydantic_ai_compaction.protocols.archive import ArchivedResult, ArchiveError, Hit, LogLine, Note
from pydantic_ai_compaction.runtime.stores._query import (
    ARCHIVED_COLUMNS,
    archived_from_row,
    archived_row,
    line_context,
    words,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pac_counters (
    conversation_id TEXT NOT NULL, name TEXT NOT NULL, value BIGINT NOT NULL,
    PRIMARY KEY (conversation_id, name)
);
CREATE TABLE IF NOT EXISTS pac_archived (
    conversation_id TEXT NOT NULL, ref TEXT NOT NULL, result_id TEXT NOT NULL, tool_name TEXT NOT NULL,
    tool_call_id TEXT NOT NULL, args_json TEXT NOT NULL, payload BYTEA NOT NULL, note TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (conversation_id, ref)
);
CREATE TABLE IF NOT EXISTS pac_notes (
    id BIGSERIAL PRIMARY KEY, conversation_id TEXT NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS pac_indexed_parts (
    conversation_id TEXT NOT NULL, fingerprint TEXT NOT NULL, PRIMARY KEY (conversation_id, fingerprint)
);
CREATE TABLE IF NOT EXISTS pac_log (
    id BIGSERIAL PRIMARY KEY, conversation_id TEXT NOT NULL, text TEXT NOT NULL, context TEXT NOT NULL,
    source TEXT NOT NULL, tool_name TEXT NOT NULL, args TEXT NOT NULL, result_id TEXT NOT NULL,
    line_no INTEGER NOT NULL, terms TEXT NOT NULL,
    tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', terms)) STORED
);
CREATE INDEX IF NOT EXISTS pac_log_tsv ON pac_log USING GIN (tsv);
CREATE INDEX IF NOT EXISTS pac_log_conversation ON pac_log (conversation_id);
"""


class PostgresArchiveStore:
    """Tables prefixed `pac_`; every write is one transaction; reads filter by conversation."""

    def __init__(self, dsn: str) -> None:
        """Connect and create the tables if needed.

        Args:
            dsn: A libpq connection string, e.g. `postgresql://user:pass@127.0.0.1/db`.
        """
        import psycopg

        self._psycopg = psycopg
        self._lock = threading.RLock()
        try:
            self._db: Any = psycopg.connect(dsn, autocommit=False)
        except psycopg.Error as error:
            raise ArchiveError(f'cannot connect to PostgreSQL: {error}') from error
        with self._lock, self._db.transaction():
            # Serialize schema creation across workers starting together.
            self._db.execute('SELECT pg_advisory_xact_lock(7415)')
            self._db.execute(_SCHEMA)
        self._db.commit()

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    def _write(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self._guard(), self._db.transaction():
            return self._db.execute(sql, params)

    @contextmanager
    def _guard(self) -> Generator[None, None, None]:
        """Hold the lock; turn any database error into `ArchiveError` and leave the connection usable."""
        with self._lock:
            try:
                yield
            except self._psycopg.Error as error:
                # If the connection itself is gone, the next call reports it again.
                with suppress(self._psycopg.Error):
                    self._db.rollback()
                raise ArchiveError(f'PostgreSQL archive operation failed, nothing was stored: {error}') from error
            else:
                self._db.commit()

    def next_numbers(self, conversation_id: str, counter: str, count: int) -> list[int]:
        """Reserve consecutive numbers atomically (row lock through the upsert)."""
        with self._guard(), self._db.transaction():
            row = self._db.execute(
                'INSERT INTO pac_counters (conversation_id, name, value) VALUES (%s, %s, %s) '
                'ON CONFLICT (conversation_id, name) DO UPDATE SET value = pac_counters.value + EXCLUDED.value '
                'RETURNING value',
                (conversation_id, counter, count),
            ).fetchone()
        end = int(row[0])
        return list(range(end - count + 1, end + 1))

    def put_archived(self, entries: Sequence[ArchivedResult]) -> None:
        """One transaction for the whole batch."""
        with self._guard(), self._db.transaction(), self._db.cursor() as cursor:
            cursor.executemany(
                f'INSERT INTO pac_archived ({ARCHIVED_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)',
                [archived_row(entry) for entry in entries],
            )

    def get_archived(self, conversation_id: str, ref: str) -> ArchivedResult | None:
        """This conversation's entry only."""
        with self._guard():
            row = self._db.execute(
                f'SELECT {ARCHIVED_COLUMNS} FROM pac_archived WHERE conversation_id = %s AND ref = %s',
                (conversation_id, ref.replace('\x00', '')),
            ).fetchone()
        return archived_from_row(row)

    def add_note(self, conversation_id: str, note: Note) -> None:
        """Append a note."""
        self._write(
            'INSERT INTO pac_notes (conversation_id, kind, text) VALUES (%s, %s, %s)',
            (conversation_id, note.kind, note.text.replace('\x00', '')),
        )

    def notes(self, conversation_id: str) -> list[Note]:
        """Oldest first."""
        with self._guard():
            rows = self._db.execute(
                'SELECT kind, text FROM pac_notes WHERE conversation_id = %s ORDER BY id', (conversation_id,)
            ).fetchall()
        return [Note(kind, text) for kind, text in rows]

    def indexed(self, conversation_id: str, fingerprints: Sequence[str]) -> set[str]:
        """Known fingerprints."""
        if not fingerprints:
            return set()
        with self._guard():
            rows = self._db.execute(
                'SELECT fingerprint FROM pac_indexed_parts WHERE conversation_id = %s AND fingerprint = ANY(%s)',
                (conversation_id, list(fingerprints)),
            ).fetchall()
        return {row[0] for row in rows}

    def index_lines(self, lines: Sequence[LogLine]) -> int:
        """Add lines of parts not indexed yet, in one transaction."""
        if not lines:
            return 0
        added = 0
        with self._guard(), self._db.transaction():
            fresh: dict[tuple[str, str], bool] = {}
            rows: list[tuple[Any, ...]] = []
            for line in lines:
                key = (line.conversation_id, line.fingerprint)
                if key not in fresh:
                    inserted = self._db.execute(
                        'INSERT INTO pac_indexed_parts (conversation_id, fingerprint) VALUES (%s, %s) '
                        'ON CONFLICT DO NOTHING RETURNING 1',
                        key,
                    ).fetchone()
                    fresh[key] = inserted is not None
                if fresh[key]:
                    # The search vector is built from the same words every store matches on, so an email,
                    # a path or a host name splits into words here exactly as in SQLite and in memory.
                    terms = ' '.join(words(f'{line.text} {line_context(line)}'))
                    rows.append(
                        (line.conversation_id, line.text, line_context(line),
                         line.source, line.tool_name, line.args, line.result_id, line.line_no, terms)
                    )  # fmt: skip
            if rows:
                with self._db.cursor() as cursor:
                    cursor.executemany(
                        'INSERT INTO pac_log (conversation_id, text, context, source, tool_name, args, result_id, '
                        'line_no, terms) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)',
                        rows,
                    )
            added = len(rows)
        return added

    def search(self, conversation_id: str, query: str, limit: int = 8) -> list[Hit]:
        """Full-text search over the line and its call; every word, else any word; tool output first."""
        wanted = words(query)
        if not wanted:
            return []
        for joiner in (' & ', ' | '):
            tsquery = joiner.join(f'{word}:*' for word in wanted)
            with self._guard():
                rows = self._db.execute(
                    "SELECT text, source, tool_name, args, result_id, line_no, ts_rank(tsv, to_tsquery('simple', %s)) "
                    "FROM pac_log WHERE conversation_id = %s AND tsv @@ to_tsquery('simple', %s) "
                    "ORDER BY source <> 'tool', 7 DESC, id DESC LIMIT %s",
                    (tsquery, conversation_id, tsquery, limit),
                ).fetchall()
            if rows:
                return [Hit(r[0], r[1], r[2], r[3], r[4], int(r[5]), float(r[6])) for r in rows]
        return []
