"""The PostgreSQL store's schema version 2 (the GIN index's pending list, migrated in place).

Version 1 to 2 changes the index's settings only, and workers of both versions read and write either database:
the move is a tuning, so it must never make a version 1 database unusable to the new code, which it did for a
role that may read and write the tables but not create or alter them (the usual application role), and for any
worker starting while another held a transaction on the log (a rolling upgrade: the first operation of every new
worker failed with `canceling statement due to lock timeout`, naming neither the migration nor a remedy).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from pydantic_ai_compaction.protocols.archive import LogLine
from pydantic_ai_compaction.runtime.stores import PostgresArchiveStore
from pydantic_ai_compaction.runtime.stores import postgres as postgres_module

from .stores import POSTGRES_DSN, postgres_store

LINES = [
    LogLine('a', 'p1', 0, 'media timeout_ms = 1050', 'tool', 'read_log', '{}', 'r1'),
    LogLine('a', 'p1', 1, 'region = eu-west-2 café', 'tool', 'read_log', '{}', 'r1'),
    LogLine('b', 'p1', 0, 'media timeout_ms = 9999', 'tool', 'read_log', '{}', 'r1'),
]


def _gin_options(conn: Any) -> list[str]:
    row = conn.execute("SELECT reloptions FROM pg_class WHERE relname = 'pac_log_owned_terms'").fetchone()
    return sorted(row[0] or [])


@pytest.fixture
def version_1_database() -> Iterator[str]:
    """A database of its own holding version 1's tables (the GIN index without a pending list) and `LINES`."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    postgres_store().close()  # skips (or fails in CI) without a server
    name = f'pac_schema_v2_{uuid.uuid4().hex[:12]}'
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE {name}')
    target = make_conninfo('', **{**conninfo_to_dict(POSTGRES_DSN), 'dbname': name})
    try:
        with psycopg.connect(target, autocommit=True) as conn:
            schema: str = postgres_module._SCHEMA  # pyright: ignore[reportPrivateUsage]
            options: str = postgres_module._GIN_OPTIONS  # pyright: ignore[reportPrivateUsage]
            conn.execute(schema.replace(options, 'WITH (fastupdate = off)'))
            conn.execute('INSERT INTO pac_schema (version) VALUES (1)')
        store = PostgresArchiveStore(target)
        try:
            # Written as a version 1 worker writes (the lines' format is the same in both versions).
            store._schema_ready = True  # pyright: ignore[reportPrivateUsage]
            assert store.index_lines(LINES) == 3
        finally:
            store.close()
        with psycopg.connect(target, autocommit=True) as conn:
            assert conn.execute('SELECT version FROM pac_schema').fetchall() == [(1,)]
            assert _gin_options(conn) == ['fastupdate=off']
        yield target
    finally:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS {name} WITH (FORCE)')


def _assert_reads_and_writes(store: PostgresArchiveStore) -> None:
    assert [hit.text for hit in store.search('a', 'timeout')] == ['media timeout_ms = 1050']
    assert [hit.text for hit in store.search('b', 'timeout')] == ['media timeout_ms = 9999']
    assert [hit.text for hit in store.search('a', 'caf')] == ['region = eu-west-2 café']  # a prefix
    assert store.index_lines([LogLine('a', 'p2', 0, 'media timeout_ms = 2000', 'tool', 'read_log', '{}', 'r2')]) == 1
    assert [hit.text for hit in store.search('a', 'media timeout')] == [
        'media timeout_ms = 2000',
        'media timeout_ms = 1050',
    ]


