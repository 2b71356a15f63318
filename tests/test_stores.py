"""The store contract, on memory, SQLite and PostgreSQL alike."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from pydantic_ai_compaction.protocols.archive import ArchivedResult, ArchiveError, LogLine, Note


def conversation() -> str:
    return f'conv-{uuid.uuid4().hex}'


def entry(conversation_id: str, ref: str, payload: bytes = b'\x00\xffbinary\n') -> ArchivedResult:
    return ArchivedResult(
        conversation_id, ref, 'r1', 'read_file', 'call-1', '{"path": "a"}', payload, 'a note', '2026-01-01'
    )


def test_counters_reserve_consecutive_numbers_per_conversation(store: Any) -> None:
    a, b = conversation(), conversation()
    assert store.next_numbers(a, 'result', 3) == [1, 2, 3]
    assert store.next_numbers(a, 'result', 2) == [4, 5]
    assert store.next_numbers(a, 'archive', 1) == [1]
    assert store.next_numbers(b, 'result', 1) == [1]


def test_archived_round_trip_is_byte_exact_and_private(store: Any) -> None:
    a, b = conversation(), conversation()
    payload = bytes(range(256)) * 3
    store.put_archived([entry(a, 'a1', payload), entry(a, 'a2')])
    got = store.get_archived(a, 'a1')
    assert got is not None and got.payload == payload and got.note == 'a note'
    assert store.get_archived(b, 'a1') is None  # another conversation cannot read it
    assert store.get_archived(a, 'a9') is None


def test_a_failing_batch_stores_nothing(store: Any) -> None:
    a = conversation()
    store.put_archived([entry(a, 'a1')])
    with pytest.raises(ArchiveError):
        store.put_archived([entry(a, 'a2'), entry(a, 'a1')])  # a1 exists: the whole batch fails
    assert store.get_archived(a, 'a2') is None


def test_notes_in_order(store: Any) -> None:
    a = conversation()
    store.add_note(a, Note('decision', 'use the v2 API'))
    store.add_note(a, Note('rejected', 'caching the token: it expires'))
    assert store.notes(a) == [Note('decision', 'use the v2 API'), Note('rejected', 'caching the token: it expires')]
    assert store.notes(conversation()) == []


def report_lines(conversation_id: str) -> list[LogLine]:
    body = (
        ['== diag.py media ==']
        + [f'check disk_{n} ... ok' for n in range(40)]
        + ['timeout_ms = 1050', 'region = eu-west-2']
    )
    return [
        LogLine(conversation_id, 'part-media', n, text, 'tool', 'run_diagnostics', '{"service": "media"}', 'r4')
        for n, text in enumerate(body)
    ] + [LogLine(conversation_id, 'part-user', 0, 'what is the media timeout?', 'user')]


def test_recall_matches_words_against_the_line_and_its_call(store: Any) -> None:
    a = conversation()
    assert store.index_lines(report_lines(a)) == 44
    assert store.index_lines(report_lines(a)) == 0  # the same parts are indexed once
    assert store.indexed(a, ['part-media', 'part-x']) == {'part-media'}
    hits = store.search(a, 'media timeout')
    # The header naming media is 40 lines above; the call's argument carries the service.
    assert hits[0].text == 'timeout_ms = 1050'
    assert (hits[0].source, hits[0].tool_name, hits[0].result_id, hits[0].line_no) == (
        'tool',
        'run_diagnostics',
        'r4',
        41,
    )
    assert all(hit.source == 'tool' for hit in hits[:-1])  # tool output ranked first
    assert store.search(conversation(), 'media timeout') == []  # never another conversation's lines


def test_recall_falls_back_to_any_word(store: Any) -> None:
    a = conversation()
    store.index_lines(report_lines(a))
    hits = store.search(a, 'region nonexistentword')
    assert [hit.text for hit in hits] == ['region = eu-west-2']


def test_recall_prefers_whole_words_and_uses_prefixes_when_none_match(store: Any) -> None:
    a = conversation()
    texts = ['deployment of api finished', 'deploy failed on host db2', 'deployer restarted']
    store.index_lines([LogLine(a, f'part-{n}', 0, text, 'tool') for n, text in enumerate(texts)])
    # "deploy" is a whole word of one line: the lines where it only starts a word are weaker hits, left out.
    assert [hit.text for hit in store.search(a, 'deploy')] == ['deploy failed on host db2']
    # "depl" is no line's word: every line it starts a word of matches, newest first among equals.
    assert sorted(hit.text for hit in store.search(a, 'depl')) == sorted(texts)


def test_recall_finds_the_rare_value_of_a_query_behind_many_matches_of_a_common_word(store: Any) -> None:
    a = conversation()
    # No line holds both words; 799 newer lines hold "timeout", one older line the query's specific value.
    lines = [LogLine(a, 'f0', 0, 'ticket inc42 failed on db', 'tool', 'read', '{}', 'r1')]
    lines += [LogLine(a, f'f{i}', i, f'request {i} timeout retried', 'tool', 'read', '{}', 'r2') for i in range(1, 800)]
    store.index_lines(lines)
    hits = store.search(a, 'timeout inc42')
    assert len(hits) == 8 and hits[0].text == 'ticket inc42 failed on db'
    # The rest are the newest "timeout" lines; the words of a query weigh by how rare they are in the log.
    assert [hit.line_no for hit in hits[1:]] == list(range(799, 792, -1))
    assert store.search(a, 'request timeout inc42')[0].line_no == 0  # two common words do not outweigh it
    assert store.search(a, 'timeou inc4')[0].line_no == 0  # as prefixes too, when no whole word matches


@pytest.mark.parametrize('kind', ['sqlite', 'postgres'])
def test_sql_recall_ranks_the_newest_matches_of_a_common_word(kind: str, tmp_path: Any) -> None:
    from pydantic_ai_compaction.runtime.stores._query import SEARCH_CANDIDATES
    from tests.stores import make_store

    store = make_store(kind, tmp_path)
    try:
        a = conversation()
        # The oldest line says "alpha" three times (the best score); SEARCH_CANDIDATES newer lines once each.
        lines = [LogLine(a, 'part-0', 0, 'alpha alpha alpha oldest', 'tool')]
        lines += [LogLine(a, f'part-{n}', 0, f'alpha line {n}', 'tool') for n in range(1, SEARCH_CANDIDATES + 1)]
        store.index_lines(lines)
        hits = store.search(a, 'alpha', 3)
        # Only the newest SEARCH_CANDIDATES matches are ranked: the oldest, best-scored line is not among them.
        assert len(hits) == 3 and all('oldest' not in hit.text for hit in hits)
        assert store.search(a, 'oldest')[0].text == 'alpha alpha alpha oldest'  # a rarer word still finds it
    finally:
        store.close()


def test_the_in_memory_store_keeps_its_state_out_of_repr_and_the_constructor() -> None:
    from pydantic_ai_compaction.runtime.stores import InMemoryArchiveStore

    store = InMemoryArchiveStore()
    a = conversation()
    store.put_archived([entry(a, 'a1', b'sk-secret-payload')])
    store.add_note(a, Note('fact', 'the password is hunter2'))
    store.index_lines([LogLine(a, 'part-0', 0, 'token = tok-secret-line', 'tool')])
    shown = repr(store)
    assert 'secret' not in shown and 'hunter2' not in shown
    assert shown == 'InMemoryArchiveStore()'
    with pytest.raises(TypeError):
        InMemoryArchiveStore(_lock=None)  # pyright: ignore[reportCallIssue]


def test_the_postgres_store_without_its_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from pydantic_ai_compaction.runtime.stores import PostgresArchiveStore

    monkeypatch.setitem(sys.modules, 'psycopg_pool', None)  # what an install without the extra looks like
    with pytest.raises(ImportError, match=r'pip install "pydantic-ai-compaction\[postgres\]"'):
        PostgresArchiveStore('postgresql://postgres@127.0.0.1/x')
