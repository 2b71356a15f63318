"""The one-statement PostgreSQL search, the store settings and the version 1 warning."""

from __future__ import annotations

import os
import uuid
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import TextPart, ToolCallPart

from pydantic_ai_compaction.protocols.archive import LogLine
from pydantic_ai_compaction.runtime.checks import ConfigurationError
from pydantic_ai_compaction.runtime.stores import PostgresArchiveStore, SQLiteArchiveStore
from pydantic_ai_compaction.runtime.stores import postgres as pg
from pydantic_ai_compaction.runtime.stores._query import db_text, rank_any_word, words

from .stores import POSTGRES_DSN, postgres_store
from .test_postgres_schema_v2 import (
    application_role,  # noqa: F401  # pyright: ignore[reportUnusedImport]
    version_1_database,  # noqa: F401  # pyright: ignore[reportUnusedImport]
)
from .test_store_faults import memory_agent

_OLD_PRESENT = f"""
SELECT asked.n, {pg._HELD} FROM unnest(%(queries)s::tsquery[]) WITH ORDINALITY AS asked(query, n) ORDER BY asked.n
"""  # pyright: ignore[reportPrivateUsage]


def _old_candidates(conn: Any, key: str, tsqueries: list[str], limit: int) -> list[list[tuple[int, tuple[Any, ...]]]]:
    found: list[list[tuple[int, tuple[Any, ...]]]] = [[] for _ in tsqueries]
    for row in conn.execute(pg._NEWEST_MATCHES, {'key': key, 'queries': tsqueries, 'limit': limit}).fetchall():  # pyright: ignore[reportPrivateUsage]
        found[int(row[0]) - 1].append((int(row[1]), tuple(row[2:])))
    return found


def _old_search(store: PostgresArchiveStore, conversation_id: str, query: str, limit: int) -> list[Any]:
    """The search as the statements before the one-statement change ran it (ed146ad), on the same store."""
    q, hit, longest = pg._query, pg._hit, pg._LONGEST_WORD  # pyright: ignore[reportPrivateUsage]
    wanted = [word for word in words(query) if len(word.encode()) <= longest]
    if not wanted:
        return []
    key = db_text(conversation_id)
    prefix = pg.owner_prefix(key)

    def work(conn: Any) -> list[Any]:
        # As before the change: plans made for the values given, JIT as the server's default.
        conn.execute('SET plan_cache_mode = force_custom_plan')
        conn.execute('SET jit = on')
        try:
            return statements(conn)
        finally:
            conn.execute('RESET plan_cache_mode')
            conn.execute('RESET jit')

    def statements(conn: Any) -> list[Any]:
        (rows,) = _old_candidates(conn, key, [q(prefix, wanted, '')], limit)
        if rows:
            return [hit(row) for _, row in rows]
        present = (
            [bool(row[1]) for row in conn.execute(
                _OLD_PRESENT, {'key': key, 'queries': [q(prefix, [word], ':*') for word in wanted]}
            ).fetchall()]
            if len(wanted) > 1
            else [True]
        )  # fmt: skip
        if all(present):
            (rows,) = _old_candidates(conn, key, [q(prefix, wanted, ':*')], limit)
            if rows:
                return [hit(row) for _, row in rows]
        if len(wanted) == 1 or not any(present):
            return []
        held = [word for word, found in zip(wanted, present, strict=True) if found]
        for suffix in ('', ':*'):
            matches = iter(_old_candidates(conn, key, [q(prefix, [word], suffix) for word in held], 500))
            per_word = [next(matches) if found else [] for found in present]
            if any(per_word):
                return rank_any_word([[(r, hit(row)) for r, row in rows] for rows in per_word], limit)
        return []

    return store._run('search', work)  # pyright: ignore[reportPrivateUsage]


VOCABULARY = ['media', 'timeout', 'med', 'time', 'région', 'café', 'x', '100%', 'a_b', "o'neil", 'back\\slash', 'the']
ODD_QUERIES = [
    '',
    'the and of',
    '"',
    "'",
    '\\',
    '%',
    '_',
    '\x00',
    '\ud800',
    'media\x00timeout',
    "o'neil",
    'me',
    'ti me',
    'médi',
    'RÉGION café',
    'media ' * 300,
    ' '.join(f'w{i}' for i in range(200)),
    'x' * 3000,
    'media timeout zzz',
    'zzz yyy',
    'med tim',
    'a_b 100',
    '100% back\\slash',
    '*:',
    '!',
    '& | !',
    'media:* & time',
]


@pytest.fixture(scope='module')
def store() -> Any:
    s = postgres_store()
    yield s
    s.close()


