"""`runtime.carry`: a view's projection, written as a record and read back, is the projection it was."""

from __future__ import annotations

import itertools
import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    BaseToolReturnPart,
    CompactionPart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    repair_messages,
)

from pydantic_ai_compaction.protocols.metadata import ResultMarks
from pydantic_ai_compaction.runtime import carry

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def restub(part: BaseToolReturnPart, text: str) -> BaseToolReturnPart:
    return replace(part, content=text, metadata=ResultMarks(cleared=True).to_metadata(part.metadata))


def history(steps: int) -> list[ModelMessage]:
    """A prompt, then *steps* steps of two calls each, the results in one request with a user part beside them."""
    out: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('go', timestamp=T0)], timestamp=T0)]
    for step in range(steps):
        at = T0 + timedelta(seconds=step + 1)
        ids = [f's{step}a', f's{step}b']
        out.append(ModelResponse(parts=[ToolCallPart('read', {'n': step}, tool_call_id=i) for i in ids], timestamp=at))
        returns: list[Any] = [ToolReturnPart('read', f'output {i} ' * 40, tool_call_id=i, timestamp=at) for i in ids]
        out.append(ModelRequest(parts=[*returns, UserPromptPart(f'note {step}', timestamp=at)], timestamp=at))
    return out


@st.composite
def projections(draw: st.DrawFn) -> tuple[list[ModelMessage], list[ModelMessage]]:
    """A history and a projection of it: messages kept, dropped, split into their parts, results stubbed, and
    boundaries the view made, in order."""
    covered = history(draw(st.integers(1, 6)))
    projection: list[ModelMessage] = []
    for message in covered:
        if draw(st.booleans()):
            projection.append(ModelRequest(parts=[CompactionPart(content=draw(st.text(max_size=20)))]))
        action = draw(st.sampled_from(['keep', 'drop', 'derive']))
        if action == 'keep' or (action == 'derive' and isinstance(message, ModelResponse)):
            projection.append(message)
        elif action == 'derive':
            chosen = draw(st.lists(st.sampled_from(range(len(message.parts))), min_size=1, unique=True).map(sorted))
            parts = [
                restub(part, draw(st.text(min_size=1, max_size=30)))
                if isinstance(part, ToolReturnPart) and draw(st.booleans())
                else part
                for part in (message.parts[i] for i in chosen)
            ]
            projection.append(replace(message, parts=parts))
    return covered, projection


def saved(covered: list[ModelMessage], projection: list[ModelMessage], written: set[str]) -> list[ModelMessage]:
    """*covered*, then a response carrying the record of *projection*, as a history saved and loaded back."""
    ops, new = carry.encode(projection, covered, restub, written)
    value, _ = carry.record('V', len(covered), carry.content_digest(covered), ops, new, {'note': 'n'})
    out = [*covered, carry.with_record(ModelResponse(parts=[TextPart('ok')], timestamp=T0), value)]
    return ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(out))


@settings(max_examples=150, deadline=None)
@given(projections())
def test_a_projection_read_back_is_the_projection_written(case: tuple[list[ModelMessage], list[ModelMessage]]) -> None:
    covered, projection = case
    loaded = saved(covered, projection, set())
    carried = carry.read(loaded, 'V', restub)
    assert carried is not None
    assert (carried.covers, carried.state) == (len(covered), {'note': 'n'})
    assert carried.messages == ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(projection))
    # Messages shown as they are are the loaded history's own objects (a view compares them by identity).
    kept = [m for m in projection if any(m is c for c in covered)]
    assert sum(any(m is c for c in loaded) for m in carried.messages) == len(kept)