@pytest.fixture
def application_role(version_1_database: str) -> Iterator[tuple[str, Any]]:
    """A role with rights on the rows only (its DSN), and the owner's connection."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    role = f'pac_role_{uuid.uuid4().hex[:8]}'
    with psycopg.connect(version_1_database, autocommit=True) as owner:
        try:
            owner.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'app'")
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip('the test server role cannot create roles')
        try:
            owner.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}')
            owner.execute(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}')
            yield make_conninfo('', **{**conninfo_to_dict(version_1_database), 'user': role, 'password': 'app'}), owner
        finally:
            owner.execute(f'DROP OWNED BY {role}')
            owner.execute(f'DROP ROLE {role}')


def test_an_application_role_keeps_using_a_version_1_database(
    version_1_database: str, application_role: tuple[str, Any]
) -> None:
    """A role with rights on the rows only (no `CREATE` on the schema, not the index's owner) read and wrote a
    version 1 database with version 1's code; version 2's code failed every operation with `permission denied for
    schema public` (its `CREATE TABLE IF NOT EXISTS`, run to migrate). The database stays at version 1 for that
    role, and is migrated by the first worker whose role owns it."""
    dsn, owner = application_role
    store = PostgresArchiveStore(dsn)
    try:
        _assert_reads_and_writes(store)
    finally:
        store.close()
    assert owner.execute('SELECT version FROM pac_schema').fetchall() == [(1,)]
    assert _gin_options(owner) == ['fastupdate=off']
    store = PostgresArchiveStore(version_1_database)  # the owner's worker migrates it
    try:
        assert store.notes('a') == []
    finally:
        store.close()
    assert owner.execute('SELECT version FROM pac_schema').fetchall() == [(2,)]
    assert _gin_options(owner) == ['fastupdate=on', 'gin_pending_list_limit=64']


def test_a_version_1_database_with_a_writer_in_a_transaction_is_used_at_once(version_1_database: str) -> None:
    """A version 1 worker in the middle of a write (its transaction holds the log) blocked the migration's
    `CREATE INDEX IF NOT EXISTS` and `ALTER INDEX` past `busy_timeout_ms`: the new worker's first operation, a
    search or even a note, failed with `canceling statement due to lock timeout`. It now works at once on the
    version 1 settings, and the next worker to start once the log is free migrates the database."""
    import psycopg

    with psycopg.connect(version_1_database) as writer:
        writer.execute('LOCK TABLE pac_log IN ROW EXCLUSIVE MODE')  # what an INSERT or COPY into the log holds
        store = PostgresArchiveStore(version_1_database, busy_timeout_ms=3_000)
        try:
            assert store.notes('a') == []
            assert [hit.text for hit in store.search('a', 'timeout')] == ['media timeout_ms = 1050']
        finally:
            store.close()
        writer.rollback()
        assert writer.execute('SELECT version FROM pac_schema').fetchall() == [(1,)]
    store = PostgresArchiveStore(version_1_database)
    try:
        _assert_reads_and_writes(store)
    finally:
        store.close()
    with psycopg.connect(version_1_database, autocommit=True) as conn:
        assert conn.execute('SELECT version FROM pac_schema').fetchall() == [(2,)]
        assert _gin_options(conn) == ['fastupdate=on', 'gin_pending_list_limit=64']


def test_workers_migrating_a_version_1_database_together_all_work(version_1_database: str) -> None:
    """Four stores (four pools) opened at once on a version 1 database: each works, one migration is recorded."""
    import psycopg

    barrier = threading.Barrier(4)
    found: list[list[str]] = []
    errors: list[BaseException] = []

    def worker() -> None:
        store = PostgresArchiveStore(version_1_database)
        try:
            barrier.wait()
            found.append([hit.text for hit in store.search('a', 'timeout')])
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            store.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert found == [['media timeout_ms = 1050']] * 4
    with psycopg.connect(version_1_database, autocommit=True) as conn:
        assert conn.execute('SELECT version FROM pac_schema').fetchall() == [(2,)]
        assert _gin_options(conn) == ['fastupdate=on', 'gin_pending_list_limit=64']


def test_a_required_migration_that_waits_too_long_says_so_and_the_store_stays_usable() -> None:
    """A version 0 database must be migrated before use; while another connection holds the log, the migration
    waited `busy_timeout_ms` and the operation failed with PostgreSQL's bare `canceling statement due to lock
    timeout`, naming neither the migration nor what to do. The message now says both; nothing was changed, and
    the same store migrates and works once the log is free."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from pydantic_ai_compaction.protocols.archive import ArchiveError
    from pydantic_ai_compaction.runtime.stores._query import words

    from .test_store_schema import POSTGRES_V0

    postgres_store().close()  # skips (or fails in CI) without a server
    name = f'pac_schema_v2_{uuid.uuid4().hex[:12]}'
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE {name}')
    target = make_conninfo('', **{**conninfo_to_dict(POSTGRES_DSN), 'dbname': name})
    try:
        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute(POSTGRES_V0)
            conn.execute(
                'INSERT INTO pac_log (conversation_id, text, context, source, tool_name, args, result_id, line_no, '
                "terms) VALUES ('a', 'media timeout_ms = 1050', '', 'tool', 'read_log', '', 'r1', 0, %s)",
                (' '.join(words('media timeout_ms = 1050 read_log r1')),),
            )
        store = PostgresArchiveStore(target, busy_timeout_ms=300)
        try:
            with psycopg.connect(target) as writer:
                writer.execute('LOCK TABLE pac_log IN ROW EXCLUSIVE MODE')
                with pytest.raises(ArchiveError) as raised:
                    store.search('a', 'timeout')
                writer.rollback()
            message = str(raised.value)
            assert raised.value.operation == 'search'
            assert 'canceling statement due to lock timeout: moving the tables to schema version 2' in message
            assert 'busy_timeout_ms (300 ms)' in message and 'nothing was changed' in message
            with psycopg.connect(target, autocommit=True) as conn:
                assert conn.execute("SELECT to_regclass('pac_schema')").fetchone() == (None,)
            assert [hit.text for hit in store.search('a', 'timeout')] == ['media timeout_ms = 1050']
        finally:
            store.close()
        with psycopg.connect(target, autocommit=True) as conn:
            assert conn.execute('SELECT version FROM pac_schema').fetchall() == [(2,)]
    finally:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS {name} WITH (FORCE)')
