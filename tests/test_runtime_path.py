"""Every exported processor's requests and history changes pass the runtime's invariant check.

Strategies reach it through the engine; views and memory through `runtime/project.py`. The check is
`shape.shape_problems`: a spy wrapped around it everywhere it is bound records every list it was asked
about. Two recorders around the processor then watch a real `Agent` run: whenever the request the
processor produced differs from what it was given, or the persisted history changed (in a hook or in a
tool), the new list must be one the spy saw. A processor that built or saved a list of its own without
the runtime fails here.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import RunContext

import pydantic_ai_compaction as pac
from pydantic_ai_compaction.processors import FORK_MARKER, NATIVE_MARKER, SUMMARY_MARKER
from pydantic_ai_compaction.processors.views.curation import CURATOR_MARKER
from pydantic_ai_compaction.processors.views.tiered import HANDOFF_MARKER
from pydantic_ai_compaction.runtime import project as runtime_project
from pydantic_ai_compaction.runtime import shape

from .support import fork_json, last_prompt, log_text, recorded_history

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext

LOW = pac.Trigger(tokens=500)
MARKERS = pac.InstructionSources(markers=('CHANGE:',))
CURATION = (
    '{"focal": [], "orientation": {"relevant_state": "logs 0-5 read", "required": ["ids lowercase"], "prohibited": []}}'
)

PROCESSORS: dict[str, Callable[[], AbstractCapability[Any]]] = {
    'NoCompaction': lambda: pac.NoCompaction(trigger=LOW),
    'Native': lambda: pac.Native(trigger=LOW),
    'StatelessSummary': lambda: pac.StatelessSummary(trigger=LOW),
    'Fork': lambda: pac.Fork(variant='json', trigger=LOW),
    'Reassert': lambda: pac.Reassert(pac.Native(trigger=LOW), sources=MARKERS),
    'ResetToCheckpoint': lambda: pac.ResetToCheckpoint(trigger=LOW, sources=MARKERS),
    'Switch': lambda: pac.Switch(
        when=lambda s: s.compactions < 1, then=pac.StatelessSummary(trigger=LOW), otherwise=pac.Fork()
    ),
    'Pipeline': lambda: pac.Pipeline([pac.StatelessSummary(trigger=LOW)]),
    'Verified': lambda: pac.Verified(pac.StatelessSummary(trigger=LOW)),
    'Tiered': lambda: pac.Tiered(context_window=4_000, clear_at=0.5, summarize_at=0.5, summarize_to=0.2),
    'ForgetReasoning': lambda: pac.ForgetReasoning(policy='drop'),
    'BoundedSelection': lambda: pac.BoundedSelection(budget=200),
    'CuratedSelection': lambda: pac.CuratedSelection(focal_budget=200),
    'Orientation': lambda: pac.Orientation(),
    'Archive': lambda: pac.Archive(reminder_tokens=100),
    'Notes': lambda: pac.Notes(),
    'Recall': lambda: pac.Recall(),
}
"""Each exported capability, configured so that the run below makes it act."""

OWN_TOOL: dict[str, ToolCallPart] = {
    'Archive': ToolCallPart('context_apply', {'items': [{'result_id': 'r2', 'note': 'log 1: clean'}]}),
    'Notes': ToolCallPart('note', {'kind': 'decision', 'text': 'ids lowercase'}),
    'Recall': ToolCallPart('recall', {'query': 'lowercase ids'}),
}
"""The tool call that exercises a memory capability's own tool."""


def test_every_exported_capability_is_covered() -> None:
    exported = {
        name
        for name in pac.__all__
        if isinstance(value := getattr(pac, name), type) and issubclass(value, AbstractCapability)
    }
    # `ClearThenSummarize` is `Tiered` under its new name: one class, covered once.
    assert exported - {'ClearThenSummarize'} <= set(PROCESSORS) | {'CompactionCapability', 'ConfiguredCompaction'}
    assert pac.ClearThenSummarize is pac.Tiered
    assert len(PROCESSORS) == 17


