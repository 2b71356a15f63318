"""Replies real models give a compaction prompt: ids in other forms, refusals, blanks, copied placeholders.

Each reply is one a model gives when it copies the prompt's example literally, words a choice its own way, or
declines: read as a summary, a refusal or a zero-width space replaced the dropped exchanges with nothing.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import (
    Fork,
    InstructionSources,
    Native,
    Reassert,
    ResetToCheckpoint,
    StatelessSummary,
    Switch,
    Trigger,
    Verified,
)
from pydantic_ai_compaction.processors.strategies.verified import DEFAULT_CHECKS
from pydantic_ai_compaction.runtime import compactor
from pydantic_ai_compaction.runtime.events import CompactionEvent
from pydantic_ai_compaction.runtime.segment import our_record
from pydantic_ai_compaction.runtime.transcript import user_text
from pydantic_ai_compaction.testing import replay
from pydantic_ai_compaction.testing.replay import Compacts

from .support import recorded_history

SUMMARY = 'Logs 0-3 read, all clean. Next: log 4.'


async def compacted(strategy: Compacts, reply: str, **response: Any) -> tuple[dict[str, Any], str]:
    """The record and the boundary text of one compaction of an 8-step history whose model answers *reply*."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(reply)], **response)

    out = await replay(strategy, recorded_history(8), model=FunctionModel(respond))
    (boundary,) = [p for m in out for p in m.parts if isinstance(p, CompactionPart) and our_record(p) is not None]
    return cast(dict[str, Any], our_record(boundary)), boundary.content or ''


def json_reply(keep: list[str], **summary: Any) -> str:
    filled: dict[str, Any] = {'rules': ['report ids in lowercase'], 'facts': [], 'progress': 'logs 0-3 read'}
    return json.dumps({'keep': keep, 'summary': {**filled, 'next_step': 'read log 4', **summary}})


@pytest.mark.parametrize(
    ('keep', 'kept'),
    [
        (['G2'], ['g2']),
        (['g2-g3'], ['g2', 'g3']),
        (['g2 (the log with the change)'], ['g2']),
        (['the config (g2)'], ['g2']),
    ],
)
async def test_a_json_fork_reads_its_ids_as_a_keep_line_s(keep: list[str], kept: list[str]) -> None:
    # `G2`, `g2-g3`, `g2 (note)` were unknown ids to the validator: rejected, and the exchange the model kept to
    # read again was dropped under a summary that took it for kept.
    record, _ = await compacted(Fork(variant='json'), json_reply(keep))
    assert record['fallback_reason'] is None
    assert record['rejected'] == []
    assert record['kept'] == ['g0', *kept, 'g8']


async def test_an_id_in_two_json_keep_items_is_a_repeat_the_validator_reports() -> None:
    record, _ = await compacted(Fork(variant='json'), json_reply(['g3', 'G3', 'g2']))
    assert record['rejected'] == ['g3']
    assert record['kept'] == ['g0', 'g2', 'g3', 'g8']


async def test_a_json_keep_item_naming_what_not_to_keep_falls_back() -> None:
    # Read for its ids, `everything except g2` kept g2 alone.
    record, _ = await compacted(Fork(variant='json'), json_reply(['everything except g2']))
    assert record['fallback_reason'] == 'unparseable'
    assert 'names the exchanges not to keep' in record['detail']


async def test_an_id_the_json_fork_cannot_read_is_still_rejected_alone() -> None:
    record, _ = await compacted(Fork(variant='json'), json_reply(['g2', 'the config one']))
    assert record['fallback_reason'] is None
    assert record['rejected'] == ['the config one']
    assert record['kept'] == ['g0', 'g2', 'g8']


@pytest.mark.parametrize(
    'summary',
    [
        {'progress': '<what is done>.'},  # a placeholder with a full stop
        {'rules': ['<instruction in force, latest wording>: report ids in lowercase']},
    ],
)
async def test_a_json_fork_summary_holding_a_placeholder_falls_back(summary: dict[str, Any]) -> None:
    record, text = await compacted(Fork(variant='json'), json_reply([], **summary))
    assert record['fallback_reason'] == 'unfilled'
    assert '<' not in text


async def test_a_json_fork_summary_of_dots_and_blanks_is_empty() -> None:
    reply = json_reply([], rules=['...', ' '], facts=['\u2026'], progress=' ', next_step='...')
    record, text = await compacted(Fork(variant='json'), reply)
    assert record['fallback_reason'] == 'empty'
    assert '...' not in text


