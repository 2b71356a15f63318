"""The selection that sends a history it keeps whole as the request it was given, and of `terms()` found
in C-level passes: real runs against a selection computed from scratch, and `terms()` against the pattern it
replaced."""

from __future__ import annotations

import copy
import re
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage

from pydantic_ai_compaction import BoundedSelection, CompactionEvent
from pydantic_ai_compaction.processors.views.selection import (
    STOP_WORDS,
    current_request_text,
    project,
    select,
    terms,
)
from pydantic_ai_compaction.runtime.project import Unchanged, project_request
from pydantic_ai_compaction.runtime.project import project as checked_project
from pydantic_ai_compaction.runtime.segment import segment_fresh

EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_OLD_TERM = re.compile(r'[a-z0-9_]+')


def old_terms(text: str) -> list[str]:
    """`terms()` as the pattern found them before."""
    return [t for t in _OLD_TERM.findall(text.lower()) if t not in STOP_WORDS]


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(exclude_categories=())))  # surrogates too
@example('İstanbul straße ﬁle ǅ K Ω ǰ ΐ')
@example('cafe\u0301 naïve x\u0307 \u212a\u212b')
@example('٣٤ ५६ ௭ １２ ² ₃ ⅷ')
@example("don't it's O'Brien’s snake_case __init__ a_b-c")
@example('\ud800lone\udfffsurrogates\ud83d\ude00')
@example('\x00nul\x0bvt\x1cfs\x85nel\u2028ls\u3000ideo')
def test_terms_are_the_patterns_terms_on_any_text(text: str) -> None:
    assert terms(text) == old_terms(text)


def test_terms_are_the_patterns_terms_around_every_code_point() -> None:
    """Every code point (surrogates included) between two term characters: its lowercase form may grow
    (`'İ'` becomes `'i'` and a combining dot) or turn ASCII (the Kelvin sign), and the split must not differ."""
    text = 'x'.join(map(chr, range(0x110000)))
    assert terms(text) == old_terms(text)


