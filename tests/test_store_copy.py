"""PostgreSQL writes a log's new lines with `COPY`: exactly the rows, ids and hits a row-by-row `INSERT` gave."""

from __future__ import annotations

import os
import uuid
from typing import Any

import psycopg
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pydantic_ai_compaction.protocols.archive import LineSource, LogLine
from pydantic_ai_compaction.runtime.stores import PostgresArchiveStore
from pydantic_ai_compaction.runtime.stores import postgres as postgres_module
from pydantic_ai_compaction.runtime.stores._query import db_text, index_text, line_context

from .stores import POSTGRES_DSN, postgres_store

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '25'))

TEXT = st.text(st.sampled_from('ab Z1_\t\n\r\\\x00\'".:;é\u212a\ud800\U0001f600|,'), max_size=14)
"""Letters, digits and what `COPY`'s text format escapes or splits on (tab, newlines, backslash), quotes, a NUL,
a lone surrogate and characters outside ASCII."""

SOURCES: list[LineSource] = ['tool', 'user']

_INSERT = (
    'INSERT INTO pac_log (conversation_id, text, context, source, tool_name, args, result_id, line_no, owned_terms) '
    'VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::tsvector)'
)


def _insert_one_by_one(store: PostgresArchiveStore, lines: list[LogLine]) -> int:
    """How the store wrote lines before `COPY`: the parts registered, then one `INSERT` per line of a new part."""

    def work(conn: Any) -> int:
        with conn.transaction():
            fresh: dict[tuple[str, str], bool] = {}
            rows: list[tuple[Any, ...]] = []
            for line in lines:
                key = (db_text(line.conversation_id), db_text(line.fingerprint))
                if key not in fresh:
                    fresh[key] = (
                        conn.execute(
                            'INSERT INTO pac_indexed_parts (conversation_id, fingerprint) VALUES (%s, %s) '
                            'ON CONFLICT DO NOTHING RETURNING 1',
                            key,
                        ).fetchone()
                        is not None
                    )
                if fresh[key]:
                    text, context = index_text(line.text), line_context(line)
                    terms = postgres_module._owned_terms(postgres_module.owner_prefix(key[0]), f'{text} {context}')  # pyright: ignore[reportPrivateUsage]
                    rows.append(
                        (key[0], text, context, line.source, index_text(line.tool_name), index_text(line.args),
                         index_text(line.result_id), line.line_no, terms)
                    )  # fmt: skip
            with conn.cursor() as cursor:
                cursor.executemany(_INSERT, rows)
        return len(rows)

    return store._run('index_lines', work)  # pyright: ignore[reportPrivateUsage]


def _stored(key: str) -> list[tuple[Any, ...]]:
    """The conversation's lines in id order, its search words without the conversation's prefix."""
    prefix = postgres_module.owner_prefix(key)
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        rows = conn.execute(
            'SELECT text, context, source, tool_name, args, result_id, line_no, '
            'replace(owned_terms::text, %s, %s) FROM pac_log WHERE conversation_id = %s ORDER BY id',
            (prefix, '~', key),
        ).fetchall()
    return [tuple(row) for row in rows]


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    parts=st.lists(
        st.lists(st.tuples(TEXT, TEXT, st.sampled_from(SOURCES)), min_size=1, max_size=4),
        min_size=1,
        max_size=4,
    ),
    again=st.lists(st.integers(0, 3), max_size=2),
    query=st.sampled_from(['ab', 'z1', 'é', 'a b', 'kab', 'ab zz']),
)
@example(parts=[[('a\\b\tc\nd\re', '\\N', 'tool')], [('\\.', 'x\x00y', 'user')]], again=[1], query='a b')
def test_postgres_lines_written_by_copy_are_the_lines_insert_wrote(
    parts: list[list[tuple[str, str, LineSource]]], again: list[int], query: str
) -> None:
    store = postgres_store()
    copied, inserted = f'copy-{uuid.uuid4().hex}', f'insert-{uuid.uuid4().hex}'

    def lines(key: str, numbers: list[int]) -> list[LogLine]:
        return [
            LogLine(key, f'part-{n}', line_no, text, source, 'read\tlog', args, f'r{n}')
            for n in numbers
            for line_no, (text, args, source) in enumerate(parts[n % len(parts)], start=1)
        ]

    try:
        first = list(range(len(parts)))
        # A second batch repeats some parts (already indexed: left out) beside a new one.
        second = [*again, len(parts)]
        assert store.index_lines(lines(copied, first)) == _insert_one_by_one(store, lines(inserted, first))
        assert store.index_lines(lines(copied, second)) == _insert_one_by_one(store, lines(inserted, second))
        assert _stored(copied) == _stored(inserted)
        # Every line of a new part (each time the batch lists it), none of a part indexed before.
        new = first + [n for n in second if n >= len(parts)]
        assert len(_stored(copied)) == sum(len(parts[n % len(parts)]) for n in new)
        # The hits are the same (texts, calls, scores, in the same order), as the ids follow the same order.
        assert store.search(copied, query, 20) == store.search(inserted, query, 20)
    finally:
        store.close()


def test_postgres_parts_written_by_many_writers_at_once_are_indexed_once() -> None:
    """Eight writers send overlapping batches of the same parts, each in its own order: every part's lines are in
    the log once, in their order, and no writer fails (parts are registered in one order, so none deadlocks)."""
    import random
    import threading

    key = f'many-{uuid.uuid4().hex}'
    parts = [[LogLine(key, f'part-{n}', no, f'line {no} of {n}', 'tool', 't', '{}', f'r{n}') for no in (1, 2, 3)]
             for n in range(12)]  # fmt: skip
    failures: list[BaseException] = []
    added: list[int] = []

    def write(seed: int) -> None:
        store = postgres_store()
        try:
            order = random.Random(seed).sample(range(len(parts)), len(parts))
            for start in range(0, len(order), 4):
                added.append(store.index_lines([line for n in order[start : start + 4] for line in parts[n]]))
        except BaseException as error:
            failures.append(error)
        finally:
            store.close()

    writers = [threading.Thread(target=write, args=(seed,)) for seed in range(8)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert failures == []
    assert sum(added) == 3 * len(parts)
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        rows = conn.execute('SELECT text FROM pac_log WHERE conversation_id = %s ORDER BY id', (key,)).fetchall()
    texts = [row[0] for row in rows]
    assert sorted(texts) == sorted(line.text for part in parts for line in part)
    for n in range(len(parts)):  # a part's lines keep their order
        assert [text for text in texts if text.endswith(f' of {n}')] == [f'line {no} of {n}' for no in (1, 2, 3)]
