"""The SQL stores' settings and schema moves as a user meets them.

`busy_timeout_ms = 0` means one thing on both stores (do not wait; PostgreSQL's `lock_timeout = 0` waited
forever); a version 1 PostgreSQL database that cannot be moved to version 2 says so once, naming what to run;
and the search index is found by its definition, so one renamed by hand is tuned, not doubled.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest

from pydantic_ai_compaction.protocols.archive import ArchiveError, LogLine
from pydantic_ai_compaction.runtime.checks import ConfigurationError
from pydantic_ai_compaction.runtime.stores import PostgresArchiveStore, SQLiteArchiveStore
from pydantic_ai_compaction.runtime.stores import postgres as postgres_module

from .stores import POSTGRES_DSN, postgres_store
from .test_postgres_schema_v2 import application_role, version_1_database  # noqa: F401  # pyright: ignore[reportUnusedImport]

HELD_SECONDS = 4.0
"""How long another connection holds the lock: an operation that waited for it would succeed afterwards."""


def _hold_for(seconds: float, release: Any) -> threading.Timer:
    timer = threading.Timer(seconds, release)
    timer.start()
    return timer


@pytest.mark.parametrize('kind', ['sqlite', 'postgres'])
def test_busy_timeout_zero_fails_at_once_on_both_stores(kind: str, tmp_path: Path) -> None:
    """0 is "do not wait" on both stores: SQLite's busy timeout of 0 fails at once, and PostgreSQL's store sets
    `lock_timeout` to 1 ms, since a `lock_timeout` of 0 waits forever (the operation below waited until the other
    transaction ended, then succeeded)."""
    key = f'busy-{uuid.uuid4().hex}'
    if kind == 'sqlite':
        path = tmp_path / 'busy.sqlite3'
        store: Any = SQLiteArchiveStore(path, busy_timeout_ms=0)
        store.notes(key)  # the file and its tables exist
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute('BEGIN IMMEDIATE')  # the write lock, as another process's transaction
        timer = _hold_for(HELD_SECONDS, lambda: holder.execute('ROLLBACK'))
        expected = 'locked'
    else:
        import psycopg

        store = postgres_store(busy_timeout_ms=0)
        store.notes(key)  # the schema is ready: what waits below is the operation itself
        holder = psycopg.connect(POSTGRES_DSN)
        # The counter's row inserted and not committed: the store's upsert of the same row waits for it.
        holder.execute("INSERT INTO pac_counters (conversation_id, name, value) VALUES (%s, 'n', 1)", (key,))
        timer = _hold_for(HELD_SECONDS, holder.rollback)
        expected = 'lock timeout'
    started = time.perf_counter()
    try:
        with pytest.raises(ArchiveError, match=expected):
            store.next_numbers(key, 'n', 1)
        assert time.perf_counter() - started < HELD_SECONDS / 2
    finally:
        timer.join()
        holder.close()
    assert store.next_numbers(key, 'n', 2) == [1, 2]  # the lock is free: the same store works
    store.close()


@pytest.mark.parametrize('value', [-1, 2**31, True, 1.5])
@pytest.mark.parametrize('store', [SQLiteArchiveStore, PostgresArchiveStore])
def test_busy_timeout_outside_what_both_servers_hold_is_refused(store: Any, value: object, tmp_path: Path) -> None:
    """Beyond 2**31 - 1 ms SQLite read the timeout as 0 (no waiting at all) and every PostgreSQL connection
    failed (`invalid value for parameter "lock_timeout"`)."""
    target = str(tmp_path / 'x.sqlite3') if store is SQLiteArchiveStore else POSTGRES_DSN
    with pytest.raises(ConfigurationError, match=rf'{store.__name__}\.busy_timeout_ms must be an integer'):
        store(target, busy_timeout_ms=value)


@pytest.mark.parametrize('path', [123, None, '', b'x.sqlite3'])
def test_a_bad_sqlite_path_is_a_configuration_error_naming_the_field(path: object) -> None:
    # As every other field's: `except ConfigurationError` (or `TypeError`, for a path of the wrong type) catches it.
    with pytest.raises(ConfigurationError, match=rf'SQLiteArchiveStore\.path must be a non-empty path, got {path!r}'):
        SQLiteArchiveStore(path)  # pyright: ignore[reportArgumentType]


def test_the_longest_busy_timeout_is_accepted_by_both_servers(tmp_path: Path) -> None:
    longest = 2**31 - 1
    sqlite_store = SQLiteArchiveStore(tmp_path / 'x.sqlite3', busy_timeout_ms=longest)
    try:
        assert sqlite_store._connection('test').execute('PRAGMA busy_timeout').fetchone() == (longest,)  # pyright: ignore[reportPrivateUsage]
    finally:
        sqlite_store.close()
    store = postgres_store(busy_timeout_ms=longest)
    try:
        assert store._run('test', lambda conn: conn.execute('SHOW lock_timeout').fetchone()[0]) == f'{longest}ms'  # pyright: ignore[reportPrivateUsage]
    finally:
        store.close()


def _untuned_warnings(open_store: Any) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        store = open_store()
        try:
            assert [hit.text for hit in store.search('a', 'timeout')] == ['media timeout_ms = 1050']
        finally:
            store.close()
    return [str(w.message) for w in caught if 'schema version 1' in str(w.message)]


def test_a_database_left_at_version_1_says_so_once_and_what_to_run(
    application_role: tuple[str, Any],  # noqa: F811
) -> None:
    """The role may not alter the index, so the store keeps version 1: before, only `pac_schema.version` said so.
    It warns once per database in a process, and the statements it names finish the move when run."""
    dsn, owner = application_role
    (told,) = _untuned_warnings(lambda: PostgresArchiveStore(dsn))
    assert 'the tables stay at schema version 1 (this role may not change them: permission denied' in told
    assert _untuned_warnings(lambda: PostgresArchiveStore(dsn)) == []  # once
    # What the warning says to run, run as the owner, as it says.
    statements = told.split('that role: ', 1)[1]
    assert statements == (
        'ALTER INDEX "pac_log_owned_terms" SET (fastupdate = on, gin_pending_list_limit = 64); '
        'UPDATE pac_schema SET version = 2;'
    )
    owner.execute(statements)
    assert owner.execute('SELECT version FROM pac_schema').fetchall() == [(2,)]
    options = owner.execute("SELECT reloptions FROM pg_class WHERE relname = 'pac_log_owned_terms'").fetchone()[0]
    assert sorted(options) == ['fastupdate=on', 'gin_pending_list_limit=64']
    postgres_module._TOLD_UNTUNED.clear()  # pyright: ignore[reportPrivateUsage]
    assert _untuned_warnings(lambda: PostgresArchiveStore(dsn)) == []  # version 2: nothing to tell


def test_a_database_whose_log_was_held_says_the_next_store_tries_again(version_1_database: str) -> None:  # noqa: F811
    import psycopg

    with psycopg.connect(version_1_database) as writer:
        writer.execute('LOCK TABLE pac_log IN ROW EXCLUSIVE MODE')  # what an insert into the log holds
        (told,) = _untuned_warnings(lambda: PostgresArchiveStore(version_1_database, busy_timeout_ms=300))
        writer.rollback()
    assert 'another connection held the log longer than 300 ms; the next store to open tries again' in told
    assert _untuned_warnings(lambda: PostgresArchiveStore(version_1_database)) == []  # moved, nothing to tell
    with psycopg.connect(version_1_database, autocommit=True) as conn:
        assert conn.execute('SELECT version FROM pac_schema').fetchall() == [(2,)]


def _gin_indexes(conn: Any) -> list[tuple[str, list[str]]]:
    rows = conn.execute(
        'SELECT c.relname, c.reloptions FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid '
        "JOIN pg_am am ON am.oid = c.relam WHERE i.indrelid = 'pac_log'::regclass AND am.amname = 'gin' "
        'ORDER BY c.relname'
    ).fetchall()
    return [(name, sorted(options or [])) for name, options in rows]


def test_a_search_index_renamed_by_hand_is_tuned_not_doubled(version_1_database: str) -> None:  # noqa: F811
    """`CREATE INDEX IF NOT EXISTS pac_log_owned_terms` knows the name only: a version 1 database whose index
    was renamed got a second GIN index over the same column, which every line written then updated twice. A
    partial index over the column is not the search index: it stays, and the search index is made beside it."""
    import psycopg

    with psycopg.connect(version_1_database, autocommit=True) as conn:
        conn.execute('ALTER INDEX pac_log_owned_terms RENAME TO "Search Index"')
        conn.execute("CREATE INDEX pac_log_tool_terms ON pac_log USING GIN (owned_terms) WHERE source = 'tool'")
        index = conn.execute('SELECT \'"Search Index"\'::regclass::oid').fetchone()[0]
    store = PostgresArchiveStore(version_1_database)
    try:
        assert [hit.text for hit in store.search('a', 'timeout')] == ['media timeout_ms = 1050']
        assert store.index_lines([LogLine('a', 'p9', 0, 'media timeout_ms = 3000', 'tool', 'read_log')]) == 1
        assert store.search('a', 'media timeout')[0].text == 'media timeout_ms = 3000'
    finally:
        store.close()
    with psycopg.connect(version_1_database, autocommit=True) as conn:
        assert conn.execute('SELECT version FROM pac_schema').fetchall() == [(2,)]
        assert _gin_indexes(conn) == [
            ('Search Index', ['fastupdate=on', 'gin_pending_list_limit=64']),
            ('pac_log_tool_terms', []),
        ]
        assert conn.execute('SELECT \'"Search Index"\'::regclass::oid').fetchone()[0] == index  # not rebuilt
        conn.execute('DROP INDEX "Search Index"')
        conn.execute('DELETE FROM pac_schema')
        conn.execute('INSERT INTO pac_schema (version) VALUES (1)')
    store = PostgresArchiveStore(version_1_database)  # no search index left: it is made again
    try:
        assert [hit.text for hit in store.search('b', 'timeout')] == ['media timeout_ms = 9999']
    finally:
        store.close()
    with psycopg.connect(version_1_database, autocommit=True) as conn:
        assert _gin_indexes(conn) == [
            ('pac_log_owned_terms', ['fastupdate=on', 'gin_pending_list_limit=64']),
            ('pac_log_tool_terms', []),
        ]