@dataclass
class FreshSelection(AbstractCapability[Any]):
    """The selection computed from scratch at every request and checked, as it was sent before (a new list)."""

    budget: int
    events: list[CompactionEvent] = field(default_factory=list[CompactionEvent])

    async def before_model_request(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> Any:
        messages = request_context.messages
        view = segment_fresh(messages, prompt=ctx.prompt)
        chosen = select(view, current_request_text(messages), self.budget)
        checked = project_request(
            messages, project(view, chosen), 'BoundedSelection', reason='selection', observer=self.events.append
        )
        return replace(request_context, messages=checked)


@dataclass
class Meddler(AbstractCapability[Any]):
    """A capability listed after the selection that changes the request it is given, in place."""

    how: str

    async def before_model_request(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> Any:
        messages = request_context.messages
        if self.how == 'setitem' and len(messages) > 1:
            first = messages[0]
            assert isinstance(first, ModelRequest)
            messages[0] = replace(first, parts=[*first.parts, UserPromptPart('meddled alpha')])
        elif self.how == 'delete' and len(messages) > 2:
            del messages[1:3]
        elif self.how == 'reassign':
            request_context.messages = [*messages[:-1], *messages[-1:]]
        return request_context


@dataclass
class Editor(AbstractCapability[Any]):
    """A capability listed before the selection that edits the persisted history between requests: a message in the
    middle swapped for a copy with other content (`dataclasses.replace`), the last one swapped for an equal copy, or
    every message after the first handed over as equal copies."""

    how: str
    edits: int = 0

    async def before_model_request(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> Any:
        history = ctx.messages
        self.edits += 1
        if self.how == 'middle' and len(history) > 2:
            middle = len(history) // 2
            message = history[middle]
            if isinstance(message, ModelRequest):
                history[middle] = replace(message, parts=[*message.parts, UserPromptPart(f'edit {self.edits} beta')])
            else:
                history[middle] = replace(message, parts=[*message.parts, TextPart(f'edit {self.edits} alpha')])
        elif self.how == 'turn' and self.edits % 3 == 2 and isinstance(history[-1], ModelRequest):
            # The user speaks mid-run: a new turn in the request that carries the tool returns.
            last = history[-1]
            history[-1] = replace(last, parts=[*last.parts, UserPromptPart(f'now about gamma {self.edits}')])
        elif self.how == 'last' and history:
            history[-1] = replace(history[-1])
        elif self.how == 'window':
            # A view listed first that sends a shorter history on every other request (the selection then sees
            # its history shrink and grow back).
            request_context.messages = list(history[: len(history) // 2 + 1] if self.edits % 2 else history)
            if isinstance(request_context.messages[-1], ModelRequest):
                return request_context
            request_context.messages = list(history)
            return request_context
        elif self.how == 'copies':
            request_context.messages = [history[0], *copy.deepcopy(history[1:])]
            return request_context
        request_context.messages = list(history)
        return request_context


@dataclass
class Recorder(AbstractCapability[Any]):
    seen: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])

    async def before_model_request(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> Any:
        self.seen.append(list(request_context.messages))
        return request_context


STEP = st.sampled_from(['tool', 'tool', 'tool_return', 'tool_empty', 'text'])


def _script(steps: list[str]) -> FunctionModel:
    """A model that takes *steps* in turn (a tool call, a final answer), then answers."""
    position = {'n': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = position['n']
        position['n'] += 1
        step = steps[n] if n < len(steps) else 'text'
        if step == 'text':
            return ModelResponse(parts=[TextPart(f'answer {n} about alpha')])
        tool = {'tool': 'read', 'tool_return': 'attach', 'tool_empty': 'nothing'}[step]
        return ModelResponse(parts=[ToolCallPart(tool, {'index': n}, tool_call_id=f'call{n}')])

    return FunctionModel(respond)


def _agent(steps: list[str], capabilities: list[AbstractCapability[Any]]) -> Agent[None, str]:
    agent = Agent(_script(steps), capabilities=capabilities)

    @agent.tool_plain
    def read(index: int) -> str:
        return f'log {index}: ' + 'alpha beta gamma ' * (index % 5 + 1)

    @agent.tool_plain
    def attach(index: int) -> ToolReturn:
        return ToolReturn(return_value=f'attached {index}', content=[f'the log {index} says delta beta'])

    @agent.tool_plain
    def nothing(index: int) -> str:
        return ''

    return agent


async def _runs(
    selection: AbstractCapability[Any], edit: str, meddle: str, runs: list[tuple[str, list[str], str]]
) -> tuple[list[Any], list[Any], list[str]]:
    """What the model was sent at each request over several runs, the history after them, and the warnings."""
    given, sent = Recorder(), Recorder()
    capabilities: list[AbstractCapability[Any]] = [Editor(edit), given, selection, Meddler(meddle), sent]
    history: list[ModelMessage] = []
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter('always')
        # An event loop another test left unclosed is reported whenever the collector frees it, which may be here.
        warnings.filterwarnings('ignore', 'unclosed event loop', ResourceWarning)
        for prompt, steps, reload in runs:
            loaded = copy.deepcopy(history) if reload == 'copy' else history
            result = await _agent(steps, capabilities).run(prompt, message_history=loaded)
            history = result.all_messages()
    # An unclosed event loop of an earlier test can be collected during either run: not this run's warning.
    said = [f'{w.category.__name__}: {w.message}' for w in warned if not issubclass(w.category, ResourceWarning)]
    # Which message of the request as it arrived each message sent is (-1: another object), then what they hold.
    places = [
        [next((i for i, m in enumerate(before) if m is message), -1) for message in after]
        for before, after in zip(given.seen, sent.seen, strict=True)
    ]
    return [(place, _plain(m)) for place, m in zip(places, sent.seen, strict=True)], _plain(history), said


def _plain(messages: list[ModelMessage]) -> list[tuple[str, list[tuple[str, str]]]]:
    """*messages* without what differs between two runs (timestamps, run ids)."""
    return [
        (
            type(m).__name__,
            [(type(p).__name__, repr({k: v for k, v in vars(p).items() if k != 'timestamp'})) for p in m.parts],
        )
        for m in messages
    ]


RUNS = st.lists(
    st.tuples(
        st.sampled_from(['read the beta logs', 'alpha', '', 'what about delta beta']),
        st.lists(STEP, max_size=6),
        st.sampled_from(['same', 'copy']),
    ),
    min_size=1,
    max_size=3,
)


@EXAMPLES
@given(
    RUNS,
    st.sampled_from([1, 40, 150, 10_000]),
    st.sampled_from(['none', 'middle', 'last', 'turn', 'window', 'copies']),
    st.sampled_from(['none', 'setitem', 'delete', 'reassign']),
)
@pytest.mark.anyio
async def test_real_runs_send_what_a_fresh_checked_selection_sends(
    runs: list[tuple[str, list[str], str]], budget: int, edit: str, meddle: str
) -> None:
    """Request by request the same messages and the same history afterwards, with a capability after the selection
    that changes the request in place, and histories passed again as the same objects or as copies."""
    events: list[CompactionEvent] = []
    incremental = await _runs(BoundedSelection[Any](budget=budget, observer=events.append), edit, meddle, runs)
    reference = FreshSelection(budget)
    expected = await _runs(reference, edit, meddle, runs)
    assert incremental[0] == expected[0]
    assert incremental[1] == expected[1]
    assert incremental[2] == expected[2]
    assert [(e.kind, e.reason, e.messages_before, e.messages_after, e.detail) for e in events] == [
        (e.kind, e.reason, e.messages_before, e.messages_after, e.detail) for e in reference.events
    ]


def _broken() -> tuple[list[ModelMessage], list[ModelMessage]]:
    """A history, and a projection of it that leaves a tool return without its call."""
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('read the log')]),
        ModelResponse(parts=[ToolCallPart('read', {}, tool_call_id='c1')]),
        ModelRequest(parts=[ToolReturnPart('read', 'alpha', tool_call_id='c1')]),
        ModelResponse(parts=[TextPart('read')]),
        ModelRequest(parts=[UserPromptPart('and beta?')]),
    ]
    return history, [history[0], *history[2:]]


def test_a_refused_projection_warns_from_the_caller_of_project_request() -> None:
    """`project_request` (which the archive calls itself) names its caller in the warning, as it did before the
    check moved into a helper: a user's `filterwarnings(module=...)` for the caller keeps working."""
    history, broken = _broken()
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter('always')
        assert project_request(history, broken, 'Mine', reason='x') == history
    assert [w.filename for w in warned] == [__file__]


@pytest.mark.anyio
async def test_a_refusal_warns_from_one_place_whether_or_not_the_projection_is_the_request() -> None:
    """A projection that is the request itself (`Unchanged`) and a copy of it are refused from the same place, so the
    `default` filter shows the same refusal once, as when every projection was a copy."""
    history, _ = _broken()
    broken = [history[0], *history[2:]]  # the request itself breaks the rule: every projection of it is refused

    async def as_itself() -> Unchanged:
        return Unchanged(tuple(broken))

    async def as_copy() -> list[ModelMessage]:
        return list(broken)

    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), prompt=None)  # pyright: ignore[reportArgumentType]
    places: list[tuple[str, int]] = []
    for build in (as_itself, as_copy):
        request = ModelRequestContext(
            model=TestModel(),
            messages=list(broken),
            model_settings=None,
            model_request_parameters=ModelRequestParameters(),
        )
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter('always')
            sent = await checked_project('Mine', ctx, request, build, reason='x')
        assert sent.messages == broken
        places.extend((w.filename, w.lineno) for w in warned)
    assert len(places) == 2
    assert places[0] == places[1]
    assert places[0][0].endswith('project.py')