def test_a_made_message_is_written_once_and_found_in_the_record_that_holds_it() -> None:
    h = history(3)
    responses = [m for m in h if isinstance(m, ModelResponse)]
    boundary = ModelRequest(parts=[CompactionPart(content='note')])
    # The first request to send the boundary: its response carries the boundary whole.
    ops, new = carry.encode([h[0], boundary, h[2]], h[:3], restub, set())
    assert list(new) == [ops[1]['new']]
    first_value, first_base = carry.record('V', 3, carry.content_digest(h[:3]), ops, new, {})
    first = carry.with_record(responses[1], first_value)
    # A later projection shows the same boundary: its record names it without writing it again.
    covered = [*h[:3], first, h[4]]
    later_ops, later_new = carry.encode([h[0], boundary, *covered[2:]], covered, restub, set(new))
    assert later_new == {} and later_ops[1] == ops[1]
    later_value, _ = carry.record('V', 5, carry.content_digest(covered), later_ops, later_new, {}, first_base)
    # It starts from the first record: its first two entries are named, not repeated.
    assert later_value['messages'][0] == {'base': first_base.id, 'count': 2}
    later = carry.with_record(responses[2], later_value)
    log = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json([*covered, later, h[6]]))
    carried = carry.read(log, 'V', restub)
    assert carried is not None and carried.covers == 5
    assert carried.messages == [log[0], boundary, *log[2:5]] and carried.written == set(new)
    # Without the first record, the boundary cannot be rebuilt: nothing of the later one is used.
    stripped = [replace(log[3], metadata=None), *log[4:]]
    assert carry.read([*log[:3], *stripped], 'V', restub) is None


def test_a_record_of_another_owner_or_none_reads_as_none() -> None:
    covered = history(1)
    ops, new = carry.encode(covered, covered, restub, set())
    log = [
        *covered,
        carry.with_record(ModelResponse(parts=[TextPart('a')]), carry.record('V', 3, 'x', ops, new, {})[0]),
    ]
    assert carry.read(log, 'W', restub) is None
    assert carry.read(covered, 'V', restub) is None


def test_a_record_on_a_streamed_step_s_request_covers_that_request_and_no_message_after_it() -> None:
    covered = history(2)
    step, result = covered[-1], covered[-1].parts[0]
    assert isinstance(step, ModelRequest) and isinstance(result, ToolReturnPart)
    stubbed = replace(step, parts=[restub(result, '[cleared]'), *step.parts[1:]])
    ops, new = carry.encode([*covered[:-1], stubbed], covered, restub, set())
    value, _ = carry.record('V', len(covered), carry.content_digest(covered), ops, new, {'note': 'n'})
    carry.on_request(step, value)  # in place: the request `run_stream`'s history holds
    assert covered[-1] is step and carry.read(covered, 'V', restub) is not None
    loaded = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(covered))
    carried = carry.read(loaded, 'V', restub)
    assert carried is not None and carried.covers == len(covered)
    shown = carried.messages[-1].parts[0]
    assert carried.messages[:-1] == loaded[:-1] and isinstance(shown, ToolReturnPart) and shown.content == '[cleared]'
    # A record claiming more than the messages up to its own request (forged, or moved) is not used.
    forged, _ = carry.record('V', len(covered) + 1, carry.content_digest([*covered, covered[0]]), ops, new, {})
    carry.on_request(step, forged)
    assert carry.read([*covered, covered[0]], 'V', restub) is None


def test_the_newest_record_whose_history_is_unchanged_is_read_and_none_older_than_a_change() -> None:
    h = history(3)  # prompt, then three steps: 7 messages
    first = carry.record('V', 3, carry.content_digest(h[:3]), *carry.encode(h[:3], h[:3], restub, set()), {'n': 1})[0]
    log = [*h[:3], carry.with_record(ModelResponse(parts=[TextPart('a')], timestamp=T0), first), *h[4:5]]
    second = carry.record('V', 5, carry.content_digest(log), *carry.encode(log, log, restub, set()), {'n': 2})[0]
    log = [*log, carry.with_record(ModelResponse(parts=[TextPart('b')], timestamp=T0), second), h[6]]
    newest = carry.read(log, 'V', restub)
    assert newest is not None and (newest.covers, newest.state) == (5, {'n': 2})

    def edited(index: int) -> list[ModelMessage]:
        message = log[index]
        assert isinstance(message, ModelRequest)
        return [*log[:index], replace(message, parts=[UserPromptPart('changed', timestamp=T0)]), *log[index + 1 :]]

    # Changed after the first record's history (pydantic-ai's result for a call a rejection left without one, an
    # edit): the first record is read.
    earlier = carry.read(edited(4), 'V', restub)
    assert earlier is not None and (earlier.covers, earlier.state) == (3, {'n': 1})
    assert earlier.messages == log[:3]
    # Changed within it: none is read.
    assert carry.read(edited(2), 'V', restub) is None


