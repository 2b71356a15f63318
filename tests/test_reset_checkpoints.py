"""ResetToCheckpoint's checkpoints: appended, byte-identical once written, bounded, the agent's notes not restated."""

from __future__ import annotations

import asyncio
import itertools
import os
import warnings
from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage, UsageLimits

from pydantic_ai_compaction import (
    CompactionEvent,
    ConfigurationError,
    InstructionSources,
    Reassert,
    ResetToCheckpoint,
    Trigger,
)
from pydantic_ai_compaction.processors.strategies.reset import (
    CONTINUED_HEADER,
    SECTIONS,
    _head,
    _top,
    fold_with_digests,
)
from pydantic_ai_compaction.runtime import our_record, segment
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.engine import Outcome, run_compaction
from pydantic_ai_compaction.runtime.segment import segment_fresh
from pydantic_ai_compaction.runtime.transcript import clip

from .reliability import histories
from .support import ScriptedAgentModel, log_text
from .test_reassert_reset import TRIGGER, change_agent


def _checkpoint_texts(history: Sequence[ModelMessage]) -> list[str]:
    return [p.content or '' for m in history for p in m.parts if isinstance(p, CompactionPart)]


def test_earlier_checkpoints_stay_byte_identical_across_resets() -> None:
    events: list[CompactionEvent] = []
    script = ScriptedAgentModel(logs=12)
    reset = ResetToCheckpoint(trigger=TRIGGER, sources=InstructionSources(markers=('CHANGE:',)), observer=events.append)
    change_agent(script, reset).run_sync('Audit logs 0-11.')
    compactions = [e for e in events if e.kind == 'compacted' and e.record is not None]
    assert len(compactions) >= 4
    texts = [_checkpoint_texts(e.history) for e in compactions]
    for earlier, later in itertools.pairwise(texts):
        # A reset writes one new checkpoint after the earlier ones, which stay exactly as they were sent
        # (so a provider's prompt cache still holds them), and writes nothing it already wrote.
        assert later[: len(earlier)] == earlier and len(later) == len(earlier) + 1
        assert later[-1].startswith(CONTINUED_HEADER)
        assert not set(later[-1].splitlines()[1:]) & {
            line for text in earlier for line in text.splitlines() if line.startswith('- read_log')
        }
    for event in compactions:
        assert event.record is not None and event.record.variant == 'default'
        assert 'rewrote' not in event.record.extra  # far below max_chars: never rewritten


def test_a_checkpoint_does_not_restate_the_agents_own_notes() -> None:
    state = {'step': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = state['step']
        state['step'] += 1
        note = [TextPart(f'Notes on log {step - 1}:\nINCIDENT inc-{step - 1} owner=person{step - 1}')] if step else []
        if step >= 6:
            return ModelResponse(parts=[*note, TextPart('report')])
        return ModelResponse(parts=[*note, ToolCallPart('read_log', {'index': step}, tool_call_id=f'c{step}')])

    events: list[CompactionEvent] = []
    agent = Agent(FunctionModel(respond), capabilities=[ResetToCheckpoint(trigger=TRIGGER, observer=events.append)])

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index) + f'\nINCIDENT inc-{index} owner=person{index}'

    result = agent.run_sync('Audit logs 0-5.')
    assert len([e for e in events if e.kind == 'compacted']) >= 2
    checkpoints = '\n'.join(_checkpoint_texts(result.all_messages()))
    for index in range(4):
        # The agent's note states the incident once; the facts found in the log do not state it again.
        assert checkpoints.count(f'INCIDENT inc-{index} owner=person{index}') == 1
        assert f'you: Notes on log {index}:' in checkpoints
        assert f'read_log({{"index":{index}}}) → success' in checkpoints


def _call(step: int, lines: int) -> list[ModelMessage]:
    name = 'write_file' if step % 4 == 0 else 'read_log'
    result = '\n'.join([f'=== log {step} ===', *(f'GET /item/{n} status=200 took={n % 7}ms' for n in range(lines))])
    return [
        ModelResponse(parts=[ToolCallPart(name, {'index': step}, tool_call_id=f'c{step}')]),
        ModelRequest(
            parts=[ToolReturnPart(name, f'{result}\nINCIDENT inc-{step} owner=o{step}', tool_call_id=f'c{step}')]
        ),
    ]


