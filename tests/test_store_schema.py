"""Store schema versions: an old database opens, is migrated once, and keeps every line findable.

Also what the version 1 schemas rely on: the conversation's token (SQLite) or prefix (PostgreSQL) only
narrows a search, the key itself decides whose lines come back; and the score SQLite computes per line is
the in-memory store's, word for word.
"""

from __future__ import annotations

import os
import re
import sqlite3
import unicodedata
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pydantic_ai_compaction.protocols.archive import ArchiveError, LogLine
from pydantic_ai_compaction.runtime.scripts import PAIRED_CHARACTER as UNSPACED
from pydantic_ai_compaction.runtime.stores import PostgresArchiveStore, SQLiteArchiveStore
from pydantic_ai_compaction.runtime.stores import postgres as postgres_module
from pydantic_ai_compaction.runtime.stores import sqlite as sqlite_module
from pydantic_ai_compaction.runtime.stores._query import has_word, line_score, rank_any_word, word_pattern, words

from .stores import POSTGRES_DSN, make_store, postgres_store

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '40'))


def _pattern_words(text: str) -> list[str]:
    """`words` by the pattern alone: runs of letters and digits of the text lowercased (the dot `İ` leaves on its
    `i` dropped) and composed (NFC), a run of a script written without spaces as the pairs of its characters,
    without repeats."""
    lowered = unicodedata.normalize('NFC', text.lower().replace('i\u0307', 'i'))
    found: list[str] = []
    for word in re.findall(r'[^\W_]+', lowered):
        run = ''
        for character in [*word, '']:
            unspaced = bool(character) and UNSPACED.match(character) is not None
            if run and (not character or unspaced != bool(UNSPACED.match(run[-1]))):
                pairs = [run[at : at + 2] for at in range(len(run) - 1)]
                found.extend(pairs if UNSPACED.match(run) and pairs else [run])
                run = ''
            run += character
    return list(dict.fromkeys(found))


ODD_TEXT = st.lists(
    st.one_of(
        st.characters(max_codepoint=127),  # every ASCII character, controls included
        st.sampled_from(['é', 'ß', 'İ', '\u212a', '\ud800', '\udfff', '\x00', '\\.', 'Σ', 'ΑΣ ', '٣', '_', '\u2028']),
        st.sampled_from(['東', '京', 'タ', 'ー', '비', '밀', 'ｶ', '𠀀']),  # scripts written without spaces
    ),
    max_size=60,
).map(''.join)
"""Text a tool may return: any ASCII character, `\\.` (the end of `COPY` data), NUL, lone surrogates, letters whose
case folds to two characters or differently by context, digits of other scripts."""

# The version 0 log tables, as the stores created them before schema versions.
SQLITE_V0_LOG = """CREATE VIRTUAL TABLE log USING fts5(
    text, context, conversation_id UNINDEXED, source UNINDEXED, tool_name UNINDEXED, args UNINDEXED,
    result_id UNINDEXED, line_no UNINDEXED, tokenize = 'unicode61'
)"""
SQLITE_V0_OTHERS = (
    'CREATE TABLE counters (conversation_id TEXT NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL, '
    'PRIMARY KEY (conversation_id, name))',
    'CREATE TABLE archived (conversation_id TEXT NOT NULL, ref TEXT NOT NULL, result_id TEXT NOT NULL, '
    'tool_name TEXT NOT NULL, tool_call_id TEXT NOT NULL, args_json TEXT NOT NULL, payload BLOB NOT NULL, '
    'note TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (conversation_id, ref))',
    'CREATE TABLE notes (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id TEXT NOT NULL, kind TEXT NOT NULL, '
    'text TEXT NOT NULL)',
    'CREATE TABLE indexed_parts (conversation_id TEXT NOT NULL, fingerprint TEXT NOT NULL, '
    'PRIMARY KEY (conversation_id, fingerprint))',
)
POSTGRES_V0 = """
CREATE TABLE pac_counters (conversation_id TEXT NOT NULL, name TEXT NOT NULL, value BIGINT NOT NULL,
    PRIMARY KEY (conversation_id, name));
CREATE TABLE pac_archived (conversation_id TEXT NOT NULL, ref TEXT NOT NULL, result_id TEXT NOT NULL,
    tool_name TEXT NOT NULL, tool_call_id TEXT NOT NULL, args_json TEXT NOT NULL, payload BYTEA NOT NULL,
    note TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (conversation_id, ref));
CREATE TABLE pac_notes (id BIGSERIAL PRIMARY KEY, conversation_id TEXT NOT NULL, kind TEXT NOT NULL,
    text TEXT NOT NULL);
CREATE TABLE pac_indexed_parts (conversation_id TEXT NOT NULL, fingerprint TEXT NOT NULL,
    PRIMARY KEY (conversation_id, fingerprint));
CREATE TABLE pac_log (id BIGSERIAL PRIMARY KEY, conversation_id TEXT NOT NULL, text TEXT NOT NULL,
    context TEXT NOT NULL, source TEXT NOT NULL, tool_name TEXT NOT NULL, args TEXT NOT NULL,
    result_id TEXT NOT NULL, line_no INTEGER NOT NULL, terms TEXT NOT NULL,
    tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', terms)) STORED);
CREATE INDEX pac_log_tsv ON pac_log USING GIN (tsv);
CREATE INDEX pac_log_conversation ON pac_log (conversation_id);
CREATE INDEX pac_log_conversation_newest ON pac_log (conversation_id, id);
"""

