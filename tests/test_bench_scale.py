"""The memory-scale and import-cost sections of `make bench`, on a small log."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai_compaction_bench import scale, startup

from pydantic_ai_compaction.runtime.stores import SQLiteArchiveStore


def test_scale_builds_the_log_concurrently_and_times_both_queries(tmp_path: Path) -> None:
    path = tmp_path / 'scale.sqlite3'
    result = scale.run_backend(
        'SQLite', lambda: SQLiteArchiveStore(path), lambda: path.stat().st_size, total_tokens=100_000, queries=16
    )
    # 100K tokens of 8,000-character results: 6 per conversation, 8 conversations.
    assert result.tokens == 6 * 8 * 8_000 // 4
    assert 0 < result.recall_p50 <= result.recall_p95 and 0 < result.recover_p50 <= result.recover_p95
    assert result.bytes_per_million > 1_000_000  # every line indexed and every result archived: megabytes
    store = SQLiteArchiveStore(path)
    try:
        # Every conversation's log is there, and only its own lines come back.
        for conversation in range(scale.CONVERSATIONS):
            hits = store.search(f'conv-{conversation}', f'conversation {conversation}', 8)
            assert hits and all(hit.text.endswith(f'of conversation {conversation} ===') for hit in hits)
        assert store.get_archived('conv-3', 'a6') is not None and store.get_archived('conv-3', 'a999') is None
    finally:
        store.close()
    line = scale.table([result]).splitlines()[-1]
    assert line.startswith('| SQLite | 96,000 |') and line.count('met') == 2
    assert result.timed_seconds > 0 and f'| {result.writes_during:,} in {result.timed_seconds:.1f} s |' in line
    detail = scale.detail_table([result]).splitlines()
    # One row per query (each timed twice in 16 rounds of 8 queries), then the store's own read, then the anchor.
    assert [row.split(' | ')[0] for row in detail[2:-2]] == [f'| `{q.format(c=0)}`' for q in scale.QUERIES]
    assert result.recall_by_query['request_id'][0] > 0 and 0 < result.store_read[0] <= result.store_read[1]
    assert detail[-1].startswith('| (anchor: fixed Python work, no store) | ')
    assert 0 < result.anchor[0] <= result.anchor[1]


def test_a_fixed_schedule_keeps_the_rate_whatever_a_write_takes() -> None:
    every = scale.WRITE_EVERY
    # `after`: the next result WRITE_EVERY after this one was written, however long the write took.
    assert scale.next_write(10.0, 10.0 + every / 2, 'after') == pytest.approx((10.0 + every * 1.5, every))
    # `fixed`: due one interval after the previous due time, less the write's own time ...
    due, pause = scale.next_write(10.0, 10.0 + every / 4, 'fixed')
    assert (due, pause) == pytest.approx((10.0 + every, every * 0.75))
    # ... and at once when the write took longer than the interval (no burst of results to catch up).
    assert scale.next_write(10.0, 10.0 + every * 3, 'fixed') == pytest.approx((10.0 + every * 3, 0.0))


def test_an_unknown_schedule_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(scale, 'SCHEDULE', 'often')
    with pytest.raises(ValueError, match="PAC_SCALE_SCHEDULE must be 'after' or 'fixed', got 'often'"):
        scale.run_backend('SQLite', lambda: SQLiteArchiveStore(tmp_path / 'x.sqlite3'), lambda: 1, built_in=1.0)


def test_import_rows_are_judged_against_the_ten_percent_bound() -> None:
    row = startup.Timing('x', 105.0, 10, 'import pydantic_ai', 100.0, 9, True)
    assert (round(row.ratio, 2), row.verdict) == (1.05, 'met')
    assert startup.Timing('x', 111.0, 10, 'a', 100.0, 9, True).verdict == 'not met'
    assert startup.Timing('x', 300.0, 10, 'a', 100.0, 9, False).verdict == '–'


def test_a_server_store_s_round_trip_floor_is_timed_beside_each_recall(tmp_path: Path) -> None:
    path = tmp_path / 'scale.sqlite3'
    trips: list[int] = []
    result = scale.run_backend(
        'SQLite',
        lambda: SQLiteArchiveStore(path),
        lambda: path.stat().st_size,
        total_tokens=100_000,
        queries=16,
        round_trip=lambda: trips.append(1),
    )
    assert len(trips) == 16  # once per recall, in the same loop
    assert result.round_trip is not None and 0 < result.round_trip[0] <= result.round_trip[1]
    detail = scale.detail_table([result]).splitlines()
    assert detail[-1].startswith('| (round trip: `SELECT 1`, no work, own connection) | ')
    assert detail[-2].startswith('| (anchor: fixed Python work, no store) | ')