@dataclass
class Spy:
    """Every list `shape_problems`, a view's incremental `ShapeCheck` or (for a log rewrite) `log_problems`
    or `change_problems` found no problem in."""

    checked: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])

    def saw(self, messages: Sequence[ModelMessage]) -> bool:
        candidate = list(messages)
        return any(candidate == seen for seen in self.checked)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    record = Spy()
    real = shape.shape_problems

    def spying(messages: Sequence[ModelMessage], *, before: Sequence[ModelMessage] | None = None) -> list[str]:
        problems = real(messages, before=before)
        if not problems:
            record.checked.append(list(messages))
        return problems

    # Wherever the check is bound (the shape module itself, the engine, anything that imported it by name).
    for module in list(sys.modules.values()):
        if getattr(module, '__name__', '').startswith('pydantic_ai_compaction') and (
            getattr(module, 'shape_problems', None) is real
        ):
            monkeypatch.setattr(module, 'shape_problems', spying)
    real_log = runtime_project.log_problems

    def spying_log(
        original: Sequence[ModelMessage], rewritten: Sequence[ModelMessage], may_drop: tuple[type[Any], ...] = ()
    ) -> list[str]:
        # A log rewrite that keeps every part the shape rules read is checked by this alone.
        problems = real_log(original, rewritten, may_drop)
        if not problems:
            record.checked.append(list(rewritten))
        return problems

    monkeypatch.setattr(runtime_project, 'log_problems', spying_log)
    real_changes = runtime_project.change_problems

    def spying_changes(
        log: Sequence[ModelMessage], changes: Mapping[int, ModelMessage], may_drop: tuple[type[Any], ...] = ()
    ) -> list[str]:
        # A rewrite handed over as its changed positions: the log it would leave is the one checked.
        problems = real_changes(log, changes, may_drop)
        if not problems:
            rewritten = list(log)
            for index, message in changes.items():
                rewritten[index] = message
            record.checked.append(rewritten)
        return problems

    monkeypatch.setattr(runtime_project, 'change_problems', spying_changes)
    real_check = shape.ShapeCheck.problems

    def checking(
        check: shape.ShapeCheck, messages: Sequence[ModelMessage], *, before: Sequence[ModelMessage] | None = None
    ) -> list[str]:
        problems = real_check(check, messages, before=before)
        if not problems:
            record.checked.append(list(messages))
        return problems

    monkeypatch.setattr(shape.ShapeCheck, 'problems', checking)
    return record


@dataclass
class Watch:
    """What the recorders saw around the processor, request by request."""

    log_before: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])
    request_before: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])
    log_after: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])
    request_after: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])
    received: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])


@dataclass
class Recorder(AbstractCapability[Any]):
    """Listed before (`after=False`) and after the processor: what it was given, and what it left."""

    watch: Watch
    after: bool

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        logs, requests = (
            (self.watch.log_after, self.watch.request_after)
            if self.after
            else (self.watch.log_before, self.watch.request_before)
        )
        logs.append(list(ctx.messages))
        requests.append(list(request_context.messages))
        return request_context


def history() -> list[ModelMessage]:
    """Six tool steps, each with its reasoning, answered; the next user turn comes from the run."""
    out: list[ModelMessage] = []
    for message in recorded_history(6, lines=60):
        if isinstance(message, ModelResponse):
            message = ModelResponse(
                parts=[ThinkingPart('which log is next?'), *message.parts],
                usage=message.usage,
                model_name=message.model_name,
                timestamp=message.timestamp,
            )
        out.append(message)
    return [*out, ModelResponse(parts=[TextPart('Logs 0-5 read, all clean.')], model_name='test')]


def compactor_reply(prompt: str) -> str | None:
    if FORK_MARKER in prompt:
        return fork_json(['g2'], rules=['report ids in lowercase'])
    if SUMMARY_MARKER in prompt or NATIVE_MARKER in prompt or HANDOFF_MARKER in prompt:
        return 'Logs 0-5 read; ids must be lowercase since log 3.'
    if CURATOR_MARKER in prompt:
        return CURATION
    return None


def run(name: str, watch: Watch, processor: AbstractCapability[Any] | None = None) -> list[ModelMessage]:
    state = {'step': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        reply = compactor_reply(last_prompt(messages))
        if reply is not None:
            return ModelResponse(parts=[TextPart(reply)])
        watch.received.append(list(messages))
        step = state['step']
        state['step'] += 1
        parts: list[ModelResponsePart]
        if step == 0:
            parts = [ThinkingPart('log 6 next'), ToolCallPart('read_log', {'index': 6})]
        elif step == 1 and name in OWN_TOOL:
            parts = [OWN_TOOL[name]]
        else:
            parts = [TextPart('done')]
        return ModelResponse(parts=parts)

    agent = Agent(
        FunctionModel(respond),
        capabilities=[Recorder(watch, after=False), processor or PROCESSORS[name](), Recorder(watch, after=True)],
    )

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index, 60)

    return agent.run_sync('Now audit log 6.', message_history=history()).all_messages()