@settings(max_examples=int(os.environ.get('PAC_EXAMPLES', '12')), deadline=None)
@given(
    rounds=st.lists(st.tuples(st.integers(3, 40), st.integers(20, 60)), min_size=2, max_size=6),
    max_chars=st.sampled_from([4_000, 8_000, 16_000]),
)
def test_checkpoints_stay_bounded_append_only_and_account_for_every_call(
    rounds: list[tuple[int, int]], max_chars: int
) -> None:
    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage())
    cctx = CompactionContext(run=ctx, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), max_chars=max_chars)
    history: list[ModelMessage] = [ModelRequest(parts=[SystemPromptPart('sys'), UserPromptPart('go')])]
    steps = 0
    for count, lines in rounds:
        for _ in range(count):
            history.extend(_call(steps, lines))
            steps += 1
        view = segment(history)
        dropped = sum(e.tokens for e in view.exchanges if not e.forced)
        earlier = sum(e.tokens for e in view.exchanges if e.kind == 'boundary')
        before = _checkpoint_texts(history)
        outcome = asyncio.run(run_compaction(reset, history, cctx, min_saving=0.0))
        assert isinstance(outcome, Outcome) and outcome.record.fallback_reason is None
        texts = _checkpoint_texts(outcome.messages)
        assert sum(map(len, texts)) <= max_chars  # the checkpoints together stay within max_chars
        extra = outcome.record.extra
        if 'appended' in extra:
            # Appended: the earlier checkpoints are byte-identical, and the new one is never larger than
            # (three quarters of) the exchanges it replaces.
            assert texts[:-1] == before and extra['appended'] == len(before)
            assert len(texts[-1]) <= dropped * 3
        else:
            # A rewrite (the only way a checkpoint changes) replaces every earlier one, with room to spare.
            assert len(texts) == 1 and extra.get('rewrote', 0) == len(before)
            assert len(texts[0]) <= min(max_chars // 2, (dropped + earlier) * 3) or not before
            assert len(texts[0]) <= max_chars
        records = [r for m in outcome.messages for p in m.parts if (r := our_record(p))]
        # Nothing vanishes: every completed call (all but the one in progress) is listed or counted, once.
        listed = sum(
            len(r['extra']['checkpoint'][name]) + r['extra']['omitted'][name]
            for r in records
            for name in ('read', 'changed')
        )
        assert listed == steps - 1
        history = outcome.messages


def _greedy_fold(
    sections: dict[str, list[str]], omitted: dict[str, int], budget: int
) -> tuple[dict[str, list[str]], dict[str, int], dict[str, dict[str, int]]]:
    """The fold rule step by step, as it reads: the largest section gives its oldest entry until all fit."""
    sections = {name: list(lines) for name, lines in sections.items()}
    omitted = dict(omitted)
    digests: dict[str, dict[str, int]] = {name: {} for name in sections}
    room = max(budget - 900, 0)
    while sum(len(line) + 3 for lines in sections.values() for line in lines) > room:
        candidates = [name for name in ('found', 'read', 'conversation', 'changed') if sections[name]]
        if candidates:
            name = max(candidates, key=lambda n: sum(len(line) + 3 for line in sections[n]))
        elif sections['instructions']:
            name = 'instructions'
        else:
            break
        entry = sections[name].pop(0)
        omitted[name] += 1
        head = entry.split('(')[0].split(':')[0].strip()
        label = clip(head, 40) if head else 'other'
        digests[name][label] = digests[name].get(label, 0) + 1
    return sections, omitted, {name: _top(counts) for name, counts in digests.items()}


def _read_entry(tool: str, i: int, size: int) -> str:
    return f'{tool}({{"i":{i}}}) → success, {size:,} chars'


def _said_entry(who: str, text: str) -> str:
    return f'{who}: {text}'


_ENTRY = st.one_of(
    st.builds(_read_entry, st.sampled_from(['read_log', 'ls', 'grep']), st.integers(0, 99), st.integers(0, 10**6)),
    st.builds(_said_entry, st.sampled_from(['you', 'user']), st.text('ab (:', max_size=30)),
    st.text('xy :(', max_size=12),
)


@settings(max_examples=int(os.environ.get('PAC_EXAMPLES', '60')), deadline=None)
@given(
    sections=st.fixed_dictionaries({name: st.lists(_ENTRY, max_size=40) for name in SECTIONS}),
    budget=st.integers(0, 4_000),
)
def test_folding_by_counting_gives_what_folding_one_entry_at_a_time_gives(
    sections: dict[str, list[str]], budget: int
) -> None:
    omitted: dict[str, int] = dict.fromkeys(SECTIONS, 2)
    assert fold_with_digests(sections, omitted, budget) == _greedy_fold(sections, omitted, budget)


def test_a_wrapped_reset_appends_to_its_own_checkpoints() -> None:
    events: list[CompactionEvent] = []
    sources = InstructionSources(markers=('CHANGE:',))
    reset = Reassert(ResetToCheckpoint(trigger=TRIGGER, observer=events.append), sources=sources)
    result = change_agent(ScriptedAgentModel(logs=12), reset).run_sync('Audit logs 0-11.')
    records = [r for m in result.all_messages() for p in m.parts if (r := our_record(p))]
    # Written as `reassert+reset`, the earlier checkpoints are still the reset's own: appended to, never lost.
    assert len(records) >= 4 and {r['strategy'] for r in records} == {'reassert+reset'}
    assert all(r['extra']['appended'] == number for number, r in enumerate(records[1:], start=1))
    entries = [entry for record in records for entry in record['extra']['checkpoint']['read']]
    assert [int(e.split('"index":')[1].split('}')[0]) for e in entries] == list(range(len(entries)))


def _same_reading(reset: ResetToCheckpoint[None], history: list[ModelMessage], cctx: CompactionContext) -> None:
    """The reset carried forward reads *history* as a reset that never saw anything reads it from scratch."""
    fresh = ResetToCheckpoint[None](trigger=Trigger(tokens=1), sources=reset.sources)
    view, fresh_view = segment(history), segment_fresh(history)
    assert reset.sections(view) == fresh.sections(fresh_view)
    carried = asyncio.run(reset.propose(view, cctx))
    assert carried == asyncio.run(fresh.propose(fresh_view, cctx))


@settings(max_examples=int(os.environ.get('PAC_EXAMPLES', '10')), deadline=None)
@given(histories(), histories(), st.integers(0, 30))
def test_entries_carried_forward_equal_a_reading_from_scratch(
    history: list[ModelMessage], other: list[ModelMessage], keep: int
) -> None:
    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage())
    cctx = CompactionContext(run=ctx, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), sources=InstructionSources(markers=('INCIDENT',)))
    for end in range(1, len(history) + 1):  # grown message by message
        _same_reading(reset, history[:end], cctx)
    # Replaced after a shared start, and a message in the middle swapped for one with other content.
    replaced = [*history[: max(min(keep, len(history) - 1), 1)], *other[1:]]
    _same_reading(reset, replaced, cctx)
    middle = len(history) // 2
    message = history[middle]
    edited = list(history)
    edited[middle] = (
        replace(message, parts=[*message.parts, UserPromptPart('INCIDENT moved')])
        if isinstance(message, ModelRequest)
        else replace(message, parts=[*message.parts, TextPart('an edit')])
    )
    _same_reading(reset, edited, cctx)
    # After a compaction: the earlier checkpoint's entries are carried, and the history grows again.
    outcome = asyncio.run(run_compaction(reset, history, cctx, min_saving=0.0))
    if isinstance(outcome, Outcome):
        compacted = [*outcome.messages, *other[1:]]
        for end in range(len(outcome.messages), len(compacted) + 1):
            _same_reading(reset, compacted[:end], cctx)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='ab (:)\n\u00e9', max_size=12))