# (conversation, text) of the lines written before the migration; every line's call is `read_log`.
OLD_LINES = [
    ('a', 'media timeout_ms = 1050'),
    ('a', 'region = eu-west-2'),
    ('b', 'media timeout_ms = 9999'),
    ('a', 'Écran café naïve'),
]


def new_lines(conversation: str) -> list[LogLine]:
    return [LogLine(conversation, 'part-new', 0, 'media timeout_ms = 2000 after the upgrade', 'tool', 'read_log')]


def assert_migrated_store_works(store: Any) -> None:
    """Old lines found for their conversation only; new lines indexed next to them; ranking as before."""
    assert [hit.text for hit in store.search('a', 'timeout')] == ['media timeout_ms = 1050']
    assert [hit.text for hit in store.search('b', 'timeout')] == ['media timeout_ms = 9999']
    assert [hit.text for hit in store.search('a', 'log region')] == ['region = eu-west-2']  # the call's word
    assert [hit.text for hit in store.search('a', 'café')] == ['Écran café naïve']
    assert store.index_lines(new_lines('a')) == 1
    assert [hit.text for hit in store.search('a', 'media timeout')] == [
        'media timeout_ms = 2000 after the upgrade',
        'media timeout_ms = 1050',
    ]
    assert store.search('c', 'media') == []


# SQLite -----------------------------------------------------------------------------------------------------


def sqlite_v0(path: Path) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    for statement in (SQLITE_V0_LOG, *SQLITE_V0_OTHERS):
        db.execute(statement)
    for number, (conversation, text) in enumerate(OLD_LINES):
        db.execute(
            'INSERT INTO log (text, context, conversation_id, source, tool_name, args, result_id, line_no) '
            "VALUES (?, 'read_log  r1', ?, 'tool', 'read_log', '', 'r1', ?)",
            (text, conversation, number),
        )
    db.close()


def test_an_old_sqlite_file_is_migrated_when_opened_and_keeps_its_lines(tmp_path: Path) -> None:
    path = tmp_path / 'old.sqlite3'
    sqlite_v0(path)
    store = SQLiteArchiveStore(path)
    try:
        assert_migrated_store_works(store)
    finally:
        store.close()
    db = sqlite3.connect(path)
    assert db.execute('PRAGMA user_version').fetchone()[0] == sqlite_module.SCHEMA_VERSION == 1
    columns = [row[1] for row in db.execute("SELECT * FROM pragma_table_info('log')")]
    assert columns[:4] == ['text', 'context', 'owner', 'conversation_id']
    assert db.execute("SELECT count(*) FROM log WHERE owner = 'x'").fetchone()[0] == 0
    owners = dict(db.execute('SELECT DISTINCT conversation_id, owner FROM log').fetchall())
    assert owners == {'a': sqlite_module.owner_token('a'), 'b': sqlite_module.owner_token('b')}
    db.close()
    reopened = SQLiteArchiveStore(path)  # already at version 1: opened as it is
    try:
        assert [hit.text for hit in reopened.search('b', 'media')] == ['media timeout_ms = 9999']
    finally:
        reopened.close()


def test_an_old_sqlite_file_opened_read_only_is_searched_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / 'old.sqlite3'
    sqlite_v0(path)
    store = SQLiteArchiveStore(f'file:{path}?mode=ro')
    try:
        assert [hit.text for hit in store.search('a', 'timeout')] == ['media timeout_ms = 1050']
        assert [hit.text for hit in store.search('a', 'log region')] == ['region = eu-west-2']
        assert store.search('c', 'media') == []
        with pytest.raises(ArchiveError, match='readonly'):
            store.index_lines(new_lines('a'))
    finally:
        store.close()
    assert sqlite3.connect(path).execute('PRAGMA user_version').fetchone()[0] == 0  # untouched


# PostgreSQL -------------------------------------------------------------------------------------------------


def test_an_old_postgres_database_is_migrated_on_first_use_and_keeps_its_lines() -> None:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    postgres_store().close()  # skips (or fails in CI) without a server
    params = conninfo_to_dict(POSTGRES_DSN)
    name = f'pac_migration_{uuid.uuid4().hex[:12]}'
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE {name}')
    target = make_conninfo('', **{**params, 'dbname': name})
    try:
        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute(POSTGRES_V0)
            for number, (conversation, text) in enumerate(OLD_LINES):
                conn.execute(
                    'INSERT INTO pac_log (conversation_id, text, context, source, tool_name, args, result_id, '
                    "line_no, terms) VALUES (%s, %s, 'read_log  r1', 'tool', 'read_log', '', 'r1', %s, %s)",
                    (conversation, text, number, ' '.join(words(f'{text} read_log r1'))),
                )
        store = PostgresArchiveStore(target)
        try:
            assert_migrated_store_works(store)
        finally:
            store.close()
        with psycopg.connect(target, autocommit=True) as conn:
            assert conn.execute('SELECT version FROM pac_schema').fetchall() == [(postgres_module.SCHEMA_VERSION,)]
            assert _gin_options(conn) == ['fastupdate=on', 'gin_pending_list_limit=64']
            columns = {
                row[0]
                for row in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = 'pac_log'"
                )
            }
            assert 'owned_terms' in columns and not columns & {'terms', 'tsv'}
            # The migration (in SQL) and the store (in Python) give an old and a new line the same prefix.
            vectors = [
                row[0]
                for row in conn.execute("SELECT owned_terms::text FROM pac_log WHERE conversation_id = 'a' ORDER BY id")
            ]
            prefix = postgres_module.owner_prefix('a')
            positions = {'media': 1, 'timeout': 2, 'ms': 3, '1050': 4, 'read': 5, 'log': 6, 'r1': 7}
            as_written = postgres_module._owned_terms(prefix, 'media timeout_ms = 1050 read_log  r1')  # pyright: ignore[reportPrivateUsage]
            assert as_written == ' '.join(f"'{prefix}{word}':{n}" for word, n in positions.items())
            assert vectors[0] == conn.execute('SELECT %s::tsvector::text', (as_written,)).fetchone()[0]
            assert vectors[-1].startswith(f"'{prefix}2000':4 '{prefix}after':5")
    finally:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS {name} WITH (FORCE)')


