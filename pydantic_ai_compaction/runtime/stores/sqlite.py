"""The embedded default store: one SQLite file, WAL, one transaction per batch, FTS5 for recall.

A database that cannot be used (a missing directory, a full disk, a read-only, locked or corrupt file)
never raises anything but `ArchiveError`, naming the operation and the file; the connection is opened
on first use and opened again after an error that may have broken it, so the store resumes by itself
once the condition clears.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import sqlite3
import threading
from collections.abc import Generator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from pydantic_ai_compaction.protocols.archive import ArchivedResult, ArchiveError, Hit, LogLine, Note
from pydantic_ai_compaction.runtime.checks import ConfigurationError, check_int
from pydantic_ai_compaction.runtime.degraded import warn_degraded
from pydantic_ai_compaction.runtime.stores._query import (
    ARCHIVED_COLUMNS,
    MAX_BUSY_TIMEOUT_MS,
    SEARCH_CANDIDATES,
    WordPattern,
    archived_from_row,
    archived_row,
    db_text,
    index_text,
    line_context,
    line_score,
    py_text,
    query_words,
    rank_any_word,
    unspaced_words,
    word_pattern,
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
    text, context, owner, conversation_id UNINDEXED, source UNINDEXED, tool_name UNINDEXED, args UNINDEXED,
    result_id UNINDEXED, line_no UNINDEXED, tokenize = 'unicode61'
);
"""

SCHEMA_VERSION = 1
"""`PRAGMA user_version` of the current schema. 0: the log had no `owner` column (recall read every match's
row to test its conversation); 1: each line carries its conversation's token (`owner_token`), matched in the
full-text query itself. An older file is migrated when it is opened, in one transaction."""

_MIGRATE_TO_1 = (
    """CREATE VIRTUAL TABLE log_v1 USING fts5(
    text, context, owner, conversation_id UNINDEXED, source UNINDEXED, tool_name UNINDEXED, args UNINDEXED,
    result_id UNINDEXED, line_no UNINDEXED, tokenize = 'unicode61'
)""",
    'INSERT INTO log_v1 (rowid, text, context, owner, conversation_id, source, tool_name, args, result_id, line_no) '
    'SELECT rowid, text, context, pac_owner(conversation_id), conversation_id, source, tool_name, args, result_id, '
    'line_no FROM log',
    'DROP TABLE log',
    'ALTER TABLE log_v1 RENAME TO log',
)
"""Version 0 to 1: the log rebuilt with the `owner` column (FTS5 tables cannot gain a column), rowids kept."""


def owner_token(conversation_id: str) -> str:
    """The one word of the `owner` column: a conversation's key as a full-text token (a hash, never a query word).

    Recall matches it in the same FTS5 query as the words, so only this conversation's lines are read; the
    key itself is still compared on every hit, so even two keys with the same token never share lines.
    """
    digest = hashlib.blake2b(conversation_id.encode('utf-8', 'surrogatepass'), digest_size=10).hexdigest()
    return f'o{digest}'


_TABLES = {'counters', 'archived', 'notes', 'indexed_parts', 'log'}

_REOPEN_AFTER = ('SQLITE_IOERR', 'SQLITE_CORRUPT', 'SQLITE_NOTADB', 'SQLITE_CANTOPEN', 'SQLITE_READONLY_DBMOVED')
"""Errors after which the connection itself may be unusable: open a fresh one for the next operation."""


def _resolved(path: str) -> tuple[str, str | None]:
    """What to open for *path* (a path or a `file:` URI), relative to the current directory made absolute, and the
    file it is (`None` for an in-memory database)."""
    if path == ':memory:':
        return path, None
    if not path.startswith('file:'):
        absolute = _absolute(path)
        return absolute, absolute
    parts = urlsplit(path)
    if 'memory' in parse_qs(parts.query).get('mode', []) or parts.path in ('', ':memory:'):
        return path, None
    file = unquote(parts.path)
    absolute = _absolute(file)
    if absolute == file:
        return path, file
    query = f'?{parts.query}' if parts.query else ''
    fragment = f'#{parts.fragment}' if parts.fragment else ''
    return f'file:{quote(absolute)}{query}{fragment}', absolute