def test_a_folded_entry_is_counted_under_its_text_before_the_first_parenthesis_or_colon(entry: str) -> None:
    ends = [at for at in (entry.find('('), entry.find(':')) if at >= 0]
    assert _head(entry) == entry[: min(ends, default=len(entry))]


def _long_audit(reset: ResetToCheckpoint[None], logs: int) -> tuple[list[str], list[str], list[str]]:
    """A real agent reading *logs* logs of routine lines and three incidents each: the checkpoints it ends with, the
    incident lines its logs held, and those it no longer sees (in no checkpoint and no result kept verbatim)."""
    script = ScriptedAgentModel(logs=logs)
    agent = Agent(script.model(), capabilities=[reset], system_prompt='Audit the logs; report every incident.')
    incidents = [
        f'INCIDENT inc-{1000 + 3 * index + n} service=billing severity={(index + n) % 9 + 1} owner=team-{n} '
        f'summary=payment retries exceeded on shard {index}'
        for index in range(logs)
        for n in range(3)
    ]

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        routine = [f'{index:03d}-{line:04d} service=api status=ok latency={line % 97}ms' for line in range(400)]
        routine[100:100] = incidents[3 * index : 3 * index + 3]
        return '\n'.join(routine)

    result = agent.run_sync('Audit every log.', usage_limits=UsageLimits(request_limit=logs + 5))
    seen = '\n'.join(str(getattr(part, 'content', '')) for message in result.all_messages() for part in message.parts)
    return _checkpoint_texts(result.all_messages()), incidents, [line for line in incidents if line not in seen]


