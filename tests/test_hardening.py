"""Inputs real agents produce, through real `Agent` runs: every guarantee holds on them.

Each test is one member of a class of inputs (see `tests/reliability.py` for the generated ones).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai import Agent, ToolReturn
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,  # pyright: ignore[reportDeprecated]
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import (
    CompactionEvent,
    Fork,
    InstructionSources,
    Native,
    Pipeline,
    Reassert,
    ResetToCheckpoint,
    RetryPolicy,
    StatelessSummary,
    Switch,
    Trigger,
)
from pydantic_ai_compaction.processors.strategies.fork import FORK_MARKER
from pydantic_ai_compaction.processors.strategies.native import NATIVE_MARKER
from pydantic_ai_compaction.processors.strategies.summary import SUMMARY_MARKER
from pydantic_ai_compaction.runtime import our_record
from pydantic_ai_compaction.runtime.shape import shape_problems

NO_WAIT = RetryPolicy(attempts=1, initial_wait=0, max_wait=0)
LOW = Trigger(tokens=400)
STRATEGIES: dict[str, Callable[[], Any]] = {
    'fork-json': lambda: Fork(variant='json', trigger=LOW, retry=NO_WAIT),
    'fork-free': lambda: Fork(variant='free', trigger=LOW, retry=NO_WAIT),
    'fork-fixed': lambda: Fork(variant='fixed', trigger=LOW, retry=NO_WAIT),
    'summary': lambda: StatelessSummary(trigger=LOW, retry=NO_WAIT),
    'summary-keep-1': lambda: StatelessSummary(keep_last=1, trigger=LOW, retry=NO_WAIT),
    'native': lambda: Native(trigger=LOW, retry=NO_WAIT),
    'reset': lambda: ResetToCheckpoint(trigger=LOW),
    'reassert': lambda: Reassert(Native(trigger=LOW, retry=NO_WAIT), sources=InstructionSources(markers=('CHANGE:',))),
    'switch': lambda: Switch(
        when=lambda s: s.compactions < 1, then=Native(trigger=LOW, retry=NO_WAIT), otherwise=Fork(trigger=LOW)
    ),
    'pipeline': lambda: Pipeline([ResetToCheckpoint(trigger=LOW), Fork(trigger=LOW, retry=NO_WAIT)]),
}
COMPACTOR_MARKERS = (FORK_MARKER, SUMMARY_MARKER, NATIVE_MARKER)


def _prompt_text(message: ModelMessage) -> str:
    return ' '.join(
        part.content for part in message.parts if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    )


class Player:
    """A model that reads `steps` logs, then answers; compactor calls answer `reply(kind, messages)`."""

    def __init__(self, steps: int = 6, reply: Callable[[str, list[ModelMessage]], str] | None = None) -> None:
        self.steps = steps
        self.reply = reply or (lambda kind, messages: json.dumps({'keep': [], 'summary': 'the work so far'}))
        self.agent_requests: list[list[ModelMessage]] = []
        self.compactor_calls: list[str] = []
        self.step = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = _prompt_text(messages[-1])
        for marker, kind in zip(COMPACTOR_MARKERS, ('fork', 'summary', 'native'), strict=True):
            if marker in prompt:
                self.compactor_calls.append(kind)
                return ModelResponse(parts=[TextPart(self.reply(kind, messages))])
        self.agent_requests.append(list(messages))
        self.step += 1
        if self.step > self.steps:
            self.step = 0
            return ModelResponse(parts=[TextPart('report: done')])
        return ModelResponse(
            parts=[ToolCallPart('read_log', {'index': self.step}, tool_call_id=f'c{len(self.agent_requests)}')],
        )


def audit(player: Player, capability: object, **agent_kwargs: Any) -> Agent[None, str]:
    agent = Agent(FunctionModel(player), capabilities=[capability], **agent_kwargs)  # pyright: ignore[reportArgumentType]

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'log {index}\n' + '\n'.join(f'{index}-{line} service=api status=ok' for line in range(40))

    return agent


def boundaries(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    return [r for m in messages for p in m.parts if (r := our_record(p)) is not None]


@pytest.mark.parametrize('name', list(STRATEGIES))
async def test_continuing_a_run_with_no_new_prompt_compacts_and_keeps_the_shape(name: str) -> None:
    player = Player()
    agent = audit(player, STRATEGIES[name](), instructions='Audit the logs; answer with a report.')
    first = await agent.run('Audit logs 1-6.')
    history = first.all_messages()
    assert isinstance(history[-1], ModelResponse)
    # `run(None, ...)` appends a request with no parts: it must survive every compaction.
    second = await agent.run(None, message_history=history)
    after = second.all_messages()
    assert second.output == 'report: done'
    assert boundaries(after), 'the second run compacted'
    assert shape_problems([*after, ModelRequest(parts=[])]) == []
    for request in player.agent_requests:
        assert shape_problems(request) == [], name


def _keep_newest(kind: str, messages: list[ModelMessage]) -> str:
    """A fork reply that keeps the newest exchange the prompt lists (the case that used to end on a response)."""
    import re

    ids = [int(n) for n in re.findall(r'\bg(\d+)\b', _prompt_text(messages[-1]))]
    keep = [f'g{max(ids)}'] if ids else []
    return json.dumps({'keep': keep, 'summary': {'rules': [], 'facts': ['x'], 'progress': 'p', 'next_step': 'n'}})


@pytest.mark.parametrize('variant', ['json', 'free'])
async def test_continuing_with_a_fork_that_keeps_the_newest_exchange(variant: str) -> None:
    def reply(kind: str, messages: list[ModelMessage]) -> str:
        if variant == 'json':
            return _keep_newest(kind, messages)
        keep = json.loads(_keep_newest(kind, messages))['keep']
        return f'KEEP: {", ".join(keep)}\nsummary of the work so far'

    player = Player(reply=reply)
    agent = audit(player, Fork(variant=variant, trigger=LOW, retry=NO_WAIT), instructions='Audit the logs.')
    history = (await agent.run('Audit logs 1-6.')).all_messages()
    result = await agent.run(None, message_history=history)
    records = boundaries(result.all_messages())
    assert records and any(r.get('fallback_reason') is None for r in records)
    for request in player.agent_requests:
        assert shape_problems(request) == []


@pytest.mark.parametrize('name', list(STRATEGIES))
async def test_an_agent_with_instructions_and_no_prompt_keeps_its_opening_request(name: str) -> None:
    player = Player(steps=8)
    agent = audit(player, STRATEGIES[name](), instructions='Audit logs 1-8 and report.')
    result = await agent.run(None)
    history = result.all_messages()
    assert boundaries(history)
    # The opening request (no parts) stays first: no request may start with a model response.
    assert isinstance(history[0], ModelRequest) and history[0].parts == []
    for request in player.agent_requests:
        assert isinstance(request[0], ModelRequest)
        assert shape_problems(request) == []


@pytest.mark.parametrize('name', ['fork-json', 'fork-fixed', 'summary', 'native', 'switch', 'pipeline'])
async def test_tool_provided_user_content_does_not_take_the_users_turn(name: str) -> None:
    """`ToolReturn.content` adds a user part beside the return: the real question keeps its protection."""
    player = Player(steps=6)
    agent = Agent(FunctionModel(player), capabilities=[STRATEGIES[name]()])  # pyright: ignore[reportArgumentType]

    @agent.tool_plain
    def read_log(index: int) -> ToolReturn:  # pyright: ignore[reportUnusedFunction]
        log = '\n'.join(f'{index}-{line} service=api status=ok' for line in range(40))
        return ToolReturn(return_value=f'log {index}', content=[f'attachment of log {index}:\n{log}'])

    warmup = await agent.run('Say hello.')
    first_of_second_run = len(player.agent_requests)
    result = await agent.run('QUESTION: audit logs 1-6.', message_history=warmup.all_messages())
    assert boundaries(result.all_messages())
    compacted_requests = [r for r in player.agent_requests[first_of_second_run:] if boundaries(r)]
    assert compacted_requests
    for request in compacted_requests:
        assert any('QUESTION: audit logs 1-6.' in _prompt_text(message) for message in request), name
        assert shape_problems(request) == []


async def test_a_legacy_retry_prompt_is_not_taken_for_the_users_turn() -> None:
    legacy = RetryPromptPart('answer again')  # pyright: ignore[reportDeprecated]
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('QUESTION: audit logs 1-6.')]),
        ModelResponse(parts=[TextPart('hmm')]),
        ModelRequest(parts=[legacy]),
    ]
    player = Player(steps=6)
    agent = audit(player, Fork(variant='fixed', trigger=LOW, keep_last=0))
    result = await agent.run(None, message_history=history)
    assert boundaries(result.all_messages())
    for request in player.agent_requests[2:]:
        assert any('QUESTION' in _prompt_text(message) for message in request)


async def test_a_reply_with_lone_surrogates_leaves_a_serializable_history() -> None:
    player = Player(reply=lambda kind, messages: 'summary \ud800 with a lone surrogate \udfff')
    agent = audit(player, StatelessSummary(trigger=LOW, retry=NO_WAIT))
    result = await agent.run('Audit logs 1-6.')
    history = result.all_messages()
    assert boundaries(history)
    dumped = result.all_messages_json()  # failed before: the summary could not be encoded
    assert ModelMessagesTypeAdapter.validate_json(dumped)[0].parts
    summary = next(p.content for m in history for p in m.parts if isinstance(p, CompactionPart))
    assert 'summary \ufffd with a lone surrogate \ufffd' in summary


@pytest.mark.parametrize('name', ['fork-json', 'summary', 'native', 'reset'])
@pytest.mark.parametrize('big', [2**80, 10**5000], ids=['past-64-bits', 'past-the-digit-limit'])
async def test_big_integers_and_non_finite_floats_in_tool_arguments_do_not_crash_compaction(
    name: str, big: int
) -> None:
    """An integer past Python's digit limit (4,300) has no `str`: the reset failed on it at every compaction, and
    on a short history the fallback dropped nothing, so the history was never compacted."""
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Audit.')])]
    for index in range(6):
        args = {'index': big + index, 'path': f'/tmp/{index}', 'ratio': 1e308 * 10}
        history.append(ModelResponse(parts=[ToolCallPart('read_log', args, tool_call_id=f'x{index}')]))
        history.append(ModelRequest(parts=[ToolReturnPart('read_log', 'ok ' * 200, tool_call_id=f'x{index}')]))
    player = Player(steps=1)
    events: list[CompactionEvent] = []
    strategy = STRATEGIES[name]()
    strategy.observer = events.append
    agent = audit(player, strategy)
    with pytest.warns(None) if False else _no_runtime_warning():
        result = await agent.run(None, message_history=history)
    assert [e.kind for e in events][:1] == ['compacted']
    # Not a fallback after the strategy raised (the reset raised on the longer integer, the fork falls back on this
    # player's reply whatever the arguments).
    assert events[0].record is not None and events[0].record.fallback_reason != 'compactor_error'
    assert shape_problems([*result.all_messages(), ModelRequest(parts=[])]) == []
    # The history (its boundary included) is written as pydantic-ai writes it (read back by pydantic-core up to its
    # own limit on integers).
    assert result.all_messages_json().count(b'CompactionPart') + result.all_messages_json().count(b'compaction') > 0
    assert all(shape_problems(request) == [] for request in player.agent_requests)


class _no_runtime_warning:
    """Fails the test if compaction reported an internal failure (a swallowed crash)."""

    def __enter__(self) -> None:
        import warnings

        self._catcher = warnings.catch_warnings(record=True)
        self._seen = self._catcher.__enter__()
        warnings.simplefilter('always')

    def __exit__(self, *exc: object) -> None:
        self._catcher.__exit__(*exc)
        crashes = [str(w.message) for w in self._seen if 'compaction' in str(w.message)]
        assert crashes == []


async def test_protected_content_over_the_trigger_does_not_call_the_compactor_every_step() -> None:
    long_prompt = 'Audit these rules carefully:\n' + '\n'.join(f'rule {n}: keep field {n} as is' for n in range(600))

    async def fork_calls(min_saving: float) -> tuple[int, list[CompactionEvent]]:
        player = Player(steps=12)
        events: list[CompactionEvent] = []
        strategy = Fork(trigger=Trigger(tokens=1_000), retry=NO_WAIT, observer=events.append, min_saving=min_saving)
        result = await audit(player, strategy).run(long_prompt)
        assert result.output == 'report: done'
        return len(player.compactor_calls), events

    every_step, _ = await fork_calls(0.0)
    calls, events = await fork_calls(0.10)
    # The opening prompt alone is over the trigger: without a minimum, nearly every step forks.
    assert every_step >= 10
    assert calls <= every_step // 2
    skipped = [e for e in events if e.reason == 'below minimum saving']
    assert len(skipped) >= 5
    assert skipped[0].detail is not None and 'can be dropped (minimum 10%)' in skipped[0].detail
    # The compactor was called only where the new droppable material reached the minimum.
    assert all('minimum 10%' in (e.detail or '') for e in skipped)


async def test_the_summarizer_never_gets_more_than_its_window() -> None:
    seen: list[int] = []

    def reply(kind: str, messages: list[ModelMessage]) -> str:
        seen.append(sum(len(_prompt_text(m)) for m in messages))
        return 'short summary'

    player = Player(steps=1, reply=reply)
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Audit.')])]
    for index in range(40):
        history.append(ModelResponse(parts=[ToolCallPart('read_log', {'i': index}, tool_call_id=f'x{index}')]))
        history.append(ModelRequest(parts=[ToolReturnPart('read_log', 'line ' * 25_000, tool_call_id=f'x{index}')]))
    agent = audit(player, StatelessSummary(trigger=LOW, retry=NO_WAIT, max_transcript_tokens=50_000))
    result = await agent.run(None, message_history=history)
    # About 4 MB of history; the summarizer read at most its budget (~4 characters a token) plus the prompt.
    assert seen and max(seen) < 50_000 * 4 + 5_000
    record = boundaries(result.all_messages())[0]
    assert record['extra']['not_summarized'][0] == 'g1'
    assert len(record['extra']['not_summarized']) >= 30


async def test_an_old_record_of_the_wrong_type_does_not_stop_compaction() -> None:
    odd = {'strategy': 'fork', 'kept': 7, 'dropped': 'g1', 'next_id': 'x', 'sequence': True, 'extra': [1]}
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('Audit.')]),
        ModelRequest(parts=[CompactionPart(content='older summary', metadata={'pydantic_ai_compaction': odd})]),
    ]
    player = Player(steps=8)
    agent = audit(player, Fork(variant='fixed', trigger=LOW, retry=NO_WAIT))
    result = await agent.run(None, message_history=history)
    fresh = [r for r in boundaries(result.all_messages()) if r.get('boundary_id')]
    assert fresh and fresh[-1]['fallback_reason'] is None
