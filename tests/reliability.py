"""Generated histories, fuzzed compactor replies and the invariants every compaction must keep.

Shared by the quick profile in CI (`tests/test_invariants.py`) and the soak run (`make soak`).
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from pydantic_ai.messages import (
    BinaryContent,
    CompactionPart,
    FilePart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,  # pyright: ignore[reportDeprecated]
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage
from pydantic_ai_harness.compaction import estimate_token_count, pin

from pydantic_ai_compaction import (
    Fork,
    InstructionSources,
    Native,
    Reassert,
    ResetToCheckpoint,
    RetryPolicy,
    StatelessSummary,
)
from pydantic_ai_compaction.runtime import our_record, pairing_problems, segment
from pydantic_ai_compaction.runtime.shape import shape_problems
from pydantic_ai_compaction.testing import replay

PNG = BinaryContent(data=b'\x89PNG\r\n\x1a\n' + bytes(range(64)), media_type='image/png')
WORDS = st.sampled_from(
    [
        'alpha',
        'beta',
        'incident',
        'CHANGE: use lowercase',
        'owner=ayse',
        'timeout_ms = 1050',
        'x',
        'bad\udcffbyte',
        '\ud800',
    ]
)
REASONS = {
    None,
    'unparseable',
    'ambiguous',
    'schema',
    'empty',
    'oversized',
    'compactor_error',
    'context_overflow',
    'kept_all',
    'grew',
}


def _text(draw: Callable[[Any], Any], low: int = 1, high: int = 40) -> str:
    return ' '.join(draw(st.lists(WORDS, min_size=low, max_size=high)))


@st.composite
def histories(draw: Callable[[Any], Any]) -> list[ModelMessage]:
    """Tool loops with parallel and retried calls, thinking (signed and not), files and images, several
    user turns, pinned parts and earlier compaction boundaries; ends with a request, as in a run."""
    opening: ModelRequest = draw(
        st.sampled_from(
            [
                ModelRequest(parts=[SystemPromptPart('You audit logs.'), UserPromptPart(_text(draw, 3, 10))]),
                # An agent with `instructions=` and no prompt opens with a request that has no parts.
                ModelRequest(parts=[], instructions='You audit logs.'),
            ]
        )
    )
    messages: list[ModelMessage] = [opening]
    counter = 0
    boundary_number = 1000
    kinds = ['tools', 'tools', 'tools', 'retry', 'turn', 'boundary', 'pin', 'content', 'legacy', 'empty']
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(kinds))
        parts: list[ModelResponsePart] = []
        if draw(st.booleans()):
            parts.append(ThinkingPart(_text(draw), signature='sig' if draw(st.booleans()) else None))
        if kind in ('tools', 'retry'):
            calls: list[ToolCallPart] = []
            for _ in range(draw(st.integers(1, 3))):
                counter += 1
                # Integers beyond 64 bits are legal tool arguments.
                index = counter + (2**70 if draw(st.integers(0, 4)) == 0 else 0)
                calls.append(ToolCallPart('read', {'index': index}, tool_call_id=f'c{counter}'))
            if draw(st.integers(0, 5)) == 0:
                parts.append(FilePart(PNG))
            messages.append(ModelResponse(parts=[*parts, *calls], model_name='gen'))
            if kind == 'retry':
                first, *rest = calls
                messages.append(
                    ModelRequest(
                        parts=[ToolReturnPart('read', 'bad index', tool_call_id=first.tool_call_id, outcome='retried')]
                    )
                )
                counter += 1
                again = ToolCallPart('read', {'index': counter}, tool_call_id=f'c{counter}')
                messages.append(ModelResponse(parts=[again], model_name='gen'))
                calls = [again, *rest]
            returns = [
                ToolReturnPart(
                    'read',
                    [_text(draw), PNG] if draw(st.integers(0, 6)) == 0 else _text(draw, 5, 200),
                    tool_call_id=c.tool_call_id,
                )
                for c in calls
            ]
            messages.append(ModelRequest(parts=returns))
        elif kind == 'content':
            # `ToolReturn(content=...)`: a user part beside the return, created with it.
            counter += 1
            call = ToolCallPart('read', {'index': counter}, tool_call_id=f'c{counter}')
            returned = ToolReturnPart('read', 'see attachment', tool_call_id=call.tool_call_id)
            attachment = UserPromptPart(_text(draw, 5, 100), timestamp=returned.timestamp)
            messages.append(ModelResponse(parts=[*parts, call], model_name='gen'))
            messages.append(ModelRequest(parts=[returned, attachment]))
        elif kind == 'legacy':
            # A legacy retry prompt without a tool name answers the model's last text, not the user.
            messages.append(ModelResponse(parts=[TextPart(_text(draw))], model_name='gen'))
            messages.append(ModelRequest(parts=[RetryPromptPart('answer in JSON')]))  # pyright: ignore[reportDeprecated]
            messages.append(ModelResponse(parts=[TextPart('{}')], model_name='gen'))
            messages.append(ModelRequest(parts=[UserPromptPart(_text(draw, 2, 12))]))
        elif kind == 'empty':
            # `run(None, message_history=...)` after a final answer appends a request with no parts.
            messages.append(ModelResponse(parts=[*parts, TextPart(_text(draw))], model_name='gen'))
            messages.append(ModelRequest(parts=[], instructions='You audit logs.'))
        elif kind == 'turn':
            messages.append(ModelResponse(parts=[*parts, TextPart(_text(draw))], model_name='gen'))
            messages.append(ModelRequest(parts=[UserPromptPart(_text(draw, 2, 12))]))
        elif kind == 'boundary' and isinstance(messages[-1], ModelRequest):
            boundary_number += 1
            record = {
                'strategy': 'summary',
                'boundary_id': f'g{boundary_number}',
                'next_id': boundary_number + 1,
                'kept': [],
                'dropped': [],
            }
            messages.append(
                ModelRequest(
                    parts=[CompactionPart(content=_text(draw, 3, 20), metadata={'pydantic_ai_compaction': record})]
                )
            )
        elif kind == 'pin' and isinstance(messages[-1], ModelRequest):
            messages.append(ModelRequest(parts=[pin(_text(draw, 2, 8))]))
    if not isinstance(messages[-1], ModelRequest):
        messages.append(ModelRequest(parts=[UserPromptPart('continue')]))
    return messages


def fuzzed_replies(ids: list[str]) -> st.SearchStrategy[str]:
    """Fork and summary replies: valid, partly wrong, and plain garbage."""
    known = st.sampled_from(ids) if ids else st.just('g0')
    some_ids = st.lists(st.one_of(known, st.sampled_from(['g999', 'bogus', '', 'g-1'])), max_size=8)
    summary = st.fixed_dictionaries(
        {'rules': st.lists(st.text(max_size=30), max_size=3), 'facts': st.lists(st.text(max_size=30), max_size=3),
         'progress': st.text(max_size=30), 'next_step': st.text(max_size=30)}
    )  # fmt: skip
    valid = st.builds(lambda keep, s: json.dumps({'keep': keep, 'summary': s}), some_ids, summary)
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=20,
    )
    return st.one_of(
        st.just(REFERENCE),
        valid,
        valid.map(lambda text: text[: len(text) // 2]),  # truncated
        st.builds(lambda keep: 'KEEP: ' + ', '.join(keep) + '\nsummary text', some_ids),
        json_values.map(json.dumps),
        st.text(max_size=200),
        st.just('[' * 5000 + ']' * 5000),  # deeply nested
        st.just('{"keep": ["g1"], "summary": "' + 'x' * 300_000 + '"}'),  # huge
        st.just('\ud800 lone surrogate \udfff'),
        st.just(''),
    )


REFERENCE = '<reference model>'
"""A reply drawn as this uses the evaluation harness's reference model instead of a fixed text."""