def assert_through_the_runtime(watch: Watch, spy: Spy) -> int:
    """Every change the processor made was checked; returns how many changes there were."""
    changes = 0
    for step, (log_before, log_after) in enumerate(zip(watch.log_before, watch.log_after, strict=True)):
        if log_after != log_before:
            changes += 1
            assert spy.saw(log_after), f'request {step}: the history was changed without the runtime check'
        if step:
            # Between two requests only the response and the tool returns are appended; anything else in
            # what the previous request left changed inside a tool, and must have been checked there.
            previous = watch.log_after[step - 1]
            if log_before[: len(previous)] != previous:
                changes += 1
                assert spy.saw(log_before[: len(previous) + 1]), (
                    f'request {step}: a tool changed the history without the runtime check'
                )
    for step, (before, after) in enumerate(zip(watch.request_before, watch.request_after, strict=True)):
        if after != before and after != watch.log_after[step]:
            changes += 1
            assert spy.saw(after), f'request {step}: the request was projected without the runtime check'
    for request in watch.received:
        assert shape.shape_problems(request) == []
    return changes


ACTS = set(PROCESSORS) - {'NoCompaction', 'Notes', 'Recall'}
"""The capabilities whose contract is to change a request or the history (the others only record or answer)."""


@pytest.mark.parametrize('name', list(PROCESSORS))
def test_every_request_a_processor_changes_passes_the_runtime_check(name: str, spy: Spy) -> None:
    watch = Watch()
    final = run(name, watch)
    assert len(watch.received) >= 2  # the run made requests after the processor's turn to act
    changes = assert_through_the_runtime(watch, spy)
    if name in ACTS:
        assert changes >= 1, f'{name} never acted: the history does not exercise it'
    else:
        assert changes == 0
        assert watch.received[-1] == final[:-1]
    assert shape.shape_problems(final) == [] or isinstance(final[-1], ModelResponse)


def test_a_view_that_skips_the_runtime_is_caught(spy: Spy, monkeypatch: pytest.MonkeyPatch) -> None:
    # The check above is not vacuous: the same run, with the projection no longer checked, fails it.
    def unchecked(*_: Any, **__: Any) -> bool:
        return True  # every projection accepted without a look

    monkeypatch.setattr(runtime_project, '_accepted_projection', unchecked)
    watch = Watch()
    run('BoundedSelection', watch)
    with pytest.raises(AssertionError, match='projected without the runtime check'):
        assert_through_the_runtime(watch, spy)


def test_a_projection_that_breaks_the_shape_is_refused_and_reported() -> None:
    from pydantic_ai_compaction.protocols.types import CompactionEvent

    events: list[CompactionEvent] = []
    original = history()[:-1]
    broken = original[1:]  # starts on a response
    with pytest.warns(RuntimeWarning, match='Demo sent the request unprojected'):
        sent = runtime_project.project_request(original, broken, 'Demo', reason='test', observer=events.append)
    assert sent == original
    assert [(e.kind, e.strategy, e.reason) for e in events] == [('ignored', 'Demo', 'shape')]


def test_a_log_rewrite_may_drop_only_what_its_contract_allows() -> None:
    original = history()
    without_thinking = [
        ModelResponse(parts=[p for p in m.parts if not isinstance(p, ThinkingPart)])
        if isinstance(m, ModelResponse)
        else m
        for m in original
    ]
    assert runtime_project.log_problems(original, without_thinking, (ThinkingPart,)) == []
    assert runtime_project.log_problems(original, without_thinking) != []
    assert runtime_project.log_problems(original, original[:-2]) == [
        f'{len(original)} messages became {len(original) - 2}'
    ]
    with pytest.warns(RuntimeWarning, match='Demo left the history as it was'):
        assert runtime_project.rewrite_log(original, without_thinking, 'Demo', reason='test') is None


def test_a_log_rewrite_that_may_drop_calls_is_still_checked_for_pairing() -> None:
    original = history()
    call_index, call = next(
        (index, message)
        for index, message in enumerate(original)
        if isinstance(message, ModelResponse) and any(isinstance(p, ToolCallPart) for p in message.parts)
    )
    without_call = list(original)
    without_call[call_index] = replace(call, parts=[p for p in call.parts if not isinstance(p, ToolCallPart)])
    # The contract lets the owner drop calls, so the log check passes; the shape check must then catch the
    # return left without its call (it is skipped only when no part the shape rules read may go).
    assert runtime_project.log_problems(original, without_call, (ToolCallPart,)) == []
    with pytest.warns(RuntimeWarning, match='has no call before it'):
        assert (
            runtime_project.rewrite_log(original, without_call, 'Demo', reason='test', may_drop=(ToolCallPart,)) is None
        )
    # The same message list handed back as it was is accepted, and unchanged.
    assert runtime_project.rewrite_log(original, list(original), 'Demo', reason='test') == original