def test_a_chain_of_records_a_thousand_deep_is_read_and_a_new_one_is_written_in_full_past_the_bound() -> None:
    # Written before records were bounded (`MAX_CHAIN`): a chat that only clears names the record before at every
    # record. Each link was a call: past the interpreter's recursion limit the read failed, and every request of the
    # chat's later runs went out unprojected (2,403 messages to a 4,000-token window).
    h = history(800)
    length = len(h)
    digest = carry.content_digest(h)
    log = list(h)
    previous: str | None = None
    for count in range(1, 1_501):
        ops: list[Any] = [[count - 1, count]] if previous is None else [{'base': previous, 'count': count - 1}]
        if previous is not None:
            ops.append([count - 1, count])
        value: dict[str, Any] = {'owner': 'V', 'id': f'r{count}', 'covers': length, 'digest': digest, 'messages': ops}
        log.append(
            carry.with_record(ModelResponse(parts=[TextPart('ok')], timestamp=T0), {**value, 'new': {}, 'state': {}})
        )
        previous = f'r{count}'
    carried = carry.read(log, 'V', restub)
    assert carried is not None and carried.covers == length and carried.messages == h[:1_500]
    assert carried.base is not None and carried.base.depth == 1_499
    # The next record starts a chain of its own: it is written in full, and the one after names it.
    full, base = carry.record('V', length, digest, [[0, 1], [1, 2], [2, 3]], {}, {}, carried.base)
    assert full['messages'] == [[0, 1], [1, 2], [2, 3]] and base.depth == 0
    chained, _ = carry.record('V', length, digest, [[0, 1], [1, 2], [2, 3], [3, 4]], {}, {}, base)
    assert chained['messages'] == [{'base': base.id, 'count': 3}, [3, 4]]


def turns(draw: st.DrawFn) -> list[ModelMessage]:
    """A chat as one run holds it before the next starts: each turn a prompt, steps whose results may have a user part
    between them (a `ToolReturn`'s content), and often a structured output's "Final result processed." request,
    which the next turn's prompt follows (two requests in a row); now and then an empty request, and instructions
    that differ (pydantic-ai merges requests only when theirs agree)."""
    out: list[ModelMessage] = []
    calls = itertools.count()
    for turn in range(draw(st.integers(1, 4))):
        instructions = draw(st.sampled_from([None, 'be brief', 'be thorough']))
        out.append(ModelRequest(parts=[UserPromptPart(f'turn {turn}', timestamp=T0)], instructions=instructions))
        if draw(st.booleans()):
            out.append(ModelRequest(parts=[]))
        for _ in range(draw(st.integers(0, 2))):
            ids = [f'c{next(calls)}' for _ in range(draw(st.integers(1, 3)))]
            out.append(ModelResponse(parts=[ToolCallPart('read', {'n': 1}, tool_call_id=i) for i in ids]))
            parts: list[Any] = []
            for i in ids:
                parts.append(ToolReturnPart('read', f'output {i} ' * 20, tool_call_id=i, timestamp=T0))
                if draw(st.booleans()):
                    parts.append(UserPromptPart(f'attached to {i}', timestamp=T0))
            out.append(ModelRequest(parts=parts, instructions=instructions))
        if draw(st.booleans()):
            final = f'f{next(calls)}'
            out.append(ModelResponse(parts=[ToolCallPart('final_result', {'said': 'x'}, tool_call_id=final)]))
            out.append(
                ModelRequest(parts=[ToolReturnPart('final_result', 'Final result processed.', tool_call_id=final)])
            )
    return out


@st.composite
def settled_cases(draw: st.DrawFn) -> tuple[list[ModelMessage], list[ModelMessage]]:
    covered = turns(draw)
    projection: list[ModelMessage] = []
    for message in covered:
        if draw(st.integers(0, 5)) == 0:
            projection.append(ModelRequest(parts=[CompactionPart(content='note')]))
        action = draw(st.sampled_from(['keep', 'keep', 'drop', 'derive']))
        if action == 'keep' or (action == 'derive' and (isinstance(message, ModelResponse) or not message.parts)):
            projection.append(message)
        elif action == 'derive':
            chosen = draw(st.lists(st.sampled_from(range(len(message.parts))), min_size=1, unique=True).map(sorted))
            projection.append(
                replace(
                    message,
                    parts=[
                        restub(part, f'[cleared {index}]')
                        if isinstance(part, ToolReturnPart) and draw(st.booleans())
                        else part
                        for index, part in ((i, message.parts[i]) for i in chosen)
                    ],
                )
            )
    return covered, projection