def _absolute(path: str) -> str:
    """*path*, if relative, from the current directory: its directory resolved as the system resolves it (a link
    followed by `..` leads where the link points, not back), the file's own name kept. As given when the current
    directory is gone: opening it then fails, and the operations say so."""
    if os.path.isabs(path):
        return path
    directory, name = os.path.split(path)
    try:
        return os.path.join(os.path.realpath(directory or os.curdir), name)
    except OSError:
        return path


def _identity(path: str | None) -> tuple[int, int] | None:
    """The (device, inode) of the file at *path*; `None` when there is none (in memory, or no longer there)."""
    if path is None:
        return None
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


_STORE_ERRORS = (sqlite3.Error, ValueError, OverflowError)
"""What the driver raises for the database or for a value it cannot bind."""


class SQLiteArchiveStore:
    """A store in one SQLite file, safe for several processes (WAL) and threads (one connection, a lock)."""

    def __init__(self, path: str | Path = 'compaction.sqlite3', *, busy_timeout_ms: int = 10_000) -> None:
        """Open (and create) the database, now if possible, else on the first operation that can.

        Args:
            path: Database file; `:memory:` for a private in-memory database; a `file:` URI for open
                flags (`file:agent.sqlite3?mode=ro` opens it read-only).
            busy_timeout_ms: Longest an operation waits for another connection's transaction to end, in
                milliseconds; 0 does not wait (an operation that finds the file locked fails at once).
        """
        self.busy_timeout_ms = check_int(
            'SQLiteArchiveStore', 'busy_timeout_ms', busy_timeout_ms, minimum=0, maximum=MAX_BUSY_TIMEOUT_MS
        )
        if not isinstance(path, str | Path) or not str(path):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(f'SQLiteArchiveStore.path must be a non-empty path, got {path!r}.')
        self.path = str(path)
        """The database file (or URI) errors name."""
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._target, self._file_path = _resolved(self.path)
        """What `sqlite3.connect` opens: the path (or URI) made absolute now, so a process that changes directory
        keeps its database; and the file it is, `None` for an in-memory database."""
        self._file: tuple[int, int] | None = None
        """The open file's identity (device, inode), to tell when it is removed or replaced while open."""
        self._version = SCHEMA_VERSION
        """The open file's schema version: an old file that could not be migrated (read-only) is read as it is."""
        # A database that cannot be opened yet is reported by the operations, as every other error is.
        with suppress(ArchiveError):
            self._connection('open')

    def close(self) -> None:
        """Close the connection (an operation afterwards opens it again)."""
        with self._lock:
            if self._db is not None:
                with suppress(sqlite3.Error):
                    self._db.close()
                self._db = None

    def _error(self, operation: str, error: BaseException) -> ArchiveError:
        return ArchiveError(
            f'SQLite archive: {operation} failed on {self.path}: {error}', operation=operation, target=self.path
        )

    def _connection(self, operation: str) -> sqlite3.Connection:
        if self._db is not None:
            if self._file is None or self._file == _identity(self._file_path):
                return self._db
            # Removed or replaced since it was opened: the connection still writes to the unlinked file, which
            # no other connection will ever read, so every write would be lost while reported done.
            self.close()
            warn_degraded(
                f'SQLite archive: {self.path} was removed or replaced while open; it is opened again '
                '(entries written before are in the removed file)'
            )
        if self._file_path is not None and not os.path.isabs(self._file_path):
            # Built while the current directory was gone: resolved once it is back, then kept whatever `chdir` follows.
            self._target, self._file_path = _resolved(self.path)
        uri = self.path.startswith('file:')
        try:
            db = sqlite3.connect(self._target, isolation_level=None, check_same_thread=False, uri=uri)
        except _STORE_ERRORS as error:
            raise self._error(operation, error) from error
        try:
            db.execute(f'PRAGMA busy_timeout = {self.busy_timeout_ms}')
            if self.path != ':memory:':
                # Read-only databases keep the journal mode they have; anything else wrong shows below.
                with suppress(sqlite3.Error):
                    db.execute('PRAGMA journal_mode = WAL')
            db.execute('PRAGMA synchronous = NORMAL')
            db.create_function('pac_owner', 1, owner_token, deterministic=True)
            self._version = self._prepare(db)
        except _STORE_ERRORS as error:
            with suppress(sqlite3.Error):
                db.close()
            raise self._error(operation, error) from error
        self._db = db
        self._file = _identity(self._file_path)
        return db

    @staticmethod
    def _prepare(db: sqlite3.Connection) -> int:
        """Create the tables of a new file, migrate an old one; the schema version the file has afterwards."""
        version = int(db.execute('PRAGMA user_version').fetchone()[0])
        present = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if _TABLES.issubset(present) and version >= SCHEMA_VERSION:
            return version
        try:
            db.execute('BEGIN IMMEDIATE')
            try:
                # Again inside the transaction: another process may have created or migrated the file meanwhile.
                version = int(db.execute('PRAGMA user_version').fetchone()[0])
                present = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if 'log' not in present:
                    version = SCHEMA_VERSION  # a new file: created at the current version
                for statement in _SCHEMA.split(';'):
                    if statement.strip():
                        db.execute(statement)
                if version < 1:
                    for statement in _MIGRATE_TO_1:
                        db.execute(statement)
                db.execute(f'PRAGMA user_version = {SCHEMA_VERSION}')
                db.execute('COMMIT')
            except BaseException:
                with suppress(sqlite3.Error):
                    db.execute('ROLLBACK')
                raise
        except sqlite3.Error as error:
            if _TABLES.issubset(present) and (getattr(error, 'sqlite_errorname', '') or '').startswith(
                'SQLITE_READONLY'
            ):
                return version  # an old file opened read-only: read as it is
            raise
        return SCHEMA_VERSION

    def _failed(self, operation: str, error: BaseException) -> ArchiveError:
        """The error to raise; drop a connection the error may have broken (never a private in-memory one)."""
        name = getattr(error, 'sqlite_errorname', '') or ''
        if self.path != ':memory:' and name.startswith(_REOPEN_AFTER):
            self.close()
        return self._error(operation, error)

    @contextmanager
    def _transaction(self, operation: str) -> Generator[sqlite3.Connection, None, None]:
        """One immediate transaction: committed when the block ends, rolled back on any error."""
        with self._lock:
            db = self._connection(operation)
            try:
                db.execute('BEGIN IMMEDIATE')
            except _STORE_ERRORS as error:
                raise self._failed(operation, error) from error
            try:
                yield db
                db.execute('COMMIT')
            except BaseException as error:
                with suppress(sqlite3.Error):
                    db.execute('ROLLBACK')
                if isinstance(error, _STORE_ERRORS):
                    raise self._failed(operation, error) from error
                raise

    @contextmanager
    def _reading(self, operation: str) -> Generator[sqlite3.Connection, None, None]:
        with self._lock:
            db = self._connection(operation)
            try:
                yield db
            except _STORE_ERRORS as error:
                raise self._failed(operation, error) from error

    def next_numbers(self, conversation_id: str, counter: str, count: int) -> list[int]:
        """Reserve consecutive numbers in one transaction."""
        key = (db_text(conversation_id), db_text(counter))
        with self._transaction('next_numbers') as db:
            row = db.execute('SELECT value FROM counters WHERE conversation_id = ? AND name = ?', key).fetchone()
            start = int(row[0]) if row else 0
            db.execute(
                'INSERT INTO counters (conversation_id, name, value) VALUES (?, ?, ?) '
                'ON CONFLICT (conversation_id, name) DO UPDATE SET value = excluded.value',
                (*key, start + count),
            )
        return list(range(start + 1, start + count + 1))

    def put_archived(self, entries: Sequence[ArchivedResult]) -> None:
        """One transaction for the whole batch."""
        with self._transaction('put_archived') as db:
            db.executemany(
                f'INSERT INTO archived ({ARCHIVED_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
                [archived_row(entry) for entry in entries],
            )

    def get_archived(self, conversation_id: str, ref: str) -> ArchivedResult | None:
        """This conversation's entry only."""
        with self._reading('get_archived') as db:
            row = db.execute(
                f'SELECT {ARCHIVED_COLUMNS} FROM archived WHERE conversation_id = ? AND ref = ?',
                (db_text(conversation_id), db_text(ref)),
            ).fetchone()
        return archived_from_row(row)

    def add_note(self, conversation_id: str, note: Note) -> None:
        """Append a note."""
        with self._transaction('add_note') as db:
            db.execute(
                'INSERT INTO notes (conversation_id, kind, text) VALUES (?, ?, ?)',
                (db_text(conversation_id), db_text(note.kind), db_text(note.text)),
            )

    def notes(self, conversation_id: str) -> list[Note]:
        """Oldest first."""
        with self._reading('notes') as db:
            rows = db.execute(
                'SELECT kind, text FROM notes WHERE conversation_id = ? ORDER BY id', (db_text(conversation_id),)
            ).fetchall()
        return [Note(py_text(kind), py_text(text)) for kind, text in rows]  # pyright: ignore[reportArgumentType]

    def indexed(self, conversation_id: str, fingerprints: Sequence[str]) -> set[str]:
        """Known fingerprints."""
        if not fingerprints:
            return set()
        known: set[str] = set()
        with self._reading('indexed') as db:
            for start in range(0, len(fingerprints), 500):
                chunk = [db_text(fingerprint) for fingerprint in fingerprints[start : start + 500]]
                marks = ','.join('?' * len(chunk))
                rows = db.execute(
                    f'SELECT fingerprint FROM indexed_parts WHERE conversation_id = ? AND fingerprint IN ({marks})',
                    (db_text(conversation_id), *chunk),
                ).fetchall()
                known.update(py_text(row[0]) for row in rows)
        return known

    def index_lines(self, lines: Sequence[LogLine]) -> int:
        """Add lines of parts not indexed yet, in one transaction."""
        if not lines:
            return 0
        with self._transaction('index_lines') as db:
            added = 0
            fresh: dict[tuple[str, str], bool] = {}
            owners: dict[str, str] = {}
            for line in lines:
                key = (db_text(line.conversation_id), db_text(line.fingerprint))
                if key not in fresh:
                    cursor = db.execute(
                        'INSERT OR IGNORE INTO indexed_parts (conversation_id, fingerprint) VALUES (?, ?)', key
                    )
                    fresh[key] = cursor.rowcount == 1
                if fresh[key]:
                    text, context = index_text(line.text), line_context(line)
                    # unicode61 reads a run of Chinese or Japanese as one word: the pairs the other stores find
                    # in it go beside the call, where a search matches too (`unspaced`).
                    extra = '' if text.isascii() and context.isascii() else unspaced_words(f'{text} {context}')
                    values = (
                        text, f'{context} {extra}' if extra else context, key[0], line.source,
                        index_text(line.tool_name), index_text(line.args), index_text(line.result_id), line.line_no,
                    )  # fmt: skip
                    if self._version >= 1:
                        db.execute(
                            'INSERT INTO log (owner, text, context, conversation_id, source, tool_name, args, '
                            'result_id, line_no) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
                            (owners.get(key[0]) or owners.setdefault(key[0], owner_token(key[0])), *values),
                        )
                    else:
                        db.execute(
                            'INSERT INTO log (text, context, conversation_id, source, tool_name, args, result_id, '
                            'line_no) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
                            values,
                        )
                    added += 1
        return added

    def search(self, conversation_id: str, query: str, limit: int = 8) -> list[Hit]:
        """FTS5 over the line and its call; every word, else any word; whole words before prefixes; tool output first.

        Lines holding every word: the newest `SEARCH_CANDIDATES` of them, ranked by `line_score` (as the
        in-memory store ranks). Else each word's newest `SEARCH_CANDIDATES` matches, ranked together by
        `rank_any_word` (so a rare word's line is not lost behind the matches of a common one). Ranking every
        match of a word that half the log holds took seconds over a 10M-token log.
        """
        wanted = query_words(query)
        if not wanted:
            return []
        # A whole-word match first: a prefix query expands to every word it starts, which is slow on a
        # large log and a weaker hit; the prefix query runs only when whole words find nothing.
        hits = self._best(conversation_id, wanted, True, limit)
        if hits is not None:
            return hits
        # A word no line of the conversation starts matches nothing, whole or as a prefix: one statement
        # says which words some line holds, so a query of words nothing holds costs two statements, not ten
        # (one word: its prefix query is that statement).
        present = self._present(conversation_id, wanted) if len(wanted) > 1 else [True]
        if all(present):
            hits = self._best(conversation_id, wanted, False, limit)
            if hits is not None:
                return hits
        if len(wanted) == 1 or not any(present):
            return []  # "any word" of one word is "every word": nothing more to find
        for prefix in ('', '*'):
            per_word = [
                self._candidates(conversation_id, f'"{word}"{prefix}', [word_pattern(word, not prefix)]) if held else []
                for word, held in zip(wanted, present, strict=True)
            ]
            if any(per_word):
                return rank_any_word(per_word, limit)
        return []

    def _owned(self, conversation_id: str, match: str) -> str:
        """*match* narrowed to the conversation's lines by its token (a version 1 file)."""
        if self._version >= 1:
            return f'owner : "{owner_token(db_text(conversation_id))}" AND {{text context}} : ({match})'
        return match

    def _present(self, conversation_id: str, wanted: Sequence[str]) -> list[bool]:
        """For each word, whether a line of the conversation (or its call) holds a word it starts."""
        key = db_text(conversation_id)
        exists = 'EXISTS (SELECT 1 FROM log WHERE log MATCH ? AND conversation_id = ?)'
        with self._reading('search') as db:
            row = db.execute(
                'SELECT ' + ', '.join([exists] * len(wanted)),
                [value for word in wanted for value in (self._owned(conversation_id, f'"{word}"*'), key)],
            ).fetchone()
        return [bool(value) for value in row]

    def _best(self, conversation_id: str, wanted: Sequence[str], whole: bool, limit: int) -> list[Hit] | None:
        """The best *limit* of the newest `SEARCH_CANDIDATES` lines holding every word, ranked by `line_score`;
        `None` when no line holds them all.

        Exactly what scoring every candidate gives, reading few of them. The newest `limit + _WINDOW` are read
        first, newest first: when `limit` tool lines among them have the highest score a line can have, no
        older line ranks above them (most queries, whose matches hold their words in the line itself, stop
        there). The rest are read in the order of an upper bound of their score (`_score_bound`), computed
        by SQLite in the statement, until `limit` lines rank above the best any unread line can reach: a
        query whose words every line's call holds (`log` of `read_log`) read and scored all 500 otherwise.
        """
        patterns = [word_pattern(word, whole) for word in wanted]
        match = ' AND '.join(f'"{word}"{"" if whole else "*"}' for word in wanted)
        if limit < 1:  # a slice of the ranked candidates, as the other stores give (`[:0]`, `[:-1]`)
            found = self._candidates(conversation_id, match, patterns)
            found.sort(key=lambda e: (e[1].source != 'tool', -e[1].score, -e[0]))
            return [hit for _, hit in found[:limit]] if found else None
        match = self._owned(conversation_id, match)
        key = db_text(conversation_id)
        top = (False, -2 * len(patterns))
        best: list[tuple[tuple[bool, int, int], Hit]] = []

        def keep(row: Sequence[Any]) -> None:
            score = line_score(row[1], row[2], patterns)
            hit = Hit(row[1], row[3], row[4], row[5], row[6], int(row[7]), score)
            bisect.insort(best, ((row[3] != 'tool', -score, -int(row[0])), hit), key=lambda entry: entry[0])
            del best[limit:]

        with self._reading('search') as db:
            window = min(limit + _WINDOW, SEARCH_CANDIDATES)
            rows = db.execute(
                'SELECT rowid, text, context, source, tool_name, args, result_id, line_no FROM log '
                'WHERE log MATCH ? AND conversation_id = ? ORDER BY rowid DESC LIMIT ?',
                (match, key, window),
            ).fetchall()
            for row in rows:
                keep(row)
                if len(best) >= limit and best[limit - 1][0][:2] <= top:
                    return [hit for _, hit in best]  # every older line ranks below these
            if len(rows) < window:
                return [hit for _, hit in best] if rows else None  # every candidate is read
            bound, words_in = _score_bound(wanted)
            order = db.execute(
                'SELECT id, other, bound FROM ('
                f"SELECT rowid AS id, source != 'tool' AS other, {bound} AS bound "
                'FROM log WHERE log MATCH ? AND conversation_id = ? AND rowid < ? ORDER BY rowid DESC LIMIT ?'
                ') ORDER BY other, bound DESC, id DESC',
                (*words_in, match, key, rows[-1][0], SEARCH_CANDIDATES - window),
            ).fetchall()
            # Only the columns the order needs are sorted; the rows are read a batch of `limit` at a time.
            for start in range(0, len(order), limit):
                first = order[start]
                if len(best) >= limit and best[limit - 1][0] < (bool(first[1]), -first[2], -first[0]):
                    break  # no line from here on can rank above the `limit` best so far
                ids = [entry[0] for entry in order[start : start + limit]]
                for row in db.execute(
                    'SELECT rowid, text, context, source, tool_name, args, result_id, line_no FROM log '
                    f'WHERE rowid IN ({",".join("?" * len(ids))})',
                    ids,
                ):
                    keep(row)
        return [hit for _, hit in best]

    def _candidates(self, conversation_id: str, match: str, patterns: list[WordPattern]) -> list[tuple[int, Hit]]:
        """The newest `SEARCH_CANDIDATES` lines matching *match*, as `(rowid, hit)` scored by `line_score`.

        The conversation's token is part of the full-text query (a version 1 file), so FTS5 yields only its
        lines, newest first, and stops at `SEARCH_CANDIDATES`; testing the key on each row instead (a version 0
        file) reads 8 rows for each one kept when 8 conversations share the file.
        """
        found: list[tuple[int, Hit]] = []
        with self._reading('search') as db:
            cursor = db.execute(
                'SELECT rowid, text, context, source, tool_name, args, result_id, line_no FROM log '
                'WHERE log MATCH ? AND conversation_id = ? ORDER BY rowid DESC LIMIT ?',
                (self._owned(conversation_id, match), db_text(conversation_id), SEARCH_CANDIDATES),
            )
            for row in cursor:
                score = line_score(row[1], row[2], patterns)
                found.append((int(row[0]), Hit(row[1], row[3], row[4], row[5], row[6], int(row[7]), score)))
            cursor.close()
        return found