def _gin_options(conn: Any) -> list[str]:
    row = conn.execute("SELECT reloptions FROM pg_class WHERE relname = 'pac_log_owned_terms'").fetchone()
    return sorted(row[0] or [])


POSTGRES_V1_INDEX = 'CREATE INDEX pac_log_owned_terms ON pac_log USING GIN (owned_terms) WITH (fastupdate = off)'


def test_a_version_1_postgres_database_gets_the_pending_list_and_keeps_its_lines() -> None:
    """Version 1 to 2 changes the GIN index's settings only: the lines and their entries stay, the index is not
    rebuilt, and a worker of version 1 still finds the database ready (its version is at least 1)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    postgres_store().close()  # skips (or fails in CI) without a server
    params = conninfo_to_dict(POSTGRES_DSN)
    name = f'pac_migration_{uuid.uuid4().hex[:12]}'
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE {name}')
    target = make_conninfo('', **{**params, 'dbname': name})
    try:
        with psycopg.connect(target, autocommit=True) as conn:
            # The version 1 tables: today's, with the index as version 1 made it.
            conn.execute(postgres_module._SCHEMA.replace(postgres_module._GIN_OPTIONS, 'WITH (fastupdate = off)'))  # pyright: ignore[reportPrivateUsage]
            conn.execute('INSERT INTO pac_schema (version) VALUES (1)')
            assert _gin_options(conn) == ['fastupdate=off']
            index = conn.execute("SELECT 'pac_log_owned_terms'::regclass::oid").fetchone()[0]
            for conversation, text in OLD_LINES:
                terms = postgres_module._owned_terms(postgres_module.owner_prefix(conversation), f'{text} read_log  r1')  # pyright: ignore[reportPrivateUsage]
                conn.execute(
                    'INSERT INTO pac_log (conversation_id, text, context, source, tool_name, args, result_id, line_no, '
                    "owned_terms) VALUES (%s, %s, 'read_log  r1', 'tool', 'read_log', '', 'r1', 0, %s::tsvector)",
                    (conversation, text, terms),
                )
        store = PostgresArchiveStore(target)
        try:
            assert_migrated_store_works(store)
        finally:
            store.close()
        with psycopg.connect(target, autocommit=True) as conn:
            assert conn.execute('SELECT version FROM pac_schema').fetchall() == [(2,)]
            assert _gin_options(conn) == ['fastupdate=on', 'gin_pending_list_limit=64']
            assert conn.execute("SELECT 'pac_log_owned_terms'::regclass::oid").fetchone()[0] == index  # not rebuilt
            assert conn.execute('SELECT count(*) FROM pac_log').fetchone()[0] == len(OLD_LINES) + 1
    finally:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS {name} WITH (FORCE)')


PENDING_QUERIES = st.lists(st.sampled_from(['log', 'read', '37', 'caf', 'café', 'ab', 'x', 'zebra', 'é', 'ss', 'σ']))


@pytest.fixture(scope='module')
def private_postgres() -> Iterator[tuple[str, PostgresArchiveStore]]:
    """A database of its own (its DSN and a store on it): no other test's writes merge its pending list."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    postgres_store().close()  # skips (or fails in CI) without a server
    name = f'pac_pending_{uuid.uuid4().hex[:12]}'
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE {name}')
    target = make_conninfo('', **{**conninfo_to_dict(POSTGRES_DSN), 'dbname': name})
    store = PostgresArchiveStore(target)
    try:
        store.notes('probe')  # creates the tables
        yield target, store
    finally:
        store.close()
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS {name} WITH (FORCE)')