@settings(
    max_examples=int(os.environ.get('PAC_EXAMPLES', '25')), deadline=None, suppress_health_check=list(HealthCheck)
)
@given(
    lines=st.lists(
        st.tuples(
            st.lists(st.sampled_from(VOCABULARY), min_size=0, max_size=4),
            st.sampled_from(['tool', 'user', 'assistant']),
            st.integers(0, 2),
        ),
        max_size=12,
    ),
    query=st.one_of(
        st.sampled_from(ODD_QUERIES),
        st.lists(st.sampled_from([*VOCABULARY, 'zz', 'me', 'ti']), max_size=4).map(' '.join),
        st.text(max_size=12),
    ),
    limit=st.sampled_from([0, 1, 2, 8, 10**6]),
)
def test_one_statement_search_gives_what_the_statements_before_gave(
    store: PostgresArchiveStore, lines: list[tuple[list[str], str, int]], query: str, limit: int
) -> None:
    """Same hits, same order, as the four statements it replaced, on the same data (ties, parts sharing a line)."""
    key = f'rev15-{uuid.uuid4().hex}'
    store.index_lines(
        [
            LogLine(key, f'p{part}', n, ' '.join(text), source, 'read_log' if source == 'tool' else '')  # pyright: ignore[reportArgumentType]
            for n, (text, source, part) in enumerate(lines)
        ]
    )
    assert store.search(key, query, limit) == _old_search(store, key, query, limit)
    # The store's connections keep their own settings (the old search's `SET`s were undone).
    settings_now = store._run('t', lambda conn: conn.execute('SHOW plan_cache_mode').fetchone()[0])  # pyright: ignore[reportPrivateUsage]
    assert settings_now == 'force_generic_plan'


@pytest.mark.parametrize('query', ODD_QUERIES)
def test_odd_queries_give_what_the_statements_before_gave(store: PostgresArchiveStore, query: str) -> None:
    key = f'rev15-{uuid.uuid4().hex}'
    store.index_lines(
        [LogLine(key, 'p', n, ' '.join(VOCABULARY[n : n + 3]), 'tool', 'read_log') for n in range(len(VOCABULARY))]
        + [LogLine(key, 'q', 0, 'media timeout', 'user')]
    )
    assert store.search(key, query, 8) == _old_search(store, key, query, 8)
    assert store.search(f'{key}-empty', query, 8) == []  # a conversation with no lines


@pytest.mark.parametrize('value', ['5', 10**100, -(10**100), float('nan'), float('inf'), 5.0, False, None])
@pytest.mark.parametrize('kind', [SQLiteArchiveStore, PostgresArchiveStore])
def test_busy_timeout_refusals_name_the_field_and_value(kind: Any, value: object, tmp_path: Any) -> None:
    target = str(tmp_path / 'x.sqlite3') if kind is SQLiteArchiveStore else POSTGRES_DSN
    with pytest.raises(ConfigurationError) as raised:
        kind(target, busy_timeout_ms=value)
    assert f'{kind.__name__}.busy_timeout_ms' in str(raised.value)
    assert repr(value)[:60] in str(raised.value)  # a long value is shown cut (`checks.fail`)


def test_a_version_1_warning_made_an_error_does_not_fail_the_run(
    application_role: tuple[str, Any],  # noqa: F811
) -> None:
    """`-W error` (or a test suite's `filterwarnings = error`) turned the version 1 warning into an exception
    that escaped the store (`_run` turns only driver errors into `ArchiveError`) and failed the agent's run."""
    dsn, _ = application_role
    pg._TOLD_UNTUNED.clear()  # pyright: ignore[reportPrivateUsage]
    store = PostgresArchiveStore(dsn)
    try:
        agent, _ = memory_agent(store, 'a', [[ToolCallPart('recall', {'query': 'media timeout'})], [TextPart('done')]])
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            assert agent.run_sync('go').output == 'done'
        assert 'media timeout_ms = 1050' in [hit.text for hit in store.search('a', 'media timeout_ms 1050')]
    finally:
        store.close()


def test_a_store_failure_warning_made_an_error_does_not_fail_the_run() -> None:
    store = PostgresArchiveStore('postgresql://nobody@127.0.0.1:1/none', connect_timeout=0.2)
    try:
        agent, _ = memory_agent(store, 'a', [[ToolCallPart('recall', {'query': 'media'})], [TextPart('done')]])
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            assert agent.run_sync('go').output == 'done'
    finally:
        store.close()


