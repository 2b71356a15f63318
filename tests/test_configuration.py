"""Bad configuration fails at construction, naming `Class.field` and the value, for every public field."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest

from pydantic_ai_compaction import (
    Archive,
    BoundedSelection,
    CompactionEvent,
    ConfigurationError,
    CuratedSelection,
    ForgetReasoning,
    Fork,
    InstructionSources,
    Native,
    NoCompaction,
    Notes,
    Pipeline,
    Reassert,
    Recall,
    ResetToCheckpoint,
    RetryPolicy,
    StatelessSummary,
    Switch,
    Tiered,
    Trigger,
    Verified,
)
from pydantic_ai_compaction.runtime import our_record

from .support import ScriptedAgentModel, audit_agent

NAN = math.nan
INF = math.inf
HUGE = 10**400  # an integer beyond the float range
MARKED = InstructionSources(markers=('CHANGE:',))

# (class name, field, factory taking the bad value, bad values)
CASES: list[tuple[str, str, Callable[[Any], object], list[object]]] = [
    ('Trigger', 'tokens', lambda v: Trigger(tokens=v), [0, -1, True, 2.5, '100', NAN, INF]),
    ('Trigger', 'fraction', lambda v: Trigger(fraction=v), [0, 1.5, -0.1, NAN, INF, True, '0.5']),
    ('Trigger', 'messages', lambda v: Trigger(messages=v), [0, True, 3.0, '10']),
    ('Trigger', 'context_window', lambda v: Trigger(fraction=0.5, context_window=v), [0, NAN, 1e9, True]),
    ('Trigger', 'fallback_context_window', lambda v: Trigger(tokens=10, fallback_context_window=v), [0, INF]),
    ('Trigger', 'tokenizer', lambda v: Trigger(tokens=10, tokenizer=v), ['len', 3]),
    ('RetryPolicy', 'attempts', lambda v: RetryPolicy(attempts=v), [0, INF, NAN, True, 2.5, '3', 10**6]),
    ('RetryPolicy', 'initial_wait', lambda v: RetryPolicy(initial_wait=v), [-1, NAN, INF, '1', True]),
    ('RetryPolicy', 'max_wait', lambda v: RetryPolicy(max_wait=v), [-1, NAN, INF, None]),
    ('Fork', 'variant', lambda v: Fork(variant=v), ['yaml', '', None, True]),
    ('Fork', 'keep_last', lambda v: Fork(keep_last=v), [-1, 2.5, True, '2', NAN]),
    ('Fork', 'model', lambda v: Fork(model=v), [3, ['openai:gpt-5'], '', '   ', 'openai:', ':gpt-5', ' openai:x']),
    ('StatelessSummary', 'model', lambda v: StatelessSummary(model=v), ['', 'anthropic: ', 3]),
    ('CuratedSelection', 'model', lambda v: CuratedSelection(model=v), ['', 'openai:']),
    ('ClearThenSummarize', 'model', lambda v: Tiered(model=v), ['\t', 'google-gla:']),
    ('Fork', 'fallback_keep_last', lambda v: Fork(fallback_keep_last=v), [0, -3, 1.5, True, INF]),
    ('Fork', 'min_saving', lambda v: Fork(min_saving=v), [-0.1, 1.5, NAN, INF, '0.1']),
    ('Fork', 'trigger', lambda v: Fork(trigger=v), [18_000, None, 'tokens']),
    ('Fork', 'retry', lambda v: Fork(retry=v), [3, None]),
    ('Fork', 'protect', lambda v: Fork(protect=v), ['g1', 1]),
    ('Fork', 'observer', lambda v: Fork(observer=v), [[], 'print']),
    ('Fork', 'reraise_in_compact', lambda v: Fork(reraise_in_compact=v), [1, 'yes', None]),
    ('StatelessSummary', 'keep_last', lambda v: StatelessSummary(keep_last=v), [-1, 1.5, True, NAN]),
    ('StatelessSummary', 'max_transcript_tokens', lambda v: StatelessSummary(max_transcript_tokens=v), [0, 50, 2.5]),
    ('StatelessSummary', 'instructions', lambda v: StatelessSummary(instructions=v), [None, 3]),
    ('Native', 'emulate', lambda v: Native(emulate=v), [0, 'no', None]),
    ('NoCompaction', 'fallback_keep_last', lambda v: NoCompaction(fallback_keep_last=v), [0, NAN]),
    ('Switch', 'when', lambda v: Switch(when=v, then=Fork(), otherwise=Native()), [True, 'compactions < 3']),
    ('Switch', 'then', lambda v: Switch(when=lambda s: True, then=v, otherwise=Native()), ['fork', None]),
    ('Switch', 'otherwise', lambda v: Switch(when=lambda s: True, then=Fork(), otherwise=v), [None, Pipeline]),
    ('Pipeline', 'steps', lambda v: Pipeline(v), [[], Fork(), 'fork', None]),
    ('RetryPolicy', 'initial_wait', lambda v: RetryPolicy(initial_wait=v), [HUGE]),
    ('Trigger', 'fraction', lambda v: Trigger(fraction=v), [HUGE]),
    # Windows past the float range: every request failed converting the ratio.
    ('Trigger', 'context_window', lambda v: Trigger(fraction=0.5, context_window=v), [HUGE, 10**12 + 1]),
    ('Trigger', 'fallback_context_window', lambda v: Trigger(fraction=0.5, fallback_context_window=v), [HUGE]),
    ('ClearThenSummarize', 'context_window', lambda v: Tiered(context_window=v), [HUGE]),
    ('ClearThenSummarize', 'store', lambda v: Tiered(store=v), [3, 'x.sqlite3']),
    ('Verified', 'model_settings', lambda v: Verified(Fork(), model_settings=v), [3, 'fast']),
    # A pattern matching the empty string marks every line of tool output as an instruction.
    (
        'InstructionSources',
        'markers',
        lambda v: InstructionSources(markers=v),
        [(re.compile(''),), (re.compile('^'),), ('CHANGE:', re.compile('.*'))],
    ),
    ('ForgetReasoning', 'write_tools', lambda v: ForgetReasoning(write_tools=v), ['']),
    # Reassert and its sources: a bare string would become one-character markers.
    ('InstructionSources', 'markers', lambda v: InstructionSources(markers=v), ['CHANGE:', re.compile('x'), 3]),
    ('InstructionSources', 'user_prompts', lambda v: InstructionSources(markers=(), user_prompts=v), ['no', None]),
    ('Reassert', 'inner', lambda v: Reassert(v, sources=MARKED), ['native', None]),
    ('Reassert', 'sources', lambda v: Reassert(Native(), sources=v), [None, 'CHANGE:']),
    ('ResetToCheckpoint', 'excerpt_chars', lambda v: ResetToCheckpoint(excerpt_chars=v), [NAN, 2.5, True, '100']),
    ('ResetToCheckpoint', 'sources', lambda v: ResetToCheckpoint(sources=v), ['CHANGE:']),
    # Views.
    ('ClearThenSummarize', 'keep_results', lambda v: Tiered(keep_results=v), [2.5, True, NAN, -1]),
    ('ClearThenSummarize', 'context_window', lambda v: Tiered(context_window=v), [NAN, 2.5, 0]),
    ('ClearThenSummarize', 'write_tools', lambda v: Tiered(write_tools=v), ['(', 3]),
    ('ClearThenSummarize', 'clear_at', lambda v: Tiered(clear_at=v), ['0.5', NAN, 1.5]),
    ('BoundedSelection', 'budget', lambda v: BoundedSelection(budget=v), [NAN, INF, 2.5, True, '1000', 0]),
    ('BoundedSelection', 'retrieve', lambda v: BoundedSelection(retrieve=v), [NAN, True, -1]),
    ('CuratedSelection', 'secret_patterns', lambda v: CuratedSelection(secret_patterns=v), ['abc', ['(']]),
    ('CuratedSelection', 'focal_budget', lambda v: CuratedSelection(focal_budget=v), [NAN, True, 0]),
    ('CuratedSelection', 'full_history', lambda v: CuratedSelection(full_history=v), [1, 'yes']),
    ('ForgetReasoning', 'policy', lambda v: ForgetReasoning(policy=v), ['sometimes', None]),
    ('ForgetReasoning', 'write_tools', lambda v: ForgetReasoning(write_tools=v), ['(', 3]),
    # Memory.
    ('Archive', 'reminder_tokens', lambda v: Archive(reminder_tokens=v), [NAN, True, 2.5, -1]),
    ('Archive', 'reminder_every_chars', lambda v: Archive(reminder_every_chars=v), [NAN, '20000']),
    ('Archive', 'conversation', lambda v: Archive(conversation=v), [3, ['a']]),
    ('Notes', 'conversation', lambda v: Notes(conversation=v), [3]),
    ('Recall', 'limit', lambda v: Recall(limit=v), [NAN, True, 2.5, 0, 501, 2**70]),
]


@pytest.mark.parametrize(
    ('owner', 'name', 'build', 'value'),
    [(owner, name, build, value) for owner, name, build, values in CASES for value in values],
    ids=lambda item: repr(item)[:40] if not callable(item) else '',
)
def test_a_bad_value_fails_at_construction_naming_the_field_and_the_value(
    owner: str, name: str, build: Callable[[Any], object], value: object
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        build(value)
    message = str(raised.value)
    assert f'{owner}.{name}' in message
    if isinstance(value, int | float | str) and not isinstance(value, bool) and value != HUGE:
        assert repr(value)[:40] in message


def test_a_configuration_error_is_both_a_value_and_a_type_error() -> None:
    # Callers that caught either for a bad argument keep working.
    with pytest.raises(ValueError):
        Trigger(tokens=-1)
    with pytest.raises(TypeError):
        Trigger(tokens='100')  # pyright: ignore[reportArgumentType]


def test_good_values_are_accepted_unchanged() -> None:
    assert Trigger(fraction=1).fraction == 1
    assert RetryPolicy(attempts=100, initial_wait=0, max_wait=0).attempts == 100
    assert Fork(keep_last=0, min_saving=0).min_saving == 0
    assert StatelessSummary(max_transcript_tokens=100).max_transcript_tokens == 100
    assert len(Pipeline((Fork(), Native())).steps) == 2
    for name in ('openai:gpt-5-mini', 'test', 'gateway/openai:gpt-5', 'openai:ft:gpt-4o-mini:org::id'):
        assert Fork(model=name).model == name


def test_messages_say_what_to_write_only_where_it_helps() -> None:
    with pytest.raises(ConfigurationError, match=r"write markers=\('CHANGE:',\)"):
        InstructionSources(markers='CHANGE:')  # pyright: ignore[reportArgumentType]
    with pytest.raises(ConfigurationError) as raised:
        InstructionSources(markers=None)  # pyright: ignore[reportArgumentType]
    assert 'write markers' not in str(raised.value)
    with pytest.raises(ConfigurationError) as raised:
        Tiered(write_tools=['write', 'edit'])  # pyright: ignore[reportArgumentType]
    assert str(raised.value).startswith('ClearThenSummarize.write_tools must be')  # one pattern, not an item of a list


async def _async_when(state: object) -> bool:
    del state
    return False


class _AsyncCall:
    async def __call__(self, event: object) -> None:
        del event


HOOKS: list[tuple[str, Callable[[Any], object], object]] = [
    # An `async def` hook is called without await: a coroutine, truthy, never run.
    ('Switch.when', lambda v: Switch(when=v, then=Fork(), otherwise=Native()), _async_when),
    ('Fork.observer', lambda v: Fork(observer=v), _AsyncCall()),
    ('Archive.observer', lambda v: Archive(observer=v), _async_when),
    ('Fork.observer', lambda v: Fork(observer=v), functools.partial(_AsyncCall())),
    ('Archive.conversation', lambda v: Archive(conversation=v), _async_when),
    ('Recall.conversation', lambda v: Recall(conversation=v), lambda ctx, extra: 'c'),  # pyright: ignore[reportUnknownLambdaType]
    # The wrong number of parameters, told at construction rather than at the first compaction.
    ('Fork.protect', lambda v: Fork(protect=v), lambda exchange: True),  # pyright: ignore[reportUnknownLambdaType]
    ('Archive.protect', lambda v: Archive(protect=v), lambda: True),
    ('Switch.when', lambda v: Switch(when=v, then=Fork(), otherwise=Native()), lambda a, b: True),  # pyright: ignore[reportUnknownLambdaType]
    ('Trigger.tokenizer', lambda v: Trigger(tokens=10, tokenizer=v), lambda text, model: 1),  # pyright: ignore[reportUnknownLambdaType]
    ('ResetToCheckpoint.checkpoint', lambda v: ResetToCheckpoint(checkpoint=v), lambda view: ''),  # pyright: ignore[reportUnknownLambdaType]
    ('ResetToCheckpoint.extract', lambda v: ResetToCheckpoint(extract=v), lambda call: []),  # pyright: ignore[reportUnknownLambdaType]
    ('ForgetReasoning.scorer', lambda v: ForgetReasoning(scorer=v), lambda context: []),  # pyright: ignore[reportUnknownLambdaType]
    ('BoundedSelection.observer', lambda v: BoundedSelection(observer=v), lambda event, extra: None),  # pyright: ignore[reportUnknownLambdaType]
]


@pytest.mark.parametrize(
    ('field', 'build', 'hook'), HOOKS, ids=[f'{field}-{i}' for i, (field, _, _) in enumerate(HOOKS)]
)
def test_a_hook_that_cannot_be_called_as_the_runtime_calls_it_fails_at_construction(
    field: str, build: Callable[[Any], object], hook: object
) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(field)) as raised:
        build(hook)
    assert 'a callable of' in str(raised.value)


def test_hooks_the_runtime_can_call_are_accepted() -> None:
    import functools

    def protect(exchange: object, messages: object, *, extra: int = 0) -> bool:
        del exchange, messages, extra
        return False

    def everything(*args: object) -> bool:
        del args
        return True

    assert Fork(protect=protect).protect is protect
    assert Fork(protect=everything).protect is everything

    def flagged(flag: bool, exchange: object, messages: object) -> bool:
        del exchange, messages
        return flag

    partial = functools.partial(flagged, False)
    assert Fork(protect=partial).protect is partial
    assert Trigger(tokens=10, tokenizer=len).tokenizer is len  # a builtin whose signature is read
    assert Switch(when=bool, then=Fork(), otherwise=Native()).when is bool  # a type: its call is read
    observed: list[object] = []
    assert Fork(observer=observed.append).observer == observed.append
    # Mocks as users write them in tests (a spec'd one tripped `inspect` with a bare TypeError).
    from unittest.mock import MagicMock, Mock, create_autospec

    def observe(event: object) -> None:
        del event

    for mock in (Mock(spec=observe), MagicMock(), create_autospec(observe)):
        assert Fork(observer=mock).observer is mock

    class StaticCall:
        @staticmethod
        def __call__(exchange: object, messages: object) -> bool:
            del exchange, messages
            return False

    static = StaticCall()
    assert Fork(protect=static).protect is static  # `inspect` reads a parameter too few on such an object

    def one(exchange: object) -> bool:
        del exchange
        return False

    @functools.wraps(one)
    def adapter(exchange: object, messages: object) -> bool:  # wraps a function of another arity
        del messages
        return one(exchange)

    assert Fork(protect=adapter).protect is adapter


def _set(capability: Any, field: str, value: Any) -> Any:
    setattr(capability, field, value)
    return capability


@pytest.mark.parametrize(
    ('make', 'message'),
    [
        (lambda: _set(StatelessSummary(), 'keep_last', -3), 'StatelessSummary.keep_last must be'),
        (lambda: _set(Fork(), 'request', 'bogus'), "Fork.request must be one of 'next', 'sent', got 'bogus'"),
        (lambda: _set(Fork(), 'min_saving', NAN), 'Fork.min_saving must be'),
        (lambda: _set(Verified(StatelessSummary()), 'on_failure', 'bogus'), 'Verified.on_failure must be'),
        (lambda: _set(Switch(lambda s: True, Fork(), Fork()), 'then', None), 'Switch.then must be a compaction'),
        (lambda: _set(Pipeline([Fork()]), 'steps', [Fork(), None]), 'Pipeline.steps[1] must be a compaction'),
        (lambda: Switch(lambda s: True, _set(Fork(), 'keep_last', -1), Fork()), 'Fork.keep_last must be'),
        (
            lambda: Reassert(Pipeline([_set(StatelessSummary(), 'request', 'x')]), sources=MARKED),
            'StatelessSummary.request must be',
        ),
    ],
    ids=['summary', 'fork-request', 'fork-nan', 'verified', 'switch', 'pipeline', 'switch-branch', 'nested'],
)
def test_a_field_set_after_construction_is_checked_when_the_run_starts(make: Callable[[], Any], message: str) -> None:
    # Set after construction, a value the constructor refuses ran silently as another (keep_last=-3 as 0), or a
    # composed child that is not a strategy failed the run with an `AttributeError` from the warning meant to say so.
    script = ScriptedAgentModel(logs=6)
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        audit_agent(script, [make()]).run_sync('Audit logs 0-5.')
    assert script.calls == []  # refused before any request


def test_a_valid_field_set_after_construction_takes_effect() -> None:
    def kept(make: Callable[[], StatelessSummary[None]]) -> tuple[str, ...]:
        events: list[CompactionEvent] = []
        summary = make()
        summary.observer = events.append
        audit_agent(ScriptedAgentModel(logs=8), [summary]).run_sync('Audit logs 0-7.')
        return next(e.record.kept for e in events if e.record is not None)

    trigger = Trigger(tokens=3_000)
    assert kept(lambda: _set(StatelessSummary(trigger=trigger), 'keep_last', 4)) == kept(
        lambda: StatelessSummary(trigger=trigger, keep_last=4)
    )
    assert kept(lambda: StatelessSummary(trigger=trigger, keep_last=4)) != kept(
        lambda: StatelessSummary(trigger=trigger)
    )


def test_a_composed_strategy_set_to_another_value_mid_run_is_skipped_with_a_warning() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    from .support import log_text

    switch = Switch(lambda state: True, Fork(trigger=Trigger(tokens=3_000)), Fork(trigger=Trigger(tokens=3_000)))
    script = ScriptedAgentModel(logs=8)

    def breaking(messages: Any, info: Any) -> Any:
        if script.step == 3:
            switch.then = None  # pyright: ignore[reportAttributeAccessIssue]
        return script(messages, info)

    agent = Agent(FunctionModel(breaking), capabilities=[switch])

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index, 300)

    with pytest.warns(RuntimeWarning, match=r'^Switch compaction was skipped for this request: AttributeError'):
        result = agent.run_sync('Audit logs 0-7.')
    assert result.output == 'report: done'


def test_a_strategy_of_the_users_own_runs_whatever_its_init_takes() -> None:
    # Checking settings again by copying the strategy failed every run of one taking an `InitVar` or written with
    # an `__init__` of its own. (`InitVar` is imported at the module's top: dataclasses reads it there in a string
    # annotation.)
    from pydantic_ai_compaction import CompactionContext, ConfiguredCompaction, ConversationView, Proposal, Summary

    @dataclass
    class Labelled(ConfiguredCompaction[None]):
        prefix: InitVar[str]
        label: str = field(init=False, default='')

        def __post_init__(self, prefix: str) -> None:
            super().__post_init__()
            self.label = f'{prefix}-newest'

        @property
        def strategy_name(self) -> str:
            return self.label

        async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
            return Proposal.keep([e for e in view.exchanges if not e.forced][-1:], summary=Summary('earlier logs'))

    class KeepLast(ConfiguredCompaction[None]):
        def __init__(self, n: int) -> None:
            super().__init__(trigger=Trigger(tokens=3_000))
            self.n = n

        @property
        def strategy_name(self) -> str:
            return 'keep-last'

        async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
            return Proposal.keep([e for e in view.exchanges if not e.forced][-self.n :], summary=Summary('earlier'))

    labelled = Labelled(prefix='mine', trigger=Trigger(tokens=3_000))
    for strategy, name in ((labelled, 'mine-newest'), (KeepLast(2), 'keep-last')):
        result = audit_agent(ScriptedAgentModel(logs=8), [strategy]).run_sync('Audit logs 0-7.')
        records = [r for m in result.all_messages() for p in m.parts if (r := our_record(p)) is not None]
        assert result.output == 'report: done' and records and {r['strategy'] for r in records} == {name}
    # Ours composed in it are still checked.
    switch = Switch(lambda state: True, KeepLast(2), _set(Fork(), 'keep_last', -1))
    with pytest.raises(ConfigurationError, match=r'Fork\.keep_last must be'):
        audit_agent(ScriptedAgentModel(logs=8), [switch]).run_sync('Audit logs 0-7.')