@settings(max_examples=max(EXAMPLES // 4, 5), deadline=None)
@given(
    lines=st.lists(
        st.one_of(ODD_TEXT, st.sampled_from(['log 37 café', 'x' * 3000 + ' log', 'read ab\\.ab', 'ab ' * 700])),
        min_size=1,
        max_size=12,
    ),
    queries=st.lists(PENDING_QUERIES.map(' '.join), min_size=1, max_size=4),
)
def test_postgres_hits_are_the_same_from_the_pending_list_and_from_the_merged_index(
    private_postgres: tuple[str, PostgresArchiveStore], lines: list[str], queries: list[str]
) -> None:
    """New lines wait in the GIN index's pending list until a writer merges it: a search finds exactly what it finds
    once they are merged, and what it finds in lines indexed one by one without a list (as version 1 did)."""
    import psycopg

    target, store = private_postgres
    keys = [f'pending-{uuid.uuid4().hex}', f'direct-{uuid.uuid4().hex}']

    def log(key: str) -> list[LogLine]:
        return [
            LogLine(key, f'part-{n // 5}', n, text, 'tool', 'read_log', '{"i": 37}', 'r1')
            for n, text in enumerate(lines)
        ]

    def index(key: str) -> None:
        for start in range(0, len(lines), 5):
            store.index_lines(log(key)[start : start + 5])

    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("SELECT gin_clean_pending_list('pac_log_owned_terms')")  # empty: the lines below stay in it
        index(keys[0])
        pending = {query: store.search(keys[0], query) for query in queries}
        assert conn.execute("SELECT gin_clean_pending_list('pac_log_owned_terms')").fetchone()[0] > 0
        merged = {query: store.search(keys[0], query) for query in queries}
        conn.execute('ALTER INDEX pac_log_owned_terms SET (fastupdate = off)')
        try:
            index(keys[1])
        finally:
            conn.execute('ALTER INDEX pac_log_owned_terms SET (fastupdate = on)')
    direct = {query: store.search(keys[1], query) for query in queries}
    assert pending == merged == direct


# Both ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize('kind', ['sqlite', 'postgres'])
def test_conversations_sharing_a_token_never_see_each_others_lines(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every key gets the same token / prefix: what a hash collision would do. Only the speed may suffer.
    monkeypatch.setattr(sqlite_module, 'owner_token', lambda _key: 'oshared')
    monkeypatch.setattr(postgres_module, 'owner_prefix', lambda _key: 'shared')
    store = make_store(kind, tmp_path)
    try:
        a, b = f'a-{uuid.uuid4().hex}', f'b-{uuid.uuid4().hex}'
        store.index_lines([LogLine(a, 'p1', 0, 'secret alpha of a', 'tool', 'read_log')])
        store.index_lines([LogLine(b, 'p2', 0, 'secret beta of b', 'tool', 'read_log')])
        assert [hit.text for hit in store.search(a, 'secret')] == ['secret alpha of a']
        assert [hit.text for hit in store.search(b, 'secret')] == ['secret beta of b']
        assert [hit.text for hit in store.search(b, 'alpha beta')] == ['secret beta of b']
    finally:
        store.close()


TEXT = st.text(st.sampled_from('aAbé_ -1.Ü2x\u0130\u00df'), max_size=12)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    text=TEXT,
    context=TEXT,
    query=st.lists(st.text(st.sampled_from('abé1ü2xi\u00df'), min_size=1, max_size=3), max_size=3),
)
def test_the_searched_score_equals_the_score_over_the_line_s_words(text: str, context: str, query: list[str]) -> None:
    _assert_score_is_over_words(text, context, query)


def _assert_score_is_over_words(text: str, context: str, query: list[str]) -> None:
    """`line_score` (searching the text) equals the score counted over the line's and its call's words."""
    wanted = words(' '.join(query))
    for whole in (True, False):
        own, around = words(text), words(text) + words(context)
        expected = sum(has_word(around, word, whole) + has_word(own, word, whole) for word in wanted)
        assert line_score(text, context, [word_pattern(word, whole) for word in wanted]) == expected


UNSPACED_TEXT = st.text(st.sampled_from('aé1 -東京タワーの3비밀'), max_size=12)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    text=UNSPACED_TEXT,
    context=UNSPACED_TEXT,
    query=st.lists(st.text(st.sampled_from('a1東京タワー비밀'), min_size=1, max_size=4), max_size=3),
)
def test_the_searched_score_equals_the_score_over_the_line_s_words_in_unspaced_scripts(
    text: str, context: str, query: list[str]
) -> None:
    # Chinese, Japanese and Korean runs are read as pairs of characters (`unspaced`): searching the text must find a
    # pair, a character alone and the letters beside them exactly where the line's words hold them.
    _assert_score_is_over_words(text, context, query)


def _pg_candidates(conn: Any, key: str, tsqueries: list[str], limit: int) -> list[list[tuple[int, tuple[Any, ...]]]]:
    """For each of *tsqueries*, the best *limit* of the newest matches (`_NEWEST_MATCHES`, one stage of a search
    asked alone, as the store asked it before a search was one statement), as `(id, row)`."""
    found: list[list[tuple[int, tuple[Any, ...]]]] = [[] for _ in tsqueries]
    statement: str = postgres_module._NEWEST_MATCHES  # pyright: ignore[reportPrivateUsage]
    for row in conn.execute(statement, {'key': key, 'queries': tsqueries, 'limit': limit}).fetchall():
        found[int(row[0]) - 1].append((int(row[1]), tuple(row[2:])))
    return found


def test_postgres_newest_matches_are_exactly_the_newest_whatever_the_branch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe, the continued scan and the GIN branch each give what one plain query gives."""
    monkeypatch.setattr(postgres_module, 'owner_prefix', lambda _key: 'shared')  # b's lines share a's entries
    store = postgres_store()
    a, b = f'a-{uuid.uuid4().hex}', f'b-{uuid.uuid4().hex}'
    small = f'small-{uuid.uuid4().hex}'

    def line(key: str, n: int) -> LogLine:
        text = ' '.join(
            ['common']
            + (['medium'] if n % 5 == 0 else [])  # 20 %: the scan goes on past the probe
            + (['rare'] if n % 50 == 7 else [])  # 2 %: the GIN branch
            + (['recent'] if key == a and n >= 1190 else [])  # only in the probe
        )
        return LogLine(key, f'part-{n // 40}', n, text, 'tool', 'read_log')

    try:
        for start in range(0, 1200, 40):  # the two conversations' lines interleave, as concurrent writers'
            store.index_lines([line(a, n) for n in range(start, start + 40)])
            store.index_lines([line(b, n) for n in range(start, start + 40)])
        store.index_lines([line(small, n) for n in range(60)])  # fewer lines than the probe reads
        import psycopg

        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            for key in (a, small):
                for word in ('common', 'medium', 'rare', 'recent', 'absent', 'rec', 'comm'):
                    for suffix in ('', ':*'):
                        query = postgres_module._query('shared', [word], suffix)  # pyright: ignore[reportPrivateUsage]
                        (found,) = _pg_candidates(conn, key, [query], 500)  # pyright: ignore[reportPrivateUsage]
                        plain = conn.execute(
                            'SELECT id FROM pac_log WHERE conversation_id = %s AND owned_terms @@ %s::tsquery '
                            'ORDER BY id DESC LIMIT 500',
                            (key, query),
                        ).fetchall()
                        assert sorted(i for i, _ in found) == sorted(row[0] for row in plain), (key, word, suffix)
            # The branches were all taken: a common word fills the 500, a rare one has its 24, the small log its 60.
            counts = {
                word: len(_pg_candidates(conn, a, [postgres_module._query('shared', [word], '')], 500)[0])  # pyright: ignore[reportPrivateUsage]
                for word in ('common', 'medium', 'rare', 'recent')
            }
            assert counts == {'common': 500, 'medium': 240, 'rare': 24, 'recent': 10}
        # A whole search (one statement) gives what asking its stages one by one gives, whatever the branch:
        # every word, every word as a prefix, each word's matches ranked together (whole words, then prefixes).
        for query in ('common rare', 'medium zebra', 'rec comm', 'absent zebra', 'rare recent', 'medi rar', 'comm'):
            for key in (a, small):
                for limit in (1, 5):
                    expected = _postgres_every_form(store, key, query, limit)
                    assert store.search(key, query, limit) == expected, (key, query, limit)
        assert [hit.text for hit in store.search(a, 'rare recent', 2)] == ['common recent', 'common recent']
    finally:
        store.close()


def _words_of(n: int) -> frozenset[str]:
    """Line *n*'s words in the example that takes every branch of the newest matches."""
    return frozenset(word for word, every in (('alpha', 3), ('beta', 10)) if n % every == 0)


_PLAIN_NEWEST = """
SELECT id, text, source, tool_name, args, result_id, line_no, ts_rank(owned_terms, %(query)s::tsquery) AS score
FROM (
    SELECT * FROM pac_log WHERE conversation_id = %(key)s AND owned_terms @@ %(query)s::tsquery
    ORDER BY id DESC LIMIT %(candidates)s
) AS newest
ORDER BY source <> 'tool', score DESC, id DESC LIMIT %(limit)s
"""
"""What `_newest_of` computes, said plainly: the best *limit* of the conversation's newest *candidates* matches."""


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    lines=st.lists(
        st.tuples(
            st.frozensets(st.sampled_from(['alpha', 'beta', 'gamma', 'delta'])),
            st.sampled_from(['tool', 'tool', 'user']),
            st.booleans(),  # the other conversation's line, interleaved, in the same GIN entries
        ),
        max_size=60,
    ),
    probe=st.integers(1, 10),
    rare=st.integers(1, 6),
    candidates=st.integers(1, 15),
)
@example(  # every branch: `line` continues the scan past the probe, `alpha` and `beta` ask the GIN index
    lines=[
        (_words_of(n), 'user' if n % 4 == 0 else 'tool', n % 2 == 1)  # odd lines are the other conversation's
        for n in range(60)
    ],
    probe=5,
    rare=2,
    candidates=8,
)
def test_postgres_newest_matches_are_the_plain_query_s_for_any_log_and_thresholds(
    lines: list[tuple[frozenset[str], str, bool]], probe: int, rare: int, candidates: int
) -> None:
    """Whatever branch the probe picks (matches in the probe only, the scan continued, the GIN index), for any
    probe size, threshold and candidate count, the statement gives exactly the plain query's hits in its order."""
    store = postgres_store()
    a, b = f'a-{uuid.uuid4().hex}', f'b-{uuid.uuid4().hex}'
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(postgres_module, 'owner_prefix', lambda _key: 'shared')
            for n, (found, source, other) in enumerate(lines):
                text = ' '.join(['line', *sorted(found)])
                store.index_lines([LogLine(b if other else a, f'p{n}', n, text, source, 'read_log')])  # pyright: ignore[reportArgumentType]
            patch.setattr(postgres_module, '_PROBE', probe)
            patch.setattr(postgres_module, '_RARE', rare)
            patch.setattr(postgres_module, 'SEARCH_CANDIDATES', candidates)
            newest_of = postgres_module._newest_of('%(limit)s')  # pyright: ignore[reportPrivateUsage]
        asked = 'SELECT matches.* FROM (SELECT %(query)s::tsquery AS query) AS asked'
        statement = f'{asked} CROSS JOIN LATERAL {newest_of} AS matches'
        import psycopg

        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            for word in ('line', 'alpha', 'beta', 'gamma', 'delta', 'alp', 'zebra'):
                for suffix in ('', ':*'):
                    query = postgres_module._query('shared', [word], suffix)  # pyright: ignore[reportPrivateUsage]
                    for limit in (1, 4, candidates):
                        params = {'key': a, 'query': query, 'limit': limit, 'candidates': candidates}
                        found_rows = conn.execute(statement, params).fetchall()
                        found_rows.sort(key=lambda row: (row[2] != 'tool', -row[7], -row[0]))
                        assert found_rows == conn.execute(_PLAIN_NEWEST, params).fetchall(), (word, suffix, limit)
    finally:
        store.close()