def test_the_default_bound_grows_with_the_trigger_so_a_long_audit_keeps_every_fact() -> None:
    """Past 16,000 characters of facts, a fixed bound folds the oldest into counts; the default, two characters per
    token of the trigger's limit (24,000 here), keeps every one."""
    trigger = Trigger(tokens=12_000)
    fixed, incidents, lost = _long_audit(ResetToCheckpoint[None](trigger=trigger, max_chars=16_000), 60)
    scaled, _, lost_scaled = _long_audit(ResetToCheckpoint[None](trigger=trigger), 60)
    assert sum(map(len, fixed)) <= 16_000 < sum(map(len, scaled)) <= 24_000
    assert lost and lost == incidents[: len(lost)]  # the oldest, folded into counts
    assert any('folded to fit' in text for text in fixed)
    assert lost_scaled == []
    assert not any('folded to fit' in text for text in scaled)


def test_the_default_bound_follows_the_trigger_kind() -> None:
    """Two characters per token of the limit, from 16,000 to 64,000; a message-count trigger has no tokens: 16,000."""

    def bound(reset: ResetToCheckpoint[None]) -> int:
        return reset._bound()  # pyright: ignore[reportPrivateUsage]

    assert bound(ResetToCheckpoint[None]()) == 36_000  # the default 18,000-token trigger
    assert bound(ResetToCheckpoint[None](trigger=Trigger(tokens=2_000))) == 16_000
    assert bound(ResetToCheckpoint[None](trigger=Trigger(messages=40))) == 16_000
    assert bound(ResetToCheckpoint[None](trigger=Trigger(tokens=30_000))) == 60_000
    # At most 64,000: the checkpoints go with every request, and a compaction reads facts until they fill the bound.
    assert bound(ResetToCheckpoint[None](trigger=Trigger(fraction=0.5, context_window=200_000))) == 64_000
    assert bound(ResetToCheckpoint[None](trigger=Trigger(tokens=2_000), max_chars=900)) == 900
    # A tokenizer of its own: how many characters a token holds is the text's (one a character in Chinese).
    assert bound(ResetToCheckpoint[None](trigger=Trigger(tokens=18_000, tokenizer=len))) == 16_000
    expected = r'ResetToCheckpoint\.max_chars must be an integer ≥ 200 or None, got 100'
    with pytest.raises(ConfigurationError, match=expected):
        ResetToCheckpoint[None](max_chars=100)


def test_an_unknown_window_is_warned_of_once_by_the_trigger_not_again_by_the_bound() -> None:
    reset = ResetToCheckpoint[None](trigger=Trigger(fraction=0.5))
    model = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart('ok')]), model_name='unknown-model')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        # Half of the 200,000-token window assumed, at two characters a token, is past the most: 64,000.
        assert reset._bound(model) == 64_000  # pyright: ignore[reportPrivateUsage]
        reset.trigger.token_limit(model)
    assert [str(w.message)[:60] for w in caught] == ['Trigger(fraction=...): the context window of function:unknow']
