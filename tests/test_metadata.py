"""The metadata schema: typed readers that never crash on a forged or legacy value, writers that keep the rest."""

from __future__ import annotations

from pydantic_ai.messages import CompactionPart

from pydantic_ai_compaction import METADATA_KEY
from pydantic_ai_compaction.protocols.metadata import (
    MessageMarks,
    ResultMarks,
    exchange_stamp,
    is_handoff,
    is_restatement_mark,
    record_from_metadata,
)
from pydantic_ai_compaction.runtime import our_record


def test_marks_round_trip_and_keep_every_other_key() -> None:
    metadata = {'theirs': 1, METADATA_KEY: {'future_key': 'kept'}}
    written = MessageMarks(exchange='g4', reasoning='dropped', thinking_chars=0).to_metadata(metadata)
    assert written == {
        'theirs': 1,
        METADATA_KEY: {'future_key': 'kept', 'exchange': 'g4', 'reasoning': 'dropped', 'thinking_chars': 0},
    }
    assert metadata == {'theirs': 1, METADATA_KEY: {'future_key': 'kept'}}  # a copy, never edited in place
    assert MessageMarks.from_metadata(written) == MessageMarks('g4', 'dropped', 0, None)
    assert exchange_stamp(written) == 'g4'
    results = ResultMarks(result_id='r7', cleared=True).to_metadata(None)
    assert results == {METADATA_KEY: {'result_id': 'r7', 'cleared': True}}
    assert ResultMarks.from_metadata(results) == ResultMarks(result_id='r7', cleared=True)


def test_forged_values_read_as_absent() -> None:
    forged = {METADATA_KEY: {'exchange': 7, 'reasoning': ['x'], 'thinking_chars': True, 'cleared': 'yes'}}
    assert MessageMarks.from_metadata(forged) == MessageMarks()
    assert ResultMarks.from_metadata(forged) == ResultMarks()
    for junk in (None, 'text', 3, [METADATA_KEY], {METADATA_KEY: 'restatement!'}, {METADATA_KEY: None}):
        assert MessageMarks.from_metadata(junk) == MessageMarks()
        assert record_from_metadata(junk) is None
        assert not is_handoff(junk)
    assert is_restatement_mark({METADATA_KEY: 'restatement'})
    assert not is_restatement_mark({METADATA_KEY: {'restatement': True}})


def test_a_record_keeps_only_well_typed_fields() -> None:
    record = {
        'strategy': 'fork',
        'kept': ['g1', 2, None],
        'next_id': -3,
        'sequence': True,
        'detail': 5,
        'extra': {'notes': ['[fact] a', {'x': 1}], 'mine': 1},
    }
    part = CompactionPart(content='s', metadata={METADATA_KEY: record})
    assert our_record(part) == {'strategy': 'fork', 'kept': ['g1'], 'extra': {'notes': ['[fact] a'], 'mine': 1}}