async def test_a_json_fork_leaves_out_an_item_of_dots_and_keeps_the_rest() -> None:
    record, text = await compacted(Fork(variant='json'), json_reply([], facts=['...', 'INC-4471 open']))
    assert record['fallback_reason'] is None
    assert text == (
        'Rules in force:\n- report ids in lowercase\nFacts:\n- INC-4471 open\nProgress: logs 0-3 read\n'
        'Next step: read log 4'
    )


@pytest.mark.parametrize(
    ('line', 'kept'),
    [
        ('KEEP: g2 through g4', ['g2', 'g3', 'g4']),
        ('KEEP: g2 thru g3', ['g2', 'g3']),
        ('KEEP: g2, ..., g4', ['g2', 'g3', 'g4']),
        ('KEEP: g2...g3', ['g2', 'g3']),
        ('KEEP: g2\u2026g3', ['g2', 'g3']),
        ('KEEP:\n- g2 through g3\n', ['g2', 'g3']),
        ('KEEP: g5 (everything but the config is summarized)', ['g5']),
        ('KEEP: none except g5', ['g5']),
        # Words that only open the line, an exception or a negation among them, do not make it name what to drop.
        ('KEEP: every exchange not yet summarized: g5, g6', ['g5', 'g6']),
        ('KEEP: all relevant ones are summarized, but keep g5', ['g5']),
        ('KEEP: Everything not in the summary: g4, g5', ['g4', 'g5']),
        # A label before the ids is not a note of the first one.
        ('KEEP: All three: g2, g3, g4', ['g2', 'g3', 'g4']),
        ('KEEP: each of these: g2, g3', ['g2', 'g3']),
        ('KEEP: g2: the config, g5', ['g2', 'g5']),
    ],
)
async def test_a_free_fork_reads_ranges_in_words_and_with_an_ellipsis(line: str, kept: list[str]) -> None:
    record, summary = await compacted(Fork(variant='free'), f'{line}\n{SUMMARY}')
    assert record['fallback_reason'] is None
    assert record['kept'] == ['g0', *kept, 'g8']
    assert summary == SUMMARY


@pytest.mark.parametrize(
    'line', ['KEEP: everything except g2', 'KEEP: all but g2', 'KEEP: Every exchange other than g2, g3']
)
async def test_a_free_fork_keep_line_naming_what_not_to_keep_falls_back(line: str) -> None:
    # Read for its ids, `everything except g2` kept g2 alone: the opposite of what the model meant.
    record, _ = await compacted(Fork(variant='free'), f'{line}\n{SUMMARY}')
    assert record['fallback_reason'] == 'unparseable'
    assert 'names the exchanges not to keep' in record['detail']
    assert record['kept'] == ['g0', 'g4', 'g5', 'g6', 'g7', 'g8']  # the fallback's last four, and the tool step


REFUSALS = [
    "I'm sorry, but I can't help with that request.",
    'I cannot assist with that.',
    'Sorry \u2014 I can\u2019t continue with this.',
    "Unfortunately, I'm not able to summarize this conversation.",
    "I'm afraid I can't help with that. Is there anything else I can do?",
    "<summary>I'm sorry, I can't help with that.</summary>",
]


def summarizers() -> list[Compacts]:
    return [
        StatelessSummary(),
        StatelessSummary(request='sent'),
        Fork(variant='fixed'),
        Fork(variant='free'),
        Native(),  # emulated: `FunctionModel` has no provider compaction
        Verified(StatelessSummary()),
    ]


@pytest.mark.parametrize('reply', REFUSALS)
@pytest.mark.parametrize('strategy', summarizers(), ids=lambda s: type(s).__name__)
async def test_a_refusal_is_no_summary(strategy: Compacts, reply: str) -> None:
    record, text = await compacted(strategy, reply)
    assert record['fallback_reason'] == 'refused'
    assert 'sorry' not in text.lower() and 'cannot' not in text


@pytest.mark.parametrize('strategy', summarizers(), ids=lambda s: type(s).__name__)
async def test_a_reply_the_provider_filtered_is_no_summary(strategy: Compacts) -> None:
    record, _ = await compacted(strategy, f'KEEP: none\n{SUMMARY}', finish_reason='content_filter')
    assert record['fallback_reason'] == 'refused'
    assert record['detail'] == 'the provider filtered the reply (finish reason content_filter)'


@pytest.mark.parametrize('reply', ['\u200b', ' \ufeff\n', '\u2060', '</transcript>', '<summary>\n</summary>'])
@pytest.mark.parametrize('strategy', summarizers(), ids=lambda s: type(s).__name__)
async def test_a_reply_with_nothing_visible_is_empty(strategy: Compacts, reply: str) -> None:
    record, text = await compacted(strategy, reply)
    assert record['fallback_reason'] == 'empty'
    assert text.startswith('[Context compaction fell back')