LINE_WORDS = ('log', 'Log', 'LOG', 'logs', '37', 'x37', 'café', 'CAFE', '\u212aey', 'key', '\ue000log', 'İx', 'ß')
"""Words whose case or letters Python and SQLite fold differently, or that FTS5 tokenizes unlike `words`."""


def _score_every_candidate(store: SQLiteArchiveStore, key: str, query: str, limit: int) -> list[Any]:
    """What SQLite recall gave before it bounded reading: every candidate read and scored."""
    wanted = words(query)
    if not wanted:
        return []
    for prefix in ('', '*'):
        match = ' AND '.join(f'"{word}"{prefix}' for word in wanted)
        found = store._candidates(key, match, [word_pattern(word, not prefix) for word in wanted])  # pyright: ignore[reportPrivateUsage]
        if found:
            found.sort(key=lambda e: (e[1].source != 'tool', -e[1].score, -e[0]))
            return [hit for _, hit in found[:limit]]
    if len(wanted) == 1:
        return []
    for prefix in ('', '*'):
        per_word = [
            store._candidates(key, f'"{word}"{prefix}', [word_pattern(word, not prefix)])  # pyright: ignore[reportPrivateUsage]
            for word in wanted
        ]
        if any(per_word):
            return rank_any_word(per_word, limit)
    return []


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    lines=st.lists(
        st.tuples(
            st.lists(st.sampled_from(LINE_WORDS), max_size=4),
            st.sampled_from(['read_log', 'read', 'Log_37', 'key_tool']),
            st.sampled_from(['tool', 'tool', 'user']),
        ),
        max_size=40,
    ),
    query=st.lists(st.sampled_from(['log', '37', 'key', 'caf', 'cafe', 'café', 'lo', 'ix', 'zebra']), max_size=3),
    limit=st.integers(-1, 5),
)
# The oldest line holds `key` only as Python lowercases it (a Kelvin sign), past the newest window.
@example(
    lines=[(['x'], 'read', 'tool'), (['\u212aey'], 'key_tool', 'tool')]
    + [(['x'], 'key_tool', 'tool')] * 2
    + [(['x'], 'read', 'tool'), (['x'], 'key_tool', 'tool')],
    query=['key'],
    limit=1,
)
def test_sqlite_recall_gives_what_scoring_every_candidate_gives(
    lines: list[tuple[list[str], str, str]], query: list[str], limit: int
) -> None:
    """The newest window, the bound-ordered rest and the skipped words change what is read, never the hits."""
    store = SQLiteArchiveStore(':memory:')
    saved = sqlite_module.SEARCH_CANDIDATES, sqlite_module._WINDOW  # pyright: ignore[reportPrivateUsage]
    # Few candidates and a small window: the cut at the newest candidates and the bounded read both happen.
    sqlite_module.SEARCH_CANDIDATES, sqlite_module._WINDOW = 24, 2  # pyright: ignore[reportPrivateUsage]
    try:
        for number, (text, tool, source) in enumerate(lines):
            key = 'a' if number % 4 else 'b'
            store.index_lines([LogLine(key, f'p{number}', 0, ' '.join(text), source, tool, '', f'r{number}')])
        text = ' '.join(query)
        assert store.search('a', text, limit) == _score_every_candidate(store, 'a', text, limit)
    finally:
        sqlite_module.SEARCH_CANDIDATES, sqlite_module._WINDOW = saved  # pyright: ignore[reportPrivateUsage]
        store.close()