def reply_model(reply: str) -> FunctionModel:
    if reply == REFERENCE:
        from pydantic_ai_compaction_bench.reference.incident import IncidentPlayer
        from pydantic_ai_compaction_bench.reference.model import ReferenceModel

        return ReferenceModel(IncidentPlayer()).model()

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # Reported usage, as a provider gives it (FunctionModel's own estimate cannot encode lone surrogates).
        return ModelResponse(parts=[TextPart(reply)], usage=RequestUsage(input_tokens=100, output_tokens=10))

    return FunctionModel(respond)


NO_WAIT = RetryPolicy(attempts=1, initial_wait=0, max_wait=0)
STRATEGIES: dict[str, Callable[[], Any]] = {
    'native': lambda: Native(retry=NO_WAIT),
    'summary': lambda: StatelessSummary(retry=NO_WAIT),
    'fork-json': lambda: Fork(variant='json', retry=NO_WAIT),
    'fork-free': lambda: Fork(variant='free', retry=NO_WAIT),
    'fork-fixed': lambda: Fork(variant='fixed', retry=NO_WAIT),
    'reassert': lambda: Reassert(Native(retry=NO_WAIT), sources=InstructionSources(markers=('CHANGE:',))),
    'reset': lambda: ResetToCheckpoint(),
}