def wire(messages: list[ModelMessage]) -> str:
    """What pydantic-ai sends for *messages* (it makes every request provider-valid first), as the digest reads it."""
    return carry.content_digest(repair_messages(messages, repair_last_response=False))


@settings(max_examples=int(os.environ.get('PAC_EXAMPLES', '300')), deadline=None)
@given(settled_cases())
def test_a_record_names_the_messages_as_the_next_run_holds_them_and_sends_what_was_sent(
    case: tuple[list[ModelMessage], list[ModelMessage]],
) -> None:
    covered, projection = case
    ops, new = carry.encode(projection, covered, restub, set())
    # The next run holds the history pydantic-ai made provider-valid when it started, saved and loaded back.
    held = ModelMessagesTypeAdapter.validate_json(
        ModelMessagesTypeAdapter.dump_json(repair_messages(covered, repair_last_response=False))
    )
    result = carry.settled(ops, projection, covered, restub)
    if result is None:
        # Only when a merged request's parts are shown apart (a made message between them, or one message in two).
        assert any(isinstance(m, ModelRequest) and isinstance(n, ModelRequest) for m, n in itertools.pairwise(covered))
        return
    settled_ops, settled = result
    assert len(settled) == len(held) and carry.content_digest(settled) == carry.content_digest(held)
    value, _ = carry.record('V', len(settled), carry.content_digest(settled), settled_ops, new, {'note': 'n'})
    log = [*held, carry.with_record(ModelResponse(parts=[TextPart('ok')], timestamp=T0), value)]
    carried = carry.read(log, 'V', restub)
    assert carried is not None and carried.covers == len(held)
    # The next run sends what this one sent, part for part; and a range of messages the history holds as they are.
    assert wire(carried.messages) == wire(projection)
    # No message is written whole but the made ones (a user's prompt is never copied into the record).
    assert all(part['part_kind'] == 'compaction' for dumped in value['new'].values() for part in dumped['parts'])


def test_a_structured_output_s_last_request_and_the_next_prompt_are_named_as_one_request() -> None:
    prompt = ModelRequest(parts=[UserPromptPart('read log 1', timestamp=T0)])
    call = ModelResponse(parts=[ToolCallPart('final_result', {'said': 'x'}, tool_call_id='f')], timestamp=T0)
    processed = ModelRequest(parts=[ToolReturnPart('final_result', 'Final result processed.', tool_call_id='f')])
    nxt = ModelRequest(parts=[UserPromptPart('read log 2', timestamp=T0)], instructions='be brief')
    covered: list[ModelMessage] = [prompt, call, processed, nxt]
    boundary = ModelRequest(parts=[CompactionPart(content='note')])
    # Kept whole: one range; the prompt kept without the output tool's return: that part of the merged request.
    for projection, expected in [
        ([prompt, call, processed, nxt], [[0, 3]]),
        ([boundary, nxt], [{'new': ...}, {'at': 2, 'parts': [1], 'stubs': {}}]),
        ([prompt, call, replace(processed, parts=[restub(processed.parts[0], '[cleared]')]), nxt], None),
    ]:
        ops, _ = carry.encode(projection, covered, restub, set())
        result = carry.settled(ops, projection, covered, restub)
        assert result is not None
        settled_ops, settled = result
        assert len(settled) == 3 and settled[:2] == covered[:2]
        assert [p.part_kind for p in settled[2].parts] == ['tool-return', 'user-prompt']
        if expected is None:
            assert settled_ops == [[0, 2], {'at': 2, 'parts': [0, 1], 'stubs': {'0': '[cleared]'}}]
        elif isinstance(expected[0], dict):
            assert settled_ops[0] == ops[0] and settled_ops[1:] == expected[1:]
        else:
            assert settled_ops == expected
    # Nothing pydantic-ai changes: the record as it is.
    ops, _ = carry.encode(covered[:3], covered[:3], restub, set())
    assert carry.settled(ops, covered[:3], covered[:3], restub) == (ops, covered[:3])