def _postgres_every_form(store: PostgresArchiveStore, key: str, query: str, limit: int) -> list[Any]:
    """What PostgreSQL recall gave before it skipped the words no line holds: every form of every word asked."""
    wanted = words(query)
    prefix = postgres_module.owner_prefix(key)

    def work(conn: Any) -> list[Any]:
        for suffix in ('', ':*'):
            (rows,) = _pg_candidates(conn, key, [postgres_module._query(prefix, wanted, suffix)], limit)  # pyright: ignore[reportPrivateUsage]
            if rows:
                return [postgres_module._hit(row) for _, row in rows]  # pyright: ignore[reportPrivateUsage]
        if len(wanted) == 1:
            return []
        for suffix in ('', ':*'):
            queries = [postgres_module._query(prefix, [word], suffix) for word in wanted]  # pyright: ignore[reportPrivateUsage]
            per_word = _pg_candidates(conn, key, queries, sqlite_module.SEARCH_CANDIDATES)  # pyright: ignore[reportPrivateUsage]
            if any(per_word):
                hits = [[(r, postgres_module._hit(row)) for r, row in rows] for rows in per_word]  # pyright: ignore[reportPrivateUsage]
                return rank_any_word(hits, limit)
        return []

    return [] if not wanted else store._run('search', work)  # pyright: ignore[reportPrivateUsage]


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    lines=st.lists(
        st.tuples(st.lists(st.sampled_from(LINE_WORDS), max_size=4), st.sampled_from(['read_log', 'key_tool'])),
        max_size=12,
    ),
    query=st.lists(st.sampled_from(['log', '37', 'key', 'caf', 'cafe', 'lo', 'zebra', 'nothing']), max_size=3),
)
def test_postgres_recall_gives_what_asking_every_form_of_every_word_gives(
    lines: list[tuple[list[str], str]], query: list[str]
) -> None:
    store = postgres_store()
    key = f'c-{uuid.uuid4().hex}'
    try:
        store.index_lines(
            [
                LogLine(key, f'p{n}', 0, ' '.join(text), 'tool', tool, '', f'r{n}')
                for n, (text, tool) in enumerate(lines)
            ]
        )
        text = ' '.join(query)
        assert store.search(key, text, 3) == _postgres_every_form(store, key, text, 3)
    finally:
        store.close()


