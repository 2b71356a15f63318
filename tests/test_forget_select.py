"""ForgetReasoning (seed 002) and request-only selection (seed 003) through real `Agent` runs."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
from pydantic_ai import Agent, ModelRetry, ToolReturn
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from pydantic_ai_compaction import BoundedSelection, CuratedSelection, ForgetReasoning, Orientation
from pydantic_ai_compaction.processors.views.curation import CURATOR_MARKER, ORIENTATION_OPEN
from pydantic_ai_compaction.processors.views.forget import reasoning_decision
from pydantic_ai_compaction.processors.views.selection import select
from pydantic_ai_compaction.runtime import segment

THOUGHT = 'Let me think about which file to change and why. ' * 20


def loop(
    steps: list[list[ModelResponsePart]], capability: Any, seen: list[list[ModelMessage]], *, curator: str = ''
) -> Agent[None, str]:
    queue: Iterator[list[ModelResponsePart]] = iter(steps)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = ' '.join(str(p.content) for p in messages[-1].parts if isinstance(p, UserPromptPart))
        if CURATOR_MARKER in prompt:
            return ModelResponse(parts=[TextPart(curator)], usage=RequestUsage(input_tokens=777, output_tokens=33))
        seen.append(list(messages))
        return ModelResponse(parts=next(queue), usage=RequestUsage(input_tokens=100, output_tokens=len(THOUGHT) // 4))

    agent = Agent(FunctionModel(respond), capabilities=[capability])

    @agent.tool_plain
    def read_file(path: str) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'contents of {path}'

    @agent.tool_plain
    def write_file(path: str, text: str) -> str:  # pyright: ignore[reportUnusedFunction]
        return 'written'

    @agent.tool_plain
    def run_tests() -> str:  # pyright: ignore[reportUnusedFunction]
        raise ModelRetry('2 tests failed: test_a, test_b')

    return agent


def think(*parts: ModelResponsePart, signed: bool = False) -> list[ModelResponsePart]:
    return [ThinkingPart(THOUGHT, signature='sig' if signed else None), *parts]


STEPS = [
    think(ToolCallPart('read_file', {'path': 'a.py'})),  # neither written nor failed: kept
    think(ToolCallPart('write_file', {'path': 'a.py', 'text': 'x'})),  # externalized by a write
    think(ToolCallPart('run_tests', {})),  # externalized by a visible error
    think(ToolCallPart('read_file', {'path': 'b.py'})),
    [TextPart('done')],
]


def dump(message: ModelMessage) -> bytes:
    return ModelMessagesTypeAdapter.dump_json([message])


@pytest.mark.parametrize('policy', ['keep', 'drop', 'after_artifact'])
def test_earlier_messages_stay_byte_identical_under_every_policy(policy: str) -> None:
    seen: list[list[ModelMessage]] = []
    loop(STEPS, ForgetReasoning(policy=policy), seen).run_sync('fix the bug')  # pyright: ignore[reportArgumentType]
    for earlier, later in pairwise(seen):
        assert [dump(m) for m in later[: len(earlier)]] == [dump(m) for m in earlier]


def decisions(policy: str, steps: list[list[ModelResponsePart]] = STEPS) -> list[tuple[str | None, bool]]:
    seen: list[list[ModelMessage]] = []
    result = loop(steps, ForgetReasoning(policy=policy), seen).run_sync('fix the bug')  # pyright: ignore[reportArgumentType]
    return [
        (reasoning_decision(m), any(isinstance(p, ThinkingPart) for p in m.parts))
        for m in result.all_messages()
        if isinstance(m, ModelResponse)
    ]


def test_after_artifact_drops_only_externalized_steps() -> None:
    assert decisions('after_artifact') == [
        ('kept', True),  # a read: the conclusion lives only in the reasoning
        ('dropped', False),  # a successful write
        ('dropped', False),  # a failed test run the agent can still see
        ('kept', True),
        (None, False),  # the final answer: nothing after it, undecided
    ]
    assert [d for d, _ in decisions('drop')][:4] == ['dropped'] * 4
    assert [d for d, _ in decisions('keep')][:4] == ['kept'] * 4


def test_signed_thinking_is_kept_inside_the_running_tool_loop() -> None:
    steps = [think(ToolCallPart('write_file', {'path': 'a.py', 'text': 'x'}), signed=True), [TextPart('done')]]
    assert decisions('drop', steps)[0] == ('deferred', True)


def test_output_tokens_per_step_are_recorded() -> None:
    seen: list[list[ModelMessage]] = []
    result = loop(STEPS, ForgetReasoning(policy='drop'), seen).run_sync('fix the bug')
    first = next(m for m in result.all_messages() if isinstance(m, ModelResponse))
    marks = (first.metadata or {})['pydantic_ai_compaction']
    assert marks['output_tokens'] == len(THOUGHT) // 4 and marks['thinking_chars'] == len(THOUGHT)


def bundle_history() -> list[ModelMessage]:
    """Six past turns about different topics, then a request about the database migration."""
    topics = [
        'the login page colours', 'the database migration for the invoices table', 'logging format',
        'the CI cache', 'the README typo', 'the release notes',
    ]  # fmt: skip
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('You help with a web app.')])]
    for topic in topics:
        messages.append(ModelRequest(parts=[UserPromptPart(f'Please look at {topic}.')]))
        messages.append(ModelResponse(parts=[TextPart(f'Notes about {topic}: ' + 'detail ' * 300)]))
    messages.append(ModelRequest(parts=[UserPromptPart('What did we decide about the database migration?')]))
    return messages


def test_bounded_selection_picks_the_relevant_old_bundle_then_recent_ones() -> None:
    history = bundle_history()
    view = segment(history)
    per_turn = view.exchanges[1].tokens + view.exchanges[2].tokens
    budget = per_turn * 3  # room for three turns' worth of bundles
    request = 'What did we decide about the database migration?'
    chosen = select(view, request, budget)
    texts = {
        e.id: ' '.join(str(getattr(p, 'content', '')) for m in view.messages_of(e) for p in m.parts)
        for e in view.exchanges
    }
    relevant = [i for i in chosen if 'database migration' in texts[i]]
    assert relevant, 'the old bundle about the migration is selected by its words'
    assert sum(view.by_id[i].tokens for i in chosen) <= budget
    # The rest of the budget goes to the newest bundles.
    assert view.exchanges[-2].id in chosen
    assert select(view, request, budget) == chosen  # deterministic


def test_bounded_selection_projects_whole_bundles_in_order_and_keeps_the_log() -> None:
    seen: list[list[ModelMessage]] = []
    history = bundle_history()
    steps = [[TextPart('We chose a two-step migration.')]]
    agent = loop(steps, BoundedSelection(budget=900), seen)
    result = agent.run_sync(history[-1].parts[0].content, message_history=history[:-1])  # pyright: ignore[reportArgumentType, reportAttributeAccessIssue]
    sent = seen[0]
    assert len(sent) < len(history)
    # Whole bundles (a prompt with its answer), in chronological order, opening first, request last.
    prompts = [str(p.content) for m in sent for p in m.parts if isinstance(p, UserPromptPart)]
    assert prompts[0] == 'You help with a web app.' and prompts[-1].startswith('What did we decide')
    order = [history.index(m) for m in sent[:-1] if m in history]
    assert order == sorted(order)
    # Nothing was removed from the log: all six earlier answers and the new one are there.
    assert sum(isinstance(m, ModelResponse) for m in result.all_messages()) == 7


GOOD = (
    '{"focal": ["g4"], "orientation": {"relevant_state": "migration planned", "required": ["two steps"], '
    '"prohibited": ["one big step"]}}'
)
EMPTY = '"required": [], "prohibited": []}}'


@pytest.mark.parametrize(
    ('reply', 'reason'),
    [
        ('not json', 'unparseable'),
        ('{"focal": ["g4"]}', 'schema'),
        ('{"focal": ["g99"], "orientation": {"relevant_state": "", "required": [], "prohibited": []}}', 'unknown ids'),
        (
            '{"focal": [], "orientation": {"relevant_state": "' + 'x' * 9_000 + '", "required": [], "prohibited": []}}',
            'orientation budget',
        ),
        (
            '{"focal": [], "orientation": {"relevant_state": "use key sk-abcdefghijklmnopqrstuv", ' + EMPTY,
            'secret',
        ),
    ],
)
def test_curator_replies_that_fail_a_check_fall_back_to_bounded_selection(reply: str, reason: str) -> None:
    seen: list[list[ModelMessage]] = []
    history = bundle_history()
    curated = CuratedSelection(orientation_budget=2_000)
    agent = loop([[TextPart('answer')]], curated, seen, curator=reply)
    agent.run_sync(history[-1].parts[0].content, message_history=history[:-1])  # pyright: ignore[reportArgumentType, reportAttributeAccessIssue]
    sent_text = ' '.join(str(p.content) for m in seen[0] for p in m.parts if isinstance(p, UserPromptPart))
    assert ORIENTATION_OPEN not in sent_text


def test_curated_selection_sends_focal_bundles_and_untrusted_orientation_and_counts_the_curator() -> None:
    seen: list[list[ModelMessage]] = []
    history = bundle_history()
    agent = loop([[TextPart('answer')]], CuratedSelection(), seen, curator=GOOD)
    result = agent.run_sync(history[-1].parts[0].content, message_history=history[:-1])  # pyright: ignore[reportArgumentType, reportAttributeAccessIssue]
    sent = seen[0]
    text = '\n'.join(str(p.content) for m in sent for p in m.parts if isinstance(p, UserPromptPart))
    assert ORIENTATION_OPEN in text and 'untrusted derived data' in text and 'Required: two steps' in text
    assert any('database migration' in str(p.content) for m in sent for p in m.parts)
    assert len(sent) < len(history)
    # The curator's tokens count in the run: 777 input tokens on top of the answer's 100.
    assert result.usage.input_tokens == 877 and result.usage.requests == 2


def test_orientation_sends_everything_plus_the_orientation() -> None:
    seen: list[list[ModelMessage]] = []
    history = bundle_history()
    agent = loop([[TextPart('answer')]], Orientation(), seen, curator=GOOD)
    agent.run_sync(history[-1].parts[0].content, message_history=history[:-1])  # pyright: ignore[reportArgumentType, reportAttributeAccessIssue]
    sent = seen[0]
    assert sum(isinstance(m, ModelResponse) for m in sent) == 6  # every earlier answer...
    assert any(ORIENTATION_OPEN in str(p.content) for m in sent for p in m.parts)  # ...plus the orientation


def test_bounded_selection_reserves_thirty_percent_for_relevant_bundles() -> None:
    # Five older turns about the migration, then five unrelated recent ones; each turn is about 20 % of the budget.
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('You help with a web app.')])]
    for index in range(5):
        messages.append(ModelRequest(parts=[UserPromptPart(f'Database migration step {index}?')]))
        messages.append(ModelResponse(parts=[TextPart('database migration notes ' + 'detail ' * 200)]))
    for index in range(5):
        messages.append(ModelRequest(parts=[UserPromptPart(f'Unrelated chore {index}.')]))
        messages.append(ModelResponse(parts=[TextPart('chore notes ' + 'detail ' * 200)]))
    messages.append(ModelRequest(parts=[UserPromptPart('Summarize the database migration plan.')]))
    view = segment(messages)
    turn = view.exchanges[2].tokens
    budget = turn * 5
    chosen = select(view, 'Summarize the database migration plan.', budget)
    relevant = [e.id for e in view.exchanges[1:11] if e.id in chosen and e.kind == 'response']
    recent = [e.id for e in view.exchanges[11:-1] if e.id in chosen]
    # Relevant answers fill at most 30 % of the budget (one here, the first may exceed it if it fits)...
    assert 1 <= len(relevant) <= 2
    assert sum(view.by_id[i].tokens for i in chosen if i not in recent) <= budget
    # ...and the newest bundles take the rest, newest first.
    assert recent and recent[-1] == view.exchanges[-2].id
    assert sum(view.by_id[i].tokens for i in chosen) <= budget


def test_forget_reasoning_drop_never_leaves_an_empty_response() -> None:
    # A reply of reasoning alone (pydantic-ai answers it with retry feedback) is a finished step with no calls;
    # dropping its reasoning would persist and send `ModelResponse(parts=[])`, an empty turn providers refuse.
    from pydantic_ai.messages import TextPart, ThinkingPart

    from pydantic_ai_compaction import ForgetReasoning

    sent: list[list[ModelMessage]] = []
    step = {'n': 0}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(list(messages))
        step['n'] += 1
        if step['n'] == 1:
            return ModelResponse(parts=[ThinkingPart('let me think about this')])
        if step['n'] == 2:
            return ModelResponse(parts=[ToolCallPart('read', {'i': 1}, tool_call_id='c1')])
        return ModelResponse(parts=[TextPart('done')])

    agent = Agent(FunctionModel(model), capabilities=[ForgetReasoning(policy='drop')])

    @agent.tool_plain
    def read(i: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return 'x'

    result = agent.run_sync('go')
    assert all(message.parts for message in result.all_messages())
    assert all(message.parts for message in sent[-1])


def test_content_a_tool_supplied_is_not_a_new_user_turn() -> None:
    # `ToolReturn(content=...)` travels as a user part beside the returns: read as a new turn, it dropped the signed
    # thinking of the step before it inside the running tool loop, where the provider needs it back.
    steps = [
        think(ToolCallPart('show', {}, tool_call_id='c1'), signed=True),
        think(ToolCallPart('write_file', {'path': 'a.py', 'text': 'x'}, tool_call_id='c2'), signed=True),
        [TextPart('done')],
    ]
    seen: list[list[ModelMessage]] = []
    agent = loop(steps, ForgetReasoning(policy='drop'), seen)

    @agent.tool_plain
    def show() -> ToolReturn:  # pyright: ignore[reportUnusedFunction]
        return ToolReturn(return_value='shown', content=['the picture, described'])

    agent.run_sync('Go.')
    # The request after the second step: the first step's signed thinking is still sent (deferred, not dropped).
    last = seen[-1]
    assert any(isinstance(p, UserPromptPart) and p.content == ['the picture, described'] for m in last for p in m.parts)
    responses = [m for m in last if isinstance(m, ModelResponse)]
    assert [reasoning_decision(m) for m in responses] == ['deferred', 'deferred']
    assert all(any(isinstance(p, ThinkingPart) for p in m.parts) for m in responses)


def test_a_call_id_used_again_is_decided_by_its_own_result() -> None:
    # A provider reusing call ids: the first step's failed call was read with the later step's success, and its
    # thinking kept although the error it externalized was still in view.
    from pydantic_ai.messages import ToolReturnPart

    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('Go.')]),
        ModelResponse(parts=think(ToolCallPart('read_log', {'i': 1}, tool_call_id='call_0'))),
        ModelRequest(parts=[ToolReturnPart('read_log', 'no such log', tool_call_id='call_0', outcome='failed')]),
        ModelResponse(parts=think(ToolCallPart('read_log', {'i': 2}, tool_call_id='call_0'))),
        ModelRequest(parts=[ToolReturnPart('read_log', 'log 2', tool_call_id='call_0')]),
        ModelResponse(parts=[TextPart('done')]),
    ]
    decided = ForgetReasoning(policy='after_artifact').decide(messages)
    assert decided is not None
    assert [reasoning_decision(m) for m in decided if isinstance(m, ModelResponse)] == ['dropped', 'kept', None]


def test_dropping_responses_reasoning_sends_the_rest_without_its_item_ids() -> None:
    # OpenAI refuses a call or text sent by its item id without the reasoning item it was returned with: once the
    # reasoning goes, they go as plain input. A step holding an item replayed only by its id keeps its reasoning.
    from pydantic_ai.messages import NativeToolCallPart, ToolReturnPart

    reasoning = ThinkingPart('', id='rs_1', signature='gAAAA', provider_name='openai')
    wrote = ToolCallPart('write_file', {'path': 'a.py'}, tool_call_id='call_1', id='fc_1', provider_name='openai')
    said = TextPart('Writing it.', id='msg_1', provider_name='openai')
    search = NativeToolCallPart('web_search', {'query': 'x'}, tool_call_id='ws_1', id='ws_1', provider_name='openai')
    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('Write a.py.')]),
        ModelResponse(parts=[reasoning, said, wrote], provider_name='openai'),
        ModelRequest(parts=[ToolReturnPart('write_file', 'written', tool_call_id='call_1')]),
        ModelResponse(parts=[reasoning, search, replace_id(wrote, 'call_2')], provider_name='openai'),
        ModelRequest(parts=[ToolReturnPart('write_file', 'written', tool_call_id='call_2')]),
        ModelResponse(parts=[TextPart('Done.')], provider_name='openai'),
        ModelRequest(parts=[UserPromptPart('Thanks.')]),
    ]
    decided = ForgetReasoning(policy='after_artifact').decide(messages)
    assert decided is not None
    first, second = decided[1], decided[3]
    assert isinstance(first, ModelResponse) and isinstance(second, ModelResponse)
    assert reasoning_decision(first) == 'dropped'
    assert [(type(p).__name__, getattr(p, 'id', None)) for p in first.parts] == [
        ('TextPart', None),
        ('ToolCallPart', None),
    ]
    assert first.parts[1].tool_call_id == 'call_1'  # pyright: ignore[reportAttributeAccessIssue]
    assert reasoning_decision(second) == 'kept' and second.parts[0] is reasoning
    assert wrote.id == 'fc_1' and said.id == 'msg_1'  # the parts themselves are not changed in place


def replace_id(part: ToolCallPart, call_id: str) -> ToolCallPart:
    from dataclasses import replace

    return replace(part, tool_call_id=call_id, id=f'fc_{call_id}')