@dataclass
class Checked:
    """What one example did."""

    compacted: bool
    fallback_reason: str | None


def compact_and_check(name: str, history: list[ModelMessage], reply: str) -> Checked:
    """Compact *history* once with strategy *name* and a model answering *reply*; assert every invariant."""
    before = copy.deepcopy(history)  # not JSON: lone surrogates have no JSON encoding
    view = segment(history)
    out = asyncio.run(replay(STRATEGIES[name](), history, model=reply_model(reply)))
    # No input part mutated.
    assert history == before
    if out is history or out == history:
        return Checked(False, None)
    assert out, 'empty history'
    assert isinstance(out[-1], ModelRequest), 'the history must end with a request'
    assert pairing_problems(out) == [], pairing_problems(out)
    # The provider shape: first message a request, last a request, no two responses in a row.
    assert shape_problems(out, before=history) == [], shape_problems(out, before=history)
    # Every message of the input belongs to exactly one exchange.
    covered = sorted({index for exchange in view.exchanges for index, _ in exchange.refs})
    assert covered == list(range(len(history)))
    records = [r for m in out for p in m.parts if (r := our_record(p)) is not None and r.get('sequence')]
    record = records[-1]
    assert record['fallback_reason'] in REASONS, record['fallback_reason']
    # Protected and unfinished exchanges are present byte-for-byte (a strategy may replace only its own boundaries).
    out_parts = {id(part) for message in out for part in message.parts}
    superseded = set(record.get('dropped') or ())
    for exchange in view.exchanges:
        if exchange.forced and exchange.id not in superseded:
            for message in view.messages_of(exchange):
                assert all(id(part) in out_parts for part in message.parts), f'{exchange.id} lost'
    # Relative order of everything kept is the original order.
    position = {id(part): index for index, message in enumerate(history) for part in message.parts}
    kept = [position[id(part)] for message in out for part in message.parts if id(part) in position]
    assert kept == sorted(kept)
    # Exchange ids stay stable and unique.
    after = segment(out)
    assert len(set(after.ids)) == len(after.ids)
    first_part = {id(view.messages_of(e)[0].parts[0]): e.id for e in view.exchanges if view.messages_of(e)[0].parts}
    for exchange in after.exchanges:
        parts = after.messages_of(exchange)[0].parts
        if parts and id(parts[0]) in first_part and exchange.kind != 'boundary':
            assert exchange.id == first_part[id(parts[0])]
    # Compaction makes the history smaller.
    assert estimate_token_count(out) < estimate_token_count(history)
    return Checked(True, record['fallback_reason'])