def test_postgres_recall_finds_a_word_only_lines_older_than_the_probe_hold() -> None:
    """Which words some line holds is asked of the GIN index when the newest lines do not hold them."""
    store = postgres_store()
    key = f'c-{uuid.uuid4().hex}'
    try:
        store.index_lines([LogLine(key, 'p0', 0, 'ancient value', 'tool', 'read')])
        newer = postgres_module._PROBE + 10  # pyright: ignore[reportPrivateUsage]
        store.index_lines([LogLine(key, 'p1', n, f'filler {n}', 'tool', 'read') for n in range(1, newer)])
        assert [hit.text for hit in store.search(key, 'ancient zebra')] == ['ancient value']
        assert [hit.text for hit in store.search(key, 'anc zebra')] == ['ancient value']
        assert store.search(key, 'zebra nothing') == []
    finally:
        store.close()


BOUND_TEXT = st.text(st.sampled_from('aAkK1 _-\t\n\x7f\u212a\u0130\u00e9\ue000\u00df\U0001f600'), max_size=16)
"""ASCII letters, digits, separators and control characters, and the characters Python and SQLite fold or split
unlike each other (Kelvin sign, dotted capital I, private use, a letter outside the Basic Multilingual Plane)."""


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    text=BOUND_TEXT,
    query=st.lists(st.text(st.sampled_from('ak1\u00e9i\u00df'), min_size=1, max_size=3), min_size=1, max_size=3),
    whole=st.booleans(),
)
# Python lowercases the Kelvin sign to `k` and the dotted capital I to `i` and a dot; SQLite's `LIKE` folds neither.
@example(text='\u212a', query=['k'], whole=True)
@example(text='x \u0130', query=['i'], whole=True)
def test_the_sqlite_score_bound_is_never_below_a_candidate_s_score(text: str, query: list[str], whole: bool) -> None:
    """The bound SQLite orders unread candidates by, evaluated by SQLite itself, against `line_score`.

    The call is made to hold every word (a candidate holds each in its line or its call), so only what the
    bound says of the line's own text decides.
    """
    wanted = words(' '.join(query))
    bound, parameters = sqlite_module._score_bound(wanted)  # pyright: ignore[reportPrivateUsage]
    db = sqlite3.connect(':memory:')
    try:
        (value,) = db.execute(f'SELECT {bound} FROM (SELECT ? AS text)', (*parameters, text)).fetchone()
    finally:
        db.close()
    score = line_score(text, ' '.join(wanted), [word_pattern(word, whole) for word in wanted])
    assert len(wanted) <= score <= value <= 2 * len(wanted)
    if text.isascii():  # exact for ASCII: the line's text holds the word, or no substring of it is the word
        assert value == len(wanted) + sum(word in text.lower() for word in wanted if word.isascii()) + sum(
            not word.isascii() for word in wanted
        )


@settings(max_examples=EXAMPLES * 5, deadline=None)
@given(text=ODD_TEXT)
def test_words_are_the_pattern_s_words_whatever_the_text(text: str) -> None:
    """The ASCII shortcut (`str.translate`) splits exactly as the pattern does, and other text goes to the pattern."""
    assert words(text) == _pattern_words(text)
    assert words(text.upper()) == _pattern_words(text.upper())


def test_a_run_written_without_spaces_is_read_as_pairs() -> None:
    assert words('東京タワーの高さは333メートル') == [
        *['東京', '京タ', 'タワ', 'ワー', 'ーの', 'の高', '高さ', 'さは'],
        *['333', 'メー', 'ート', 'トル'],
    ]
    assert words('İstanbul 秒') == ['istanbul', '秒']


def test_words_of_every_ascii_character() -> None:
    for code in range(128):
        text = f'a{chr(code)}b {chr(code)}{chr(code)}C'
        assert words(text) == _pattern_words(text), repr(chr(code))


