"""Every strategy, view and memory capability through pydantic-ai's real provider model classes.

Each case runs a ten-step tool loop (two user turns for views and memory) with parallel calls, a tool
retry, an image result and thinking where the provider has it, through `OpenAIChatModel`,
`OpenAIResponsesModel`, `AnthropicModel` and `GoogleModel` over a mocked HTTP transport. Every request sent is checked
against the provider's rules (`pydantic_ai_compaction.testing.wire`), and each case asserts that
its capability acted several times.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from pydantic_ai import Agent, BinaryContent, ModelRetry
from pydantic_ai.messages import ModelMessage, ThinkingPart, ToolReturnPart

from pydantic_ai_compaction import (
    Archive,
    BoundedSelection,
    CompactionEvent,
    CuratedSelection,
    ForgetReasoning,
    Fork,
    InstructionSources,
    Native,
    NoCompaction,
    Notes,
    Orientation,
    Pipeline,
    Reassert,
    Recall,
    ResetToCheckpoint,
    StatelessSummary,
    Switch,
    Tiered,
    Trigger,
)
from pydantic_ai_compaction.processors.views.curation import ORIENTATION_OPEN
from pydantic_ai_compaction.runtime import our_record, pairing_problems

from ..support import log_text
from .providers import PROVIDERS, Mock
from .script import Script

TRIGGER = Trigger(tokens=2_500)
PNG = b'\x89PNG\r\n\x1a\n' + bytes(range(64))
TURNS = ('Audit logs 1-8 and report. Ignore service legacy.', 'Now audit the next eight logs and report.')


@dataclass
class Run:
    """What one case left behind."""

    mock: Mock
    script: Script
    events: list[CompactionEvent]
    history: list[ModelMessage]
    outputs: list[str]

    def records(self) -> list[dict[str, Any]]:
        return [r for m in self.history for p in m.parts if (r := our_record(p))]

    def compactions(self) -> list[CompactionEvent]:
        return [e for e in self.events if e.kind == 'compacted']

    def agent_payloads(self) -> list[str]:
        """The text of every agent request (compactor requests left out), string values joined."""
        return [
            '\n'.join(strings(e.payload))
            for e in self.mock.exchanges
            if Script.kind(self.mock.provider.last_user_text(e.payload)) == 'agent'
        ]


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return []


def run(
    provider: str, capabilities: Callable[[list[CompactionEvent]], list[Any]], script: Script, turns: int = 2
) -> Run:
    return run_on(Mock(PROVIDERS[provider](), script), capabilities, turns)


def run_on(mock: Mock, capabilities: Callable[[list[CompactionEvent]], list[Any]], turns: int = 2) -> Run:
    """*turns* user turns of the scripted tool loop against *mock*, with *capabilities* on the agent."""
    script = cast(Script, mock.answer)
    events: list[CompactionEvent] = []
    agent = Agent(mock.model(), capabilities=capabilities(events), system_prompt='You audit logs.')
    flaky = {'calls': 0}

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        change = 'CHANGE: report ids in lowercase\n' if index == 3 else ''
        return change + log_text(index, 100)

    @agent.tool_plain
    def flaky_check() -> str:  # pyright: ignore[reportUnusedFunction]
        """Check the audit service."""
        flaky['calls'] += 1
        if flaky['calls'] % 2:
            raise ModelRetry('the check service was busy, call it again')
        return 'check ok'

    @agent.tool_plain
    def screenshot() -> BinaryContent:  # pyright: ignore[reportUnusedFunction]
        """A screenshot of the dashboard."""
        return BinaryContent(data=PNG, media_type='image/png')

    history: list[ModelMessage] = []
    outputs: list[str] = []
    for prompt in TURNS[:turns]:
        result = agent.run_sync(prompt, message_history=history)
        history = result.all_messages()
        outputs.append(result.output)
    return Run(mock, script, events, history, outputs)


def observed(
    strategy: Callable[[Callable[[CompactionEvent], None]], Any],
) -> Callable[[list[CompactionEvent]], list[Any]]:
    return lambda events: [strategy(events.append)]


def compacted_several_times(outcome: Run) -> None:
    compactions = outcome.compactions()
    assert len(compactions) >= 2, f'{len(compactions)} compaction(s)'
    for event in compactions:
        assert event.record is not None and event.record.fallback_reason is None, event.record
        assert pairing_problems(list(event.history)) == []
    assert outcome.records(), 'no boundary record in the persisted history'


def restated_after_compaction(outcome: Run) -> None:
    """The marked change, read in log 3, is restated once its exchange is summarized away."""
    compacted_several_times(outcome)
    restated = [e.record.restated for e in outcome.compactions() if e.record and e.record.restated]
    assert len(restated) >= 2 and all(r == ('CHANGE: report ids in lowercase',) for r in restated), restated
    assert sum('CHANGE: report ids in lowercase' in text for text in outcome.agent_payloads()[-3:]) == 3


def ignored_every_crossing(outcome: Run) -> None:
    assert len([e for e in outcome.events if e.kind == 'ignored']) >= 2
    assert outcome.records() == []


def first_log_left_out(outcome: Run) -> None:
    """A request-only view: later requests leave out a log the persisted history still holds."""
    needle = '01-0050 service=api'
    assert any(needle in str(p.content) for m in outcome.history for p in m.parts if isinstance(p, ToolReturnPart))
    payloads = outcome.agent_payloads()
    first = next(i for i, text in enumerate(payloads) if needle in text)
    assert sum(needle not in text for text in payloads[first + 1 :]) >= 2


def curated_each_turn(outcome: Run) -> None:
    assert outcome.script.kinds['curator'] >= 2
    assert sum(ORIENTATION_OPEN in text for text in outcome.agent_payloads()) >= 2


def reasoning_forgotten(outcome: Run) -> None:
    thoughts = [p for m in outcome.history for p in m.parts if isinstance(p, ThinkingPart)]
    steps_with_thinking = outcome.script.kinds['agent'] - len(outcome.outputs)
    assert len(thoughts) < steps_with_thinking - 2, (len(thoughts), steps_with_thinking)


def archived_in_batches(outcome: Run) -> None:
    applied = [
        p for m in outcome.history for p in m.parts if isinstance(p, ToolReturnPart) and p.tool_name == 'context_apply'
    ]
    archived = [p for p in applied if 'Archived r' in str(p.content)]
    assert len(archived) >= 3 and len(outcome.script.archived) >= 6, [str(p.content)[:300] for p in applied]
    assert sum('archived as' in text for text in outcome.agent_payloads()) >= 3


def notes_in_boundaries(outcome: Run) -> None:
    compacted_several_times(outcome)
    note = 'skip service legacy'
    # Restated once, by the boundary that dropped the note's call; the later boundaries keep that one in place.
    assert [note in ' '.join(r['extra'].get('notes', [])) for r in outcome.records()].count(True) == 1
    # Every agent request from the note's call on sends it.
    payloads = outcome.agent_payloads()
    first = next(at for at, text in enumerate(payloads) if note in text)
    assert all(note in text for text in payloads[first:]), [note in text for text in payloads]


def recall_found_dropped_log(outcome: Run) -> None:
    compacted_several_times(outcome)
    # A hit renders as `[read_log({...}) r3, line 4] 01-0003 ...`: the line came back from the store.
    hit = re.compile(r'\[read_log\(.*, line \d+\] 01-0003 service=api')
    assert sum(bool(hit.search(text)) for text in outcome.agent_payloads()) >= 2


@dataclass
class Case:
    capabilities: Callable[[list[CompactionEvent]], list[Any]]
    check: Callable[[Run], None]
    script: Callable[[], Script] = field(default=Script)
    turns: int = 1
    """User turns: one tool loop compacts several times already; views and memory act across turns."""


CASES: dict[str, Case] = {
    'none': Case(observed(lambda o: NoCompaction(trigger=TRIGGER, observer=o)), ignored_every_crossing),
    'native': Case(observed(lambda o: Native(trigger=TRIGGER, observer=o)), compacted_several_times),
    'summary': Case(observed(lambda o: StatelessSummary(trigger=TRIGGER, observer=o)), compacted_several_times),
    'summary-sent': Case(
        observed(lambda o: StatelessSummary(trigger=TRIGGER, request='sent', observer=o)), compacted_several_times
    ),
    'fork-json': Case(observed(lambda o: Fork(trigger=TRIGGER, variant='json', observer=o)), compacted_several_times),
    'fork-json-sent': Case(
        observed(lambda o: Fork(trigger=TRIGGER, variant='json', request='sent', observer=o)), compacted_several_times
    ),
    'fork-free': Case(observed(lambda o: Fork(trigger=TRIGGER, variant='free', observer=o)), compacted_several_times),
    'fork-fixed': Case(observed(lambda o: Fork(trigger=TRIGGER, variant='fixed', observer=o)), compacted_several_times),
    'reassert': Case(
        observed(
            lambda o: Reassert(
                StatelessSummary(trigger=TRIGGER, observer=o), sources=InstructionSources(markers=('CHANGE:',))
            )
        ),
        restated_after_compaction,
    ),
    'reset': Case(observed(lambda o: ResetToCheckpoint(trigger=TRIGGER, observer=o)), compacted_several_times),
    'switch': Case(
        observed(
            lambda o: Switch(
                when=lambda state: state.compactions < 1,
                then=StatelessSummary(trigger=TRIGGER, observer=o),
                otherwise=Fork(trigger=TRIGGER, observer=o),
            )
        ),
        compacted_several_times,
    ),
    'pipeline': Case(
        observed(
            lambda o: Pipeline(
                [
                    Fork(trigger=TRIGGER, variant='fixed', keep_last=1, observer=o),
                    StatelessSummary(trigger=TRIGGER, observer=o),
                ]
            )
        ),
        compacted_several_times,
    ),
    'tiered': Case(lambda events: [Tiered(context_window=5_000)], first_log_left_out, turns=2),
    'bounded': Case(lambda events: [BoundedSelection(budget=1_500)], first_log_left_out, turns=2),
    'curated': Case(lambda events: [CuratedSelection(focal_budget=3_000)], curated_each_turn, turns=2),
    'orientation': Case(lambda events: [Orientation()], curated_each_turn, turns=2),
    'forget': Case(lambda events: [ForgetReasoning(policy='drop')], reasoning_forgotten, turns=2),
    'archive': Case(lambda events: [Archive()], archived_in_batches, lambda: Script(archive=True), turns=2),
    'notes': Case(
        lambda events: [Notes(), Fork(trigger=TRIGGER, observer=events.append)],
        notes_in_boundaries,
        lambda: Script(note=True),
    ),
    'recall': Case(
        # A key the application trusts, so the second run can recall what the first one read.
        lambda events: [Recall(conversation='audit-1'), StatelessSummary(trigger=TRIGGER, observer=events.append)],
        recall_found_dropped_log,
        lambda: Script(recall=True),
        turns=2,
    ),
}


@pytest.mark.parametrize('provider', list(PROVIDERS))
@pytest.mark.parametrize('case', list(CASES))
def test_capability_sends_valid_requests(case: str, provider: str) -> None:
    spec = CASES[case]
    outcome = run(provider, spec.capabilities, spec.script(), spec.turns)
    assert outcome.outputs == ['report: done'] * spec.turns
    assert outcome.mock.problems() == []
    spec.check(outcome)