def test_two_spellings_of_one_database_warn_once(application_role: tuple[str, Any]) -> None:  # noqa: F811
    """Once per database per process: `127.0.0.1` and `localhost` name the same database."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    dsn, _ = application_role
    other = make_conninfo('', **{**conninfo_to_dict(dsn), 'host': 'localhost'})
    assert other != dsn
    pg._TOLD_UNTUNED.clear()  # pyright: ignore[reportPrivateUsage]
    told: list[str] = []
    for target in (dsn, other, dsn):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            s = PostgresArchiveStore(target)
            try:
                s.search('a', 'timeout')
            finally:
                s.close()
        told += [str(w.message) for w in caught if 'schema version 1' in str(w.message)]
    assert len(told) == 1


@pytest.mark.parametrize('query', ['istanbul', 'İstanbul office'])
def test_the_three_stores_find_the_same_lines_for_a_dotted_capital(query: str) -> None:
    # `İ` lowercases to `i` and a combining dot, which split the word for the memory and PostgreSQL stores (`i`,
    # `stanbul`) while SQLite's tokenizer read `istanbul`: the stores found different lines.
    from pydantic_ai_compaction.runtime.stores import InMemoryArchiveStore

    key = f'rev15-{uuid.uuid4().hex}'
    lines = [LogLine(key, 'p', 0, 'İstanbul office', 'tool', 't'), LogLine(key, 'p', 1, 'office hours', 'tool', 't')]
    found: list[list[str]] = []
    for s in (postgres_store(), SQLiteArchiveStore(':memory:'), InMemoryArchiveStore()):
        try:
            s.index_lines(lines)
            found.append([hit.text for hit in s.search(key, query, 8)])
        finally:
            close = getattr(s, 'close', None)
            if close is not None:
                close()
    assert found == [['İstanbul office']] * 3


UNSPACED_LINES = (
    '服务器超时设置为30秒',
    '東京タワーの高さは333メートル',
    '데이터베이스비밀번호변경됨',
    'timeout set to 30s',
)


@pytest.mark.parametrize(
    ('query', 'found'),
    [
        ('超时', [0]),
        ('30秒', [0]),
        ('タワー', [1]),
        ('高さ 333', [1]),
        ('メートル', [1]),
        ('비밀번호', [2]),
        ('東京', [1]),
        ('大阪', []),
        ('タワ タワー', [1]),
        ('30', [0]),  # a whole word first: `30s` is found as a prefix only when no line holds `30`
    ],
)
def test_every_store_finds_a_word_inside_text_written_without_spaces(query: str, found: list[int]) -> None:
    # A run of Chinese or Japanese is one sentence: read as one word, only its start was found, and recall told the
    # model "no match anywhere" for any word within it.
    from pydantic_ai_compaction.runtime.stores import InMemoryArchiveStore

    key = f'unspaced-{uuid.uuid4().hex}'
    lines = [LogLine(key, f'p{n}', 0, text, 'tool', 'read_log') for n, text in enumerate(UNSPACED_LINES)]
    for s in (postgres_store(), SQLiteArchiveStore(':memory:'), InMemoryArchiveStore()):
        try:
            s.index_lines(lines)
            hits = s.search(key, query, 8)
            assert sorted(UNSPACED_LINES.index(hit.text) for hit in hits) == found, (type(s).__name__, hits)
        finally:
            close = getattr(s, 'close', None)
            if close is not None:
                close()


@pytest.mark.parametrize('setting', ['statement_timeout=12345', 'search_path=public,pg_catalog'])
def test_the_dsns_own_session_options_are_kept(setting: str) -> None:
    """The store's `options` (lock timeout, generic plans, no JIT) replaced those of the DSN: a user's
    `options=-c statement_timeout=...` was silently dropped."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    postgres_store().close()  # skips without a server
    name, value = setting.split('=')
    dsn = make_conninfo('', **{**conninfo_to_dict(POSTGRES_DSN), 'options': f'-c {setting}'})
    s = PostgresArchiveStore(dsn, busy_timeout_ms=250)
    try:
        shown = s._run(
            't', lambda conn: [conn.execute(f'SHOW {n}').fetchone()[0] for n in (name, 'lock_timeout', 'jit')]
        )  # pyright: ignore[reportPrivateUsage]
        assert shown == [value if name != 'statement_timeout' else '12345ms', '250ms', 'off']
    finally:
        s.close()


def test_every_store_finds_the_end_of_a_long_line_written_without_spaces() -> None:
    # Its words are its pairs of characters: at 400 KB of terms a line lost those past about 15,000 characters on
    # PostgreSQL, while the other stores found them.
    import random

    from pydantic_ai_compaction.runtime.stores import InMemoryArchiveStore

    rng = random.Random(5)
    text = '。'.join(''.join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(30)) for _ in range(700))
    assert len(text) > 21_000
    query = text[-30:-26]
    key = f'long-unspaced-{uuid.uuid4().hex}'
    line = LogLine(key, 'p', 0, text, 'tool', 'read_log')
    found: list[int] = []
    for s in (postgres_store(), SQLiteArchiveStore(':memory:'), InMemoryArchiveStore()):
        try:
            s.index_lines([line])
            found.append(len(s.search(key, query, 8)))
        finally:
            close = getattr(s, 'close', None)
            if close is not None:
                close()
    assert found == [1, 1, 1]