_WINDOW = 16
"""Candidates read newest first beyond a search's limit before the rest are read in the order of their score's
upper bound: enough for a query whose newest matches mostly hold every word in the line itself."""


def _score_bound(wanted: Sequence[str]) -> tuple[str, list[str]]:
    """An SQL expression no smaller than any line's `line_score` for *wanted*, whole words or prefixes, and its
    parameters.

    A word counts 2 when the line's text may hold it, else 1 (its call may). "May hold" is `LIKE '%word%'` (a
    substring, ASCII letters in any case), which `line_score`'s match implies only where `LIKE` folds case as
    Python's `lower` does: for ASCII text and an ASCII word (a query word has no `%` or `_`). Any other text
    or word counts 2.

    Text is ASCII when its length in characters is its length in UTF-8 bytes (two counting loops in C; text
    in a UTF-16 file never is, which only costs reading). `GLOB '*[^ -~]*'` said the same of printable ASCII
    at about 40 ns a character: 20 ms for 60 lines of 8 KB, most of a search over the 1M-token log.
    """
    ascii_words = [word for word in wanted if word.isascii()]
    tests = ' + '.join(['(text LIKE ?)'] * len(ascii_words)) or '0'
    most = 2 * len(wanted)
    least = len(wanted) + len(wanted) - len(ascii_words)
    wide = 'length(CAST(text AS BLOB)) <> length(text)'
    return f'CASE WHEN {wide} THEN {most} ELSE {least} + {tests} END', [f'%{w}%' for w in ascii_words]