def test_a_changed_request_leaves_a_record_naming_its_owner() -> None:
    from pydantic_ai_compaction.protocols.types import CompactionEvent

    events: list[CompactionEvent] = []
    agent_history = [*history(), ModelRequest(parts=[UserPromptPart('Now audit log 6.')])]
    selected = pac.BoundedSelection[Any](budget=200).selection(agent_history)
    sent = runtime_project.project_request(
        agent_history, selected, 'BoundedSelection', reason='selection', observer=events.append
    )
    assert sent == selected and len(selected) < len(agent_history)
    (event,) = events
    assert event.kind == 'compacted' and event.record is not None
    assert (event.record.strategy, event.record.detail) == ('BoundedSelection', 'selection')
    assert event.record.tokens_after < event.record.tokens_before


EXPORTED_CLASSES = [
    name for name in pac.__all__ if isinstance(value := getattr(pac, name), type) and not issubclass(value, Exception)
]
"""Every exported class but the exceptions (whose constructor is `Exception`'s)."""


@pytest.mark.parametrize('name', EXPORTED_CLASSES)
def test_no_exported_class_takes_private_state_in_its_constructor(name: str) -> None:
    parameters = inspect.signature(getattr(pac, name)).parameters
    assert [p for p in parameters if p.startswith('_')] == []


def test_private_state_is_per_run_and_out_of_the_constructor() -> None:
    import dataclasses

    for cls, names in [
        (pac.Archive, {'_state', '_applying'}),
        (pac.Recall, {'_fingerprints', '_indexed'}),
        (pac.Tiered, {'_projection'}),
        (pac.CuratedSelection, {'_state'}),
        (pac.Orientation, {'_state'}),
    ]:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert all(not fields[n].init and not fields[n].repr for n in names), cls.__name__


def test_orientation_is_a_capability_class_with_curations_typed_parameters() -> None:
    import dataclasses

    orientation = pac.Orientation(focal_budget=300)
    assert isinstance(orientation, pac.CuratedSelection) and orientation.full_history is True
    parameters = inspect.signature(pac.Orientation).parameters
    assert 'full_history' not in parameters and 'kwargs' not in parameters
    assert {f.name for f in dataclasses.fields(pac.CuratedSelection) if f.init} - {'full_history'} == set(parameters)
    with pytest.raises(TypeError):
        pac.Orientation(full_history=False)  # pyright: ignore[reportCallIssue]


def test_a_view_reports_what_it_changed_to_its_observer() -> None:
    from pydantic_ai_compaction.protocols.types import CompactionEvent

    events: list[CompactionEvent] = []
    watch = Watch()
    run('BoundedSelection', watch, pac.BoundedSelection(budget=200, observer=events.append))
    changed = [e for e in events if e.kind == 'compacted']
    assert changed and all(e.strategy == 'BoundedSelection' and e.reason == 'selection' for e in changed)
    assert all(e.record is not None and e.record.tokens_after < e.record.tokens_before for e in changed)
    assert [list(e.history) for e in changed] == [
        r for r, b in zip(watch.request_after, watch.request_before, strict=True) if r != b
    ]


def test_a_view_that_raises_sends_the_request_unprojected_and_reports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_ai_compaction.processors.views import selection
    from pydantic_ai_compaction.protocols.types import CompactionEvent

    def broken(*_: object, **__: object) -> list[object]:
        raise RuntimeError('scoring bug')

    monkeypatch.setattr(selection, 'choose', broken)  # what `select` and the per-run selection both call
    events: list[CompactionEvent] = []
    watch = Watch()
    with pytest.warns(
        RuntimeWarning, match="BoundedSelection sent the request unprojected: RuntimeError\\('scoring bug'"
    ):
        run('BoundedSelection', watch, pac.BoundedSelection(budget=200, observer=events.append))
    assert watch.request_after == watch.request_before  # every request went out as it arrived
    assert {(e.kind, e.strategy, e.reason) for e in events} == {('ignored', 'BoundedSelection', 'error')}