def _owned_terms_word_by_word(prefix: str, text: str) -> str:
    """`_owned_terms` as it was written first: every word's size counted, each term formatted on its own."""
    kept: list[str] = []
    size = 0
    for word in _pattern_words(text):
        length = len(word.encode())
        if length > postgres_module._LONGEST_WORD:  # pyright: ignore[reportPrivateUsage]
            continue
        size += length + len(prefix) + 12
        if size > postgres_module._TERMS_BUDGET:  # pyright: ignore[reportPrivateUsage]
            break
        kept.append(word)
    return ' '.join(f"'{prefix}{word}':{min(n, 16_383)}" for n, word in enumerate(kept, start=1))


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    text=st.one_of(
        st.lists(st.sampled_from(['a', 'bb', 'é', 'x' * 9, 'ß' * 5, '\u212a', ' ', '_', '-', 'İ']), max_size=40).map(
            ''.join
        ),
        ODD_TEXT,
    ),
    longest=st.integers(1, 12),
    budget=st.integers(0, 200),
)
def test_postgres_owned_terms_are_the_words_counted_one_by_one(text: str, longest: int, budget: int) -> None:
    """The shortcut for short ASCII lines gives the terms counting every word's size gives (small limits here)."""
    saved = postgres_module._LONGEST_WORD, postgres_module._TERMS_BUDGET  # pyright: ignore[reportPrivateUsage]
    postgres_module._LONGEST_WORD, postgres_module._TERMS_BUDGET = longest, budget  # pyright: ignore[reportPrivateUsage]
    try:
        for prefix in ('', 'p0'):
            expected = _owned_terms_word_by_word(prefix, text)
            assert postgres_module._owned_terms(prefix, text) == expected  # pyright: ignore[reportPrivateUsage]
    finally:
        postgres_module._LONGEST_WORD, postgres_module._TERMS_BUDGET = saved  # pyright: ignore[reportPrivateUsage]


def test_postgres_owned_terms_keep_the_last_position_for_words_past_it() -> None:
    text = ' '.join(f'w{n}' for n in range(16_390))
    terms = postgres_module._owned_terms('p', text).split(' ')  # pyright: ignore[reportPrivateUsage]
    assert terms[0] == "'pw0':1" and terms[16_382] == "'pw16382':16383" and terms[-1] == "'pw16389':16383"
    assert len(terms) == 16_390


ACCENTED_LINES = ['resume uploaded to cafe server', 'résumé rejected by café proxy', 'private\ue000use token']


@pytest.mark.parametrize('kind', ['memory', 'sqlite', 'postgres'])
def test_the_stores_split_accented_words_as_docs_archive_says(kind: str, tmp_path: Path) -> None:
    # docs/archive.md names where SQLite's tokenizer finds other lines than the memory and PostgreSQL stores: it
    # folds accents away and reads a private-use character as a letter.
    store = make_store(kind, tmp_path)
    try:
        key = f'accents-{uuid.uuid4().hex}'
        store.index_lines([LogLine(key, f'p{n}', 0, text, 'tool', 'fetch') for n, text in enumerate(ACCENTED_LINES)])
        found = {query: sorted(hit.text for hit in store.search(key, query)) for query in ('cafe', 'café', 'use')}
    finally:
        close = getattr(store, 'close', None)
        if close is not None:
            close()
    if kind == 'sqlite':
        assert found == {'cafe': ACCENTED_LINES[:2], 'café': ACCENTED_LINES[:2], 'use': []}
    else:
        assert found == {'cafe': ACCENTED_LINES[:1], 'café': ACCENTED_LINES[1:2], 'use': ACCENTED_LINES[2:]}


@pytest.mark.parametrize('kind', ['memory', 'sqlite', 'postgres'])
def test_decomposed_and_composed_accents_find_each_other_in_every_store(kind: str, tmp_path: Path) -> None:
    # macOS writes file names decomposed (NFD); a model types them composed (NFC). Before, the memory and PostgreSQL
    # stores split the decomposed `Zoë` at its combining mark (`zoe`), so the `zoë` a model types found nothing.
    lines = [
        unicodedata.normalize('NFD', 'Résumé_Zoë.pdf owner=josé'),
        'Zoë composed here',
        unicodedata.normalize(
            'NFD', '회의록 Nguyễn'
        ),  # conjoining jamo and two marks on one letter: SQLite folds neither
    ]
    store = make_store(kind, tmp_path)
    try:
        key = f'nfd-{uuid.uuid4().hex}'
        store.index_lines([LogLine(key, f'p{n}', 0, text, 'tool', 'ls') for n, text in enumerate(lines)])
        queries = ('Zoë', unicodedata.normalize('NFD', 'Zoë'), 'josé', '회의록', unicodedata.normalize('NFD', 'nguyễn'))
        found = {query: sorted(hit.text for hit in store.search(key, query)) for query in queries}
    finally:
        close = getattr(store, 'close', None)
        if close is not None:
            close()
    # Every store indexes and shows a line composed (NFC), as it reads a query.
    composed = [unicodedata.normalize('NFC', line) for line in lines]
    assert found == {
        'Zoë': sorted(composed[:2]),
        unicodedata.normalize('NFD', 'Zoë'): sorted(composed[:2]),
        'josé': composed[:1],
        '회의록': composed[2:],
        unicodedata.normalize('NFD', 'nguyễn'): composed[2:],
    }