@pytest.mark.parametrize(
    'summary',
    [
        'I can summarize: logs 0-3 read, all clean.',
        'We cannot restart billing: the user forbade it. Logs 0-3 read.',
        'Summary: the tool said "I cannot help with that" for log 2; logs 0-3 read.',
        # The agent's own summary in the first person says what it cannot do, and why.
        "I can't complete the migration: the database was locked. Logs 0-3 read. Next: retry log 4.",
        'I cannot write to /etc (user rule). Logs 0-3 read, all clean. Next: log 4.',
        'We are unable to process log 4 until the API token is renewed. Logs 0-3 read.',
        "Unfortunately, I can't continue to read log 4 yet: the user must approve it. Logs 0-3 read.",
        "I won't write to production; the user forbade it. Progress: staging deployed.",
        "I can't do that until the user approves: logs 0-3 read.",
    ],
)
async def test_a_summary_that_mentions_what_cannot_be_done_is_a_summary(summary: str) -> None:
    record, text = await compacted(StatelessSummary(), summary)
    assert record['fallback_reason'] is None
    assert text == summary


def test_visible_text_is_more_than_blanks_and_format_characters() -> None:
    assert not compactor.visible(' \u200b\ufeff\u2060\n')
    assert compactor.visible('\u200bx')
    assert compactor.visible('\u0300')  # a lone combining mark is drawn
    assert not compactor.visible('\u2800\u3164')  # letters drawn blank


async def test_an_omission_of_a_character_or_two_does_not_count() -> None:
    # `0` is in almost any transcript: the first line holding one was appended to the summary as a detail left out.
    events: list[CompactionEvent] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = next(p for p in messages[-1].parts if isinstance(p, UserPromptPart))
        asked = 'summary check request' in str(prompt.content)
        return ModelResponse(parts=[TextPart('{"omitted": ["0", "ok", "service=api"]}' if asked else SUMMARY)])

    inner = StatelessSummary(observer=events.append)
    await replay(
        Verified(inner, checks=(*DEFAULT_CHECKS, 'omissions')), recorded_history(8), model=FunctionModel(respond)
    )
    (event,) = events
    assert event.record is not None
    verification = event.record.extra['verification']
    assert verification['omissions'] == ['service=api']
    assert verification['verdict'] == 'appended'


async def test_the_first_provider_compaction_carries_on_the_user_turns_it_drops() -> None:
    # Only a provider compaction that replaced earlier boundaries carried the changes on: the first one of a run
    # dropped `report ids in lowercase` for good, and the `Reassert` after it had nothing to restate.
    class ProviderModel(FunctionModel):
        async def compact_messages(self, request_context: Any, *, instructions: str | None = None) -> ModelResponse:
            return ModelResponse(parts=[CompactionPart(content='opaque', id='cmp_1', provider_name='function')])

    step = [0]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step[0] += 1
        if step[0] % 2:
            return ModelResponse(parts=[ToolCallPart('read_log', {'index': step[0]})])
        return ModelResponse(parts=[TextPart('done')])

    def read_log(index: int) -> str:
        return '\n'.join(f'{index}-{n} service=api status=ok' for n in range(300))

    # Three turns without compaction (a history resumed from storage), then a provider compaction first.
    history: list[ModelMessage] = []
    plain = Agent(ProviderModel(respond), tools=[read_log])
    for prompt in ['Audit logs.', 'From now on report ids in lowercase.', 'Then skip service legacy.']:
        history = (await plain.run(prompt, message_history=history)).all_messages()
    events: list[CompactionEvent] = []
    trigger = Trigger(tokens=2_500)
    native = Native(trigger=trigger, observer=events.append)
    later = Reassert(ResetToCheckpoint(trigger=trigger, observer=events.append), sources=InstructionSources(markers=()))
    agent = Agent(
        ProviderModel(respond),
        tools=[read_log],
        capabilities=[Switch(when=lambda state: state.compactions < 1, then=native, otherwise=later)],
    )
    for prompt in ['Go on.', 'Next.', 'Again.']:
        history = (await agent.run(prompt, message_history=history)).all_messages()
    records = [event.record for event in events if event.record is not None]
    assert [record.variant for record in records[:2]] == ['provider', 'default']
    assert records[0].extra['instructions'] == ['From now on report ids in lowercase.', 'Then skip service legacy.']
    # The reset after it restates both, and they are in the history the agent goes on with.
    assert records[1].restated[:2] == ('From now on report ids in lowercase.', 'Then skip service legacy.')
    said = [
        user_text(p) for m in history if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)
    ]
    assert any('From now on report ids in lowercase.' in text for text in said)
