"""Prompt contracts: what every prompt the library sends looks like, and that its own example is accepted.

Each prompt is captured from a real `Agent` run on a fixed history: the `FunctionModel` records the
messages, instructions, tool definitions and settings of the call, and the snapshot stores them as text,
so any change to a prompt shows up in review. The structured prompts' examples are taken from the
prompt text the model received, filled the way the prompt says, and must be accepted without fallback;
copied unfilled, they must give a recorded fallback.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pydantic_ai import Agent
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import (
    Archive,
    CompactionEvent,
    CuratedSelection,
    Fork,
    InstructionSources,
    Native,
    Notes,
    Orientation,
    Reassert,
    Recall,
    ResetToCheckpoint,
    StatelessSummary,
    Tiered,
    Trigger,
)
from pydantic_ai_compaction.processors.strategies.fork import FORK_MARKER
from pydantic_ai_compaction.processors.strategies.native import NATIVE_MARKER
from pydantic_ai_compaction.processors.strategies.summary import SUMMARY_MARKER
from pydantic_ai_compaction.processors.views.curation import CURATOR_MARKER, ORIENTATION_OPEN
from pydantic_ai_compaction.processors.views.tiered import HANDOFF_MARKER
from pydantic_ai_compaction.protocols.schemas import CURATOR_SCHEMA, FORK_JSON_SCHEMA
from pydantic_ai_compaction.runtime import compactor, replies
from pydantic_ai_compaction.runtime.segment import is_restatement, our_record, segment
from pydantic_ai_compaction.runtime.transcript import user_text
from pydantic_ai_compaction.testing import render, replay

from .support import T0, log_text, recorded_history

MARKERS = {
    FORK_MARKER: 'fork',
    SUMMARY_MARKER: 'summary',
    NATIVE_MARKER: 'native',
    HANDOFF_MARKER: 'handoff',
    CURATOR_MARKER: 'curator',
}
SYSTEM_PROMPT = 'You audit logs. Ignore service legacy.'
CHANGE = 'CHANGE: report ids in lowercase'
TRIGGER = Trigger(tokens=400)
SOURCES = InstructionSources(markers=('CHANGE:',))
EXAMPLE_LEAD = 'shaped like this example:\n'

ReplyFn = Callable[[str], str]
EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '40'))


@dataclass
class Call:
    """One request the model received."""

    kind: str
    messages: list[ModelMessage]
    info: AgentInfo

    @property
    def prompt(self) -> str:
        """Every user text of the last request, verbatim (what the library appended to it)."""
        return '\n'.join(user_text(part) for part in self.messages[-1].parts if isinstance(part, UserPromptPart))


def default_reply(kind: str, prompt: str) -> str:
    if kind == 'fork' and 'variant=json' in prompt:
        summary = {'rules': [CHANGE], 'facts': ['logs 0-3 clean'], 'progress': 'logs 0-3 read', 'next_step': 'log 4'}
        return json.dumps({'keep': [], 'summary': summary})
    if kind == 'fork' and 'variant=free' in prompt:
        return 'KEEP: none\nIds lowercase since log 3. Logs 0-3 read, all clean. Next: log 4.'
    if kind == 'curator':
        orientation = {'relevant_state': 'migration planned', 'required': ['two steps'], 'prohibited': []}
        return json.dumps({'focal': [], 'orientation': orientation})
    return f'Ids lowercase since log 3. Logs read so far are clean. ({kind})'


@dataclass
class Script:
    """The model of every scenario: reads logs one per step then reports; compaction calls get `reply`."""

    logs: int = 8
    reply: dict[str, ReplyFn] = field(default_factory=dict[str, ReplyFn])
    note: bool = False
    calls: list[Call] = field(default_factory=list[Call])

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        prompt = '\n'.join(user_text(p) for p in last.parts if isinstance(p, UserPromptPart))
        kind = next((kind for marker, kind in MARKERS.items() if marker in prompt), 'agent')
        self.calls.append(Call(kind, list(messages), info))
        if kind != 'agent':
            reply = self.reply.get(kind)
            return ModelResponse(parts=[TextPart(reply(prompt) if reply else default_reply(kind, prompt))])
        agent_steps = sum(call.kind == 'agent' for call in self.calls) - 1
        if self.note and agent_steps == 0:
            return ModelResponse(parts=[ToolCallPart('note', {'kind': 'decision', 'text': 'skip legacy'}, 'n0')])
        index = agent_steps - (1 if self.note else 0)
        if index >= self.logs:
            return ModelResponse(parts=[TextPart('report: none found')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': index}, tool_call_id=f'c{index}')])

    def first(self, kind: str, nth: int = 0) -> Call:
        return [call for call in self.calls if call.kind == kind][nth]


def run_audit(capabilities: list[Any], script: Script, *, lines: int = 12) -> Any:
    agent = Agent(FunctionModel(script), capabilities=capabilities, system_prompt=SYSTEM_PROMPT)

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log file."""
        text = log_text(index, lines)
        return f'{CHANGE}\n{text}' if index == 3 else text

    return agent.run_sync('Audit logs 0-7 and report the incident ids.')


TURNS = [
    ('We plan a database migration for the orders table.', 'Noted: migrate orders in two steps, copy then switch.'),
    ('Which CSS framework do we use?', 'Tailwind, since March.'),
    ('Remind me of the deploy window.', 'Fridays 14:00-16:00 UTC.'),
]


def turns_history() -> list[ModelMessage]:
    """Three earlier user turns with their answers (fixed timestamps)."""
    history: list[ModelMessage] = []
    for index, (question, answer) in enumerate(TURNS):
        parts: list[Any] = [UserPromptPart(question, timestamp=T0)]
        if index == 0:
            parts.insert(0, SystemPromptPart('You help with a web app.', timestamp=T0))
        history.append(ModelRequest(parts=parts, timestamp=T0))
        history.append(ModelResponse(parts=[TextPart(answer)], model_name='test', timestamp=T0))
    return history


def curated_run(capability: Any, script: Script) -> Any:
    """The three earlier turns, then a question about the first one, with the curator in front."""
    script.logs = 0
    agent = Agent(FunctionModel(script), capabilities=[capability])
    return agent.run_sync('What did we decide about the migration?', message_history=turns_history())


def agent_after_compaction(script: Script) -> Call:
    return next(
        call
        for call in script.calls
        if call.kind == 'agent' and any(isinstance(p, CompactionPart) for m in call.messages for p in m.parts)
    )


def restatement_text(call: Call) -> str:
    return next(
        user_text(p) for m in call.messages for p in m.parts if isinstance(p, UserPromptPart) and is_restatement(p)
    )


def compaction_text(call: Call) -> str:
    return next(p.content or '' for m in call.messages for p in m.parts if isinstance(p, CompactionPart))


@dataclass(frozen=True)
class Captured:
    """A prompt as sent: the call it was part of and the prompt's own text."""

    call: Call
    text: str


def _strategy_prompt(kind: str, capability: Any, nth: int = 0) -> Captured:
    script = Script()
    run_audit([capability], script)
    call = script.first(kind, nth)
    return Captured(call, call.prompt)


def _tiered(nth: int) -> Captured:
    script = Script(note=True)
    tiered = Tiered(context_window=1_200, clear_at=0.5, summarize_at=0.5, summarize_to=0.2)
    run_audit([Notes(), tiered], script)
    call = script.first('handoff', nth)
    return Captured(call, call.prompt)


def _curator() -> Captured:
    script = Script()
    curated_run(CuratedSelection(), script)
    call = script.first('curator')
    return Captured(call, call.prompt)


def _orientation() -> Captured:
    script = Script()
    curated_run(Orientation(), script)
    call = script.first('agent')
    text = next(
        user_text(p)
        for m in call.messages
        for p in m.parts
        if isinstance(p, UserPromptPart) and user_text(p).startswith(ORIENTATION_OPEN)
    )
    return Captured(call, text)


def _agent_request(capabilities: list[Any], *, nth: int = 0) -> Captured:
    script = Script(logs=3)
    run_audit(capabilities, script)
    call = script.first('agent', nth)
    return Captured(call, call.info.instructions or '')


def _archive_reminder() -> Captured:
    script = Script()
    run_audit([Archive(reminder_tokens=600)], script)
    call = next(c for c in script.calls if c.kind == 'agent' and c.prompt.startswith('[Context check:'))
    return Captured(call, call.prompt)


def _reassert() -> Captured:
    script = Script()
    run_audit([Reassert(Native(trigger=TRIGGER), sources=SOURCES)], script)
    call = agent_after_compaction(script)
    return Captured(call, restatement_text(call))


def _reset() -> Captured:
    script = Script()
    run_audit([ResetToCheckpoint(trigger=TRIGGER, sources=SOURCES, excerpt_chars=40)], script)
    call = agent_after_compaction(script)
    return Captured(call, compaction_text(call))


SCENARIOS: dict[str, Callable[[], Captured]] = {
    'fork-json': lambda: _strategy_prompt('fork', Fork(trigger=TRIGGER, variant='json')),
    'fork-free': lambda: _strategy_prompt('fork', Fork(trigger=TRIGGER, variant='free')),
    'fork-fixed': lambda: _strategy_prompt('fork', Fork(trigger=TRIGGER, variant='fixed')),
    'fork-free-sent': lambda: _strategy_prompt('fork', Fork(trigger=TRIGGER, variant='free', request='sent')),
    'summary': lambda: _strategy_prompt('summary', StatelessSummary(trigger=TRIGGER)),
    'summary-sent': lambda: _strategy_prompt('summary', StatelessSummary(trigger=TRIGGER, request='sent')),
    'summary-instructions': lambda: (lambda captured: Captured(captured.call, captured.call.info.instructions or ''))(
        _strategy_prompt('summary', StatelessSummary(trigger=TRIGGER))
    ),
    'native-emulation': lambda: _strategy_prompt('native', Native(trigger=TRIGGER)),
    'tiered-handoff-first': lambda: _tiered(0),
    'tiered-handoff-update': lambda: _tiered(1),
    'curator': _curator,
    'orientation': _orientation,
    'archive-instructions': lambda: _agent_request([Archive()]),
    'archive-reminder': _archive_reminder,
    'recall-instructions': lambda: _agent_request([Recall()]),
    'notes-instructions': lambda: _agent_request([Notes()]),
    'reassert-restatement': _reassert,
    'reset-checkpoint': _reset,
}
"""Every prompt the library sends to a model, by name: how to capture it from a real run."""


@cache
def captured(name: str) -> Captured:
    return SCENARIOS[name]()


def contract(captured: Captured) -> str:
    """The snapshot text: the request as the model received it, then the prompt verbatim."""
    info = captured.call.info
    tools = [*info.function_tools, *info.output_tools]
    lines = [
        '=== request (rendered) ===',
        render(captured.call.messages).rstrip('\n'),
        '=== instructions ===',
        '(the prompt below)'
        if info.instructions and info.instructions == captured.text
        else info.instructions or '(none)',
        '=== tools ===',
        *(
            f'{tool.name}: {tool.description or ""} '
            + json.dumps(tool.parameters_json_schema, sort_keys=True, ensure_ascii=False)
            for tool in tools
        ),
        '=== settings ===',
        json.dumps(dict(info.model_settings or {}), sort_keys=True) + f' allow_text_output={info.allow_text_output}',
        '=== prompt (verbatim) ===',
        captured.text,
    ]
    return '\n'.join(lines) + '\n'


@pytest.mark.parametrize('name', list(SCENARIOS))
def test_prompt_contract(name: str, compaction_snapshot: Any) -> None:
    sent = captured(name)
    assert sent.text.strip(), f'{name}: nothing captured'
    assert contract(sent) == compaction_snapshot


@pytest.mark.parametrize('name', list(SCENARIOS))
def test_no_template_placeholder_reaches_a_model(name: str) -> None:
    text = captured(name).text
    # A `str.format` slot left unfilled, or a doubled brace a format string was meant to halve.
    assert not re.search(r'\{[a-z_]+\}|\{\{|\}\}\}', text), text
    for line in text.splitlines():
        if line.startswith('{"'):
            json.loads(line)  # every example line in a prompt is valid JSON


def test_the_fork_json_prompt_shows_valid_json_not_a_format_string() -> None:
    prompt = captured('fork-json').text
    example = json.loads(example_of(prompt))
    assert '{{' not in prompt and set(example) == {'keep', 'summary'}
    assert Draft202012Validator(FORK_JSON_SCHEMA).is_valid(example)


# --- Example acceptance -----------------------------------------------------------------------------------


def example_of(prompt: str) -> str:
    """The example line the prompt shows, taken from the prompt text."""
    start = prompt.index(EXAMPLE_LEAD) + len(EXAMPLE_LEAD)
    return prompt[start : prompt.index('\n', start)]


LISTED = re.compile(r'^(g\d+) \[(\w+), [^\]]*\]', re.MULTILINE)


def listed_ids(prompt: str, kinds: tuple[str, ...]) -> list[str]:
    """Ids of finished, unprotected exchanges of *kinds* (any kind if empty) in the list the prompt shows."""
    return [
        match.group(1)
        for match in LISTED.finditer(prompt)
        if (not kinds or match.group(2) in kinds)
        and 'in progress' not in match.group(0)
        and 'protected' not in match.group(0)
    ]


def expected_kept(prompt: str, ids: list[str]) -> tuple[str, ...]:
    """The chosen ids plus what the list marks protected or in progress, in history order."""
    forced = [m.group(1) for m in LISTED.finditer(prompt) if 'protected' in m.group(0) or 'in progress' in m.group(0)]
    return tuple(sorted({*ids, *forced}, key=lambda i: int(i[1:])))


def fill_example(example: Any, ids: list[str], id_placeholder: str) -> Any:
    """Fill an example the way its prompt says: a list of id placeholders becomes the chosen ids (as many as
    needed), every other `<...>` becomes text."""

    def fill(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: fill(item) for key, item in value.items()}  # pyright: ignore[reportUnknownVariableType]
        if isinstance(value, list):
            if value and all(item == id_placeholder for item in value):  # pyright: ignore[reportUnknownVariableType]
                return list(ids)
            return [fill(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
        if isinstance(value, str) and value.startswith('<') and value.endswith('>'):
            return f'filled: {value[1:-1]}'
        return value

    return fill(example)


def fork_events(reply: ReplyFn, variant: str = 'json') -> tuple[list[CompactionEvent], Script]:
    events: list[CompactionEvent] = []
    script = Script(reply={'fork': reply})
    run_audit([Fork(trigger=TRIGGER, variant=variant, observer=events.append)], script)  # pyright: ignore[reportArgumentType]
    return [event for event in events if event.record is not None], script


def test_the_fork_json_example_filled_as_described_is_accepted() -> None:
    expected: list[tuple[str, ...]] = []

    def model_fills_the_example(prompt: str) -> str:
        ids = listed_ids(prompt, ('tools',))[:2]
        assert len(ids) == 2
        expected.append(expected_kept(prompt, ids))
        filled = fill_example(json.loads(example_of(prompt)), ids, '<exchange id>')
        assert Draft202012Validator(FORK_JSON_SCHEMA).is_valid(filled)
        return json.dumps(filled)

    events, _ = fork_events(model_fills_the_example)
    assert events and len(expected) == len(events)
    for event, kept in zip(events, expected, strict=True):
        record = event.record
        assert record is not None
        assert record.fallback_reason is None and record.rejected == ()
        assert record.kept == kept
        assert '| - filled: instruction in force, latest wording' in render(event.history)


def test_the_fork_json_example_copied_literally_falls_back_with_a_reason() -> None:
    events, script = fork_events(example_of)
    assert events and script.first('agent', -1).messages  # the run went on to its end
    record = events[0].record
    assert record is not None
    assert record.fallback_reason == 'unfilled'
    assert record.detail is not None and '<what is done>' in record.detail
    boundary = render(events[0].history)
    assert 'Context compaction fell back (unfilled)' in boundary and '<exchange id>' not in boundary


def test_a_placeholder_left_among_the_ids_is_rejected_alone() -> None:
    def fills_all_but_one_id(prompt: str) -> str:
        ids = listed_ids(prompt, ('tools',))[:1]
        filled = fill_example(json.loads(example_of(prompt)), ids, '<exchange id>')
        filled['keep'].append('<exchange id>')
        return json.dumps(filled)

    events, _ = fork_events(fills_all_but_one_id)
    record = events[0].record
    assert record is not None and record.fallback_reason is None
    assert record.rejected == ('<exchange id>',)


FREE_KEEP = re.compile(r'^KEEP: (<[^>]+>)$', re.MULTILINE)
FREE_SUMMARY = re.compile(r'^(<summary[^>]*>)$', re.MULTILINE)


def test_the_fork_free_form_filled_as_described_is_accepted() -> None:
    expected: list[tuple[str, ...]] = []

    def model_fills_the_form(prompt: str) -> str:
        keep, summary = FREE_KEEP.search(prompt), FREE_SUMMARY.search(prompt)
        assert keep is not None and summary is not None
        ids = listed_ids(prompt, ('tools',))[-1:]
        expected.append(expected_kept(prompt, ids))
        text = 'Ids lowercase since log 3; logs so far clean; next: the next log.'
        return f'{keep.group(0).replace(keep.group(1), ", ".join(ids))}\n{text}'

    events, _ = fork_events(model_fills_the_form, 'free')
    assert events and len(expected) == len(events)
    for event, kept in zip(events, expected, strict=True):
        assert event.record is not None and event.record.fallback_reason is None
        assert event.record.kept == kept


def test_the_fork_free_form_copied_literally_falls_back_with_a_reason() -> None:
    def copies(prompt: str) -> str:
        keep, summary = FREE_KEEP.search(prompt), FREE_SUMMARY.search(prompt)
        assert keep is not None and summary is not None
        return f'KEEP: {keep.group(1)}\n{summary.group(1)}'

    events, _ = fork_events(copies, 'free')
    record = events[0].record
    assert record is not None and record.fallback_reason == 'unfilled'


@dataclass
class WatchedCurator(CuratedSelection[Any]):
    """Keeps the per-run copies, whose state says why a curation fell back."""

    runs: list[CuratedSelection[Any]] = field(default_factory=list[CuratedSelection[Any]])

    async def for_run(self, ctx: Any) -> Any:
        copy = await super().for_run(ctx)
        self.runs.append(copy)  # pyright: ignore[reportArgumentType]
        return copy


def curator_outcome(reply: ReplyFn) -> tuple[CuratedSelection[Any], Script]:
    script = Script(reply={'curator': reply})
    curated = WatchedCurator()
    curated_run(curated, script)
    return curated.runs[-1], script


def test_the_curator_example_filled_as_described_is_accepted() -> None:
    chosen: list[str] = []

    def curator_fills_the_example(prompt: str) -> str:
        bundles = prompt[prompt.index('<bundles>') : prompt.index('</bundles>')]
        ids = listed_ids(bundles, ())[:1]
        chosen[:] = ids
        filled = fill_example(json.loads(example_of(prompt)), ids, '<bundle id>')
        assert Draft202012Validator(CURATOR_SCHEMA).is_valid(filled)
        return json.dumps(filled)

    copy, script = curator_outcome(curator_fills_the_example)
    assert copy.last_failure is None
    assert len(chosen) == 1
    sent = script.first('agent').messages
    answers = [p.content for m in sent for p in m.parts if isinstance(p, TextPart)]
    assert answers == ['Noted: migrate orders in two steps, copy then switch.']  # the focal bundle, nothing else
    orientation = next(
        user_text(p)
        for m in sent
        for p in m.parts
        if isinstance(p, UserPromptPart) and ORIENTATION_OPEN in user_text(p)
    )
    assert 'Relevant state: filled: the state the answer depends on' in orientation


def test_the_curator_example_copied_literally_falls_back_with_a_reason() -> None:
    copy, script = curator_outcome(example_of)
    assert copy.last_failure is not None and copy.last_failure.startswith('unfilled')
    sent = script.first('agent').messages
    assert not any(ORIENTATION_OPEN in user_text(p) for m in sent for p in m.parts if isinstance(p, UserPromptPart))


# --- Docs quote the prompts -------------------------------------------------------------------------------

DOCS = Path(__file__).parent.parent / 'docs' / 'strategies.md'
QUOTED = re.compile(r'<!-- prompt: ([\w-]+) -->\n```text\n(.*?)\n```', re.DOTALL)


def quoted_prompts() -> dict[str, str]:
    return dict(QUOTED.findall(DOCS.read_text()))


def as_pattern(template: str) -> re.Pattern[str]:
    """The docs' quote with each `{slot}` standing for whatever the run filled in."""
    pieces = re.split(r'\{[a-z_]+\}', template)
    return re.compile('(?:.*?)'.join(re.escape(piece) for piece in pieces), re.DOTALL)


def test_the_docs_quote_every_prompt() -> None:
    assert set(quoted_prompts()) == set(SCENARIOS)


@pytest.mark.parametrize('name', list(SCENARIOS))
def test_the_docs_quote_equals_what_the_code_sends(name: str) -> None:
    template = quoted_prompts()[name]
    assert as_pattern(template).fullmatch(captured(name).text), f'docs/strategies.md quote of {name} is stale'


# --- Fork fallback keeps (seed 004) -----------------------------------------------------------------------


async def test_the_fallback_keeps_four_finished_exchanges_besides_the_one_in_progress() -> None:
    # Seed 004: the runtime "always keeps protected and unfinished exchanges"; a malformed proposal "falls back
    # to keeping the last four exchanges", chosen like the fixed variant's two: the exchange in progress stays
    # regardless, so it is not one of the four.
    def unparseable(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('not an answer')])

    history = recorded_history(8)
    view = segment(history)
    assert [e.id for e in view.exchanges if e.unfinished] == ['g8']
    out = await replay(Fork(), history, model=FunctionModel(unparseable))
    record = next(r for m in out for p in m.parts if isinstance(p, CompactionPart) and (r := our_record(p)))
    assert record['fallback_reason'] == 'unparseable'
    assert record['kept'] == ['g0', 'g4', 'g5', 'g6', 'g7', 'g8']
    assert record['dropped'] == ['g1', 'g2', 'g3']


@pytest.mark.parametrize(
    'line',
    [
        '**KEEP:** g2',
        '`KEEP: g2`',
        '## KEEP: g2',
        '**KEEP**: g2',
        '> KEEP: g2',
        '__KEEP:__ g2',
        '- **KEEP:** g2',
        '1. KEEP: g2.',
        # A summary line that starts like the label, before the real one (naming an id or not).
        '**Keep:** the retry loop as it is.\nKEEP: g2',
        '- Keep: g5 in mind, it failed twice\nKEEP: g2',
        # The ids under an empty label, as a model lists them.
        'KEEP:\ng2',
        '**KEEP:**\n- g2',
        'KEEP: g2\r',
        'KEEP:\n\n- g2 (the second log)',
        'KEEP:\n\u2022 g2: the second log',
    ],
)
async def test_a_free_fork_reads_a_keep_line_written_in_markdown(line: str) -> None:
    # A model formats a label it was shown plain; the reply was thrown away (`unparseable`) and the fallback kept
    # the newest four exchanges instead of the one chosen.
    record, _ = await free_fork(f'{line}\nLogs 0-3 read, all clean. Next: log 4.')
    assert record['fallback_reason'] is None
    assert record['kept'] == ['g0', 'g2', 'g8']


@pytest.mark.parametrize(
    ('line', 'kept'),
    [
        ('KEEP: G2', ['g2']),
        ('KEEP: g2-g3', ['g2', 'g3']),
        ('KEEP: g2\u2013g4', ['g2', 'g3', 'g4']),
        ('KEEP: g2..g3, g5', ['g2', 'g3', 'g5']),
        ('KEEP: g2 to g3', ['g2', 'g3']),
        ('KEEP: G2-3', ['g2', 'g3']),
        ('KEEP:\n- g2-g3 (the two logs)', ['g2', 'g3']),
        # A range written with spaces around its dash, or from its high end, names the ids between too.
        ('KEEP: g2 - g4', ['g2', 'g3', 'g4']),
        ('KEEP: g2 \u2013 g4 (the config work), g6', ['g2', 'g3', 'g4', 'g6']),
        ('KEEP:\n- g2 \u2014 g3 (the two logs)\n- g5', ['g2', 'g3', 'g5']),
        ('KEEP: g4-g2', ['g2', 'g3', 'g4']),
        ('KEEP: g2 - g4: the setup, g6', ['g2', 'g3', 'g4', 'g6']),
        ('KEEP: **g2 \u2013 g4**, g6', ['g2', 'g3', 'g4', 'g6']),
        # A list line that is ids only as written, not once its range is closed up, keeps what it named as written.
        ('KEEP:\n- g2 \u2013 g4. The config work.\n- g6', ['g2', 'g6']),
        ('KEEP:\n- **g2 - g4** setup\n- g6', ['g2', 'g6']),
        # Without a `g` on its high end, a range from its high end is read as its two ends, as a range too wide.
        ('KEEP: g4-2', ['g2', 'g4']),
        # A range too wide to be meant is read as its two ends (the validator rejects the one that is no exchange).
        ('KEEP: g2-g99999999999', ['g2']),
    ],
)
async def test_a_free_fork_reads_ids_in_capitals_and_ranges(line: str, kept: list[str]) -> None:
    # `G2` and `g2-g3` named no id the reader knew: the reply was thrown away (`unparseable`), or kept only the ends.
    record, _ = await free_fork(f'{line}\nLogs 0-3 read, all clean. Next: log 4.')
    assert record['fallback_reason'] is None
    assert record['kept'] == ['g0', *kept, 'g8']


@pytest.mark.parametrize(
    ('reply', 'kept'),
    [
        ('KEEP: none of them except g5\nLogs read.', ['g5']),
        ('KEEP: - g3 (the config)\nLogs read.', ['g3']),
        ('KEEP: g5 (the final config; g1-g4 were drafts)\nLogs read.', ['g5']),
        # A rule in the summary that starts like the label does not take the place of the real line after it.
        ('Rules in force:\n- KEEP: no mocks in integration tests (user rule)\nLogs read.\nKEEP: g3', ['g3']),
        ('KEEP: G3, g3, g2-g4\nLogs read.', ['g2', 'g3', 'g4']),
        ('KEEP: g2 (the config), g5: the tests\nLogs read.', ['g2', 'g5']),
        # A note after a none word names what was dropped, not what to keep.
        ('KEEP: None (g1-g4 were drafts, summarized)\nLogs read.', []),
        ('KEEP: none, g2 was superseded by g5\nLogs read.', []),
        ('KEEP: None - all summarized below\nLogs read.', []),
        ('KEEP: None\u2014all summarized below\nLogs read.', []),
        # With ids after it, a none word joined to a dash is read for them, as `none of them except g5` is.
        ('KEEP: none-of-these except g5\nLogs read.', ['g5']),
        ('KEEP: no-op changes aside, g3 and g4\nLogs read.', ['g3', 'g4']),
        # A joined none word whose note points at ids elsewhere does not decide: the list under it, the next line.
        ('KEEP: None\u2014see below\nKEEP: g3, g5\nLogs read.', ['g3', 'g5']),
        # A note after a dash is still a note, also when it names other exchanges: not a range.
        ('KEEP: g2 - the config, g5\nLogs read.', ['g2', 'g5']),
        ('KEEP: g7 \u2014 g2 and g3 were superseded by it\nLogs read.', ['g7']),
        ('KEEP: g3 \u2014 g4 failed\nLogs read.', ['g3']),
        ('KEEP:\n- g3 \u2014 g2 was superseded by it\n- g4\nLogs read.', ['g3', 'g4']),
        # A spaced range then `and` and a last id is a range and an id, not an id and its note.
        ('KEEP: g2 - g5 and g7\nLogs read.', ['g2', 'g3', 'g4', 'g5', 'g7']),
        ('KEEP: g2 \u2013 g4 and g7 (the config)\nLogs read.', ['g2', 'g3', 'g4', 'g7']),
        # A line that names no id but points at a list reads the list under it.
        ('KEEP: None \u2014 except these:\n- g2\n- g5\nLogs read.', ['g2', 'g5']),
        ('KEEP: None\u2014except these:\n- g2\n- g5\nLogs read.', ['g2', 'g5']),
        ('KEEP: the following:\n\n- g3 (the config)\n- g6\n\nLogs read.', ['g3', 'g6']),
        ('KEEP: g3 and the following:\n- g5\n- g6\nLogs read.', ['g3', 'g5', 'g6']),
        # Pointing at nothing under it, the line is read as it stands.
        ('KEEP: None \u2014 all summarized below:\nLogs read.', []),
        # A none word with a note points at the summary, whose lines may start with ids: they are not kept.
        ('KEEP: None \u2014 everything is summarized below:\n- g2: the user asked\n- g5: Logs read.', []),
        ('KEEP: None. Summary of the exchanges:\n- g1: asked for a CSV\n- g4: Logs read.', []),
        ('KEEP: none, all summarized as follows:\n\ng1 \u2013 g3: Logs read.\ng4: fixed the test', []),
        ('KEEP: None \u2014 only the summary below is needed:\n- g2: deploy target\n- g3: Logs read.', []),
        ('KEEP: none, just the summary:\n- g2: deploy target\n- g3: Logs read.', []),
        ('KEEP: None, everything except the latest exchange is summarized below.\n- g2: set\n- g5: Logs read.', []),
        ('KEEP: None \u2014 everything besides the task is summarized below:\n- g2: set\n- g5: Logs read.', []),
        ('KEEP: None, except the following two:\n- g3 (the config)\n- g5 (the failure)\nLogs read.', ['g3', 'g5']),
        ('KEEP: None except those listed below:\n- g3\n- g5\nLogs read.', ['g3', 'g5']),
        ('KEEP: None (except these):\n- g3\n- g5\nLogs read.', ['g3', 'g5']),
        # After an em dash, a range then `and` and a last id ending the line is a range and an id ...
        ('KEEP: g2 \u2014 g4 and g7\nLogs read.', ['g2', 'g3', 'g4', 'g7']),
        # ... and with a note after the last id, an id and a note naming others, going up too.
        ('KEEP: g4 \u2014 g6 and g7: both only restate it\nLogs read.', ['g4']),
        ('KEEP:\n- g3 \u2014 g5 and g6: drafts of it\n- g7\nLogs read.', ['g3', 'g7']),
        # Going down, a spaced range then `and` is an id and a note naming others.
        ('KEEP: g7 \u2013 g2 and g3: superseded drafts\nLogs read.', ['g7']),
    ],
)
async def test_a_free_fork_reads_ids_before_a_note_and_none_only_when_said(reply: str, kept: list[str]) -> None:
    record, summary = await free_fork(reply)
    assert record['fallback_reason'] is None
    assert record['kept'] == ['g0', *kept, 'g8']
    assert record['rejected'] == []
    assert 'Logs read.' in summary


def test_a_reply_repeating_a_range_names_a_bounded_number_of_ids() -> None:
    # `g1-g1000,` 30,000 times named 30 million ids (gigabytes, seconds with the event loop blocked).
    from pydantic_ai_compaction.processors.strategies import fork as fork_module

    found = fork_module._keep_line('KEEP: ' + 'g1-g1000,' * 30_000)  # pyright: ignore[reportPrivateUsage]
    assert found is not None and found[0] == tuple(f'g{n}' for n in range(1, 1001))
    listed = fork_module._keep_line('KEEP:\n' + '- g1-g1000\n' * 30_000)  # pyright: ignore[reportPrivateUsage]
    assert listed is not None and len(listed[0]) == 1_000 and listed[2] < 11 * 30_000


@pytest.mark.parametrize(
    'reply',
    [
        'KEEP: None\u2014just the config exchange\nSummary: g4 had the config.',
        'KEEP: None\u2014see below\nSummary: g4 had the config.',
        'KEEP: None\u2014\n- g2\n- g5\nLogs read.',
    ],
)
def test_a_joined_none_word_whose_note_points_elsewhere_names_neither(reply: str) -> None:
    # Read as none, they dropped what the model meant to keep; naming neither, the runtime falls back instead.
    from pydantic_ai_compaction.processors.strategies import fork as fork_module

    assert fork_module._keep_line(reply) is None  # pyright: ignore[reportPrivateUsage]


@pytest.mark.parametrize(
    'line',
    ['KEEP: none \u2014 logs 0-3 are summarized below', 'KEEP: None.', 'KEEP: n/a', 'KEEP: (none)', 'KEEP: nothing'],
)
async def test_a_free_fork_keeps_none_however_its_keep_line_words_it(line: str) -> None:
    record, summary = await free_fork(f'{line}\nLogs 0-3 read, all clean. Next: log 4.')
    assert record['fallback_reason'] is None
    assert record['kept'] == ['g0', 'g8']
    assert summary == 'Logs 0-3 read, all clean. Next: log 4.'


async def free_fork(reply: str) -> tuple[dict[str, Any], str]:
    """The record and the summary of a free fork of an 8-step history whose model answers *reply*."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(reply)])

    out = await replay(Fork(variant='free'), recorded_history(8), model=FunctionModel(respond))
    (boundary,) = [p for m in out for p in m.parts if isinstance(p, CompactionPart) and our_record(p) is not None]
    return cast(dict[str, Any], our_record(boundary)), boundary.content


@pytest.mark.parametrize(
    'reply',
    [
        'KEEP: none\n- g2\nLogs 0-3 read, all clean.',
        'KEEP: none\ng2, g3\nwere read, all clean.',
        'KEEP:\ng2 was read last; logs 0-3 are clean.',
    ],
)
async def test_a_free_fork_keeps_none_when_its_keep_line_says_so(reply: str) -> None:
    # `none`, then ids on the next line (a list in the summary, a sentence's subject wrapped), and an empty label
    # over a sentence that starts with an id: nothing is kept, and the summary keeps those lines.
    record, summary = await free_fork(reply)
    assert record['fallback_reason'] is None
    assert record['kept'] == ['g0', 'g8']
    assert reply.split('\n', 1)[1] in summary


# --- The tolerant reply reader ----------------------------------------------------------------------------

OBJECT = {'keep': ['g2'], 'summary': {'rules': ["it's lowercase"], 'facts': [], 'progress': 'p', 'next_step': 'n'}}
PLAIN = json.dumps(OBJECT)
SINGLE = "{'keep': ['g2'], 'summary': {'rules': ['it\\'s lowercase'], 'facts': [], 'progress': 'p', 'next_step': 'n'}}"
SMART = PLAIN.replace('"keep"', '\u201ckeep\u201d').replace('"summary"', '\u201csummary\u201d')


@pytest.mark.parametrize(
    ('reply', 'tolerated'),
    [
        pytest.param(PLAIN, (), id='plain'),
        pytest.param(f'```json\n{PLAIN}\n```', ('fence',), id='fence'),
        pytest.param(f'```\n{PLAIN}\n```', ('fence',), id='bare-fence'),
        pytest.param(f'Here is my proposal.\n{PLAIN}', ('prose',), id='leading-prose'),
        pytest.param(f'{PLAIN}\nI kept g2 because it holds the change.', ('trailing',), id='trailing-text'),
        pytest.param(f'Sure:\n```json\n{PLAIN}\n```\nDone.', ('fence', 'prose', 'trailing'), id='all-around'),
        pytest.param(SINGLE, ('quotes',), id='single-quotes'),
        pytest.param(SMART, ('quotes',), id='smart-quotes-around-keys'),
        pytest.param(f'{PLAIN}\n\nAgain: {PLAIN}', ('trailing',), id='same-object-twice'),
        pytest.param(f'Use {{curly}} braces? No. {PLAIN}', ('prose',), id='braces-in-prose'),
    ],
)
def test_the_reader_tolerates_what_models_wrap_around_an_object(reply: str, tolerated: tuple[str, ...]) -> None:
    read = replies.read_json_object(reply)
    assert read.data == OBJECT
    assert read.tolerated == tolerated


def test_the_reader_reads_a_line_break_typed_inside_a_string_as_itself() -> None:
    read = replies.read_json_object('{"rules": ["ids lowercase\nsince log 3"]}')
    assert read.data == {'rules': ['ids lowercase\nsince log 3']}
    assert read.tolerated == ('raw_control',)


@pytest.mark.parametrize(
    ('reply', 'problem', 'detail'),
    [
        pytest.param(PLAIN[:-3], 'unparseable', 'truncated', id='truncated'),
        pytest.param(PLAIN[: PLAIN.index('"rules"') + 12], 'unparseable', 'truncated', id='truncated-after-nested'),
        pytest.param('{"keep": ["g1"]} {"keep": ["g2"]}', 'ambiguous', '2 different JSON objects', id='two-objects'),
        pytest.param('{"keep": ["g1"], "keep": ["g2"]}', 'unparseable', "key 'keep' appears twice", id='repeated-key'),
        pytest.param('{"keep": ["g1"] "summary": {}}', 'unparseable', "expected ','", id='missing-comma'),
        pytest.param('{"keep": ["g1",]}', 'unparseable', 'expected a JSON value', id='trailing-comma'),
        pytest.param('{"done": tru}', 'unparseable', 'expected a JSON value', id='bare-word'),
        pytest.param('{"score": NaN}', 'unparseable', 'expected a JSON value', id='nan'),
        pytest.param('{keep: ["g1"]}', 'unparseable', 'no JSON object', id='unquoted-key'),
        pytest.param('["g1", "g2"]', 'unparseable', 'no JSON object', id='array-only'),
        pytest.param('I cannot do that.', 'unparseable', 'no JSON object', id='no-json'),
        pytest.param('{"keep": [g1], "summary": {"a": 1}}', 'unparseable', 'not used on its own', id='inner-object'),
        pytest.param('{"a": "' + 'x' * 10 + '"} then {"b": ', 'unparseable', 'truncated', id='second-truncated'),
        pytest.param("{'a': 'it's'}", 'unparseable', "expected ','", id='unescaped-apostrophe'),
        pytest.param('{"a": 1}' + ' {"b": x}' * 70, 'unparseable', 'more than 64', id='too-many-fragments'),
        pytest.param("{'a': " * 300 + '1' + '}' * 300, 'unparseable', 'nested deeper', id='too-deep'),
        pytest.param('{"a": ' * 100_000 + '1' + '}' * 100_000, 'unparseable', 'nested deeper', id='deeper-than-python'),
    ],
)
def test_the_reader_refuses_what_would_change_meaning(reply: str, problem: str, detail: str) -> None:
    with pytest.raises(replies.ReplyError) as raised:
        replies.read_json_object(reply)
    assert raised.value.problem == problem
    assert detail in raised.value.detail


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    data=st.dictionaries(
        st.text(max_size=8), st.one_of(st.text(max_size=20), st.integers(), st.lists(st.text(max_size=5))), max_size=4
    ),
    before=st.sampled_from(['', 'Here you go:\n', '```json\n']),
    after=st.sampled_from(['', '\n```', '\nThat is all.']),
)
def test_a_valid_object_is_read_back_exactly_and_never_from_a_cut_reply(
    data: dict[str, Any], before: str, after: str
) -> None:
    text = json.dumps(data, ensure_ascii=False)
    assert replies.read_json_object(before + text + after).data == data
    # A reply cut anywhere inside the object is refused: never completed, never read as an inner piece.
    for cut in range(1, len(text), max(len(text) // 7, 1)):
        with pytest.raises(replies.ReplyError):
            replies.read_json_object(before + text[:cut])


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)


def single_quoted(value: Any) -> str:
    """*value* as JSON written with single quotes, the way models write it."""
    if isinstance(value, str):
        body = json.dumps(value, ensure_ascii=False)[1:-1]
        return "'" + body.replace('\\"', '"').replace("'", "\\'") + "'"
    if isinstance(value, dict):
        items = ', '.join(f'{single_quoted(k)}: {single_quoted(v)}' for k, v in value.items())  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        return '{' + items + '}'
    if isinstance(value, list):
        return '[' + ', '.join(single_quoted(v) for v in value) + ']'  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return json.dumps(value)


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=4))
def test_the_lenient_grammar_reads_json_as_json_and_single_quotes_as_the_same_object(data: dict[str, Any]) -> None:
    text = json.dumps(data, ensure_ascii=False)
    assert replies._Lenient(text).object(0, 0) == (json.loads(text), len(text))
    quoted = single_quoted(data)
    read = replies.read_json_object(quoted)
    assert read.data == data
    assert read.tolerated == (('quotes',) if "'" in quoted else ())


def test_a_tolerated_fork_reply_is_accepted_and_says_what_was_tolerated() -> None:
    def fenced(prompt: str) -> str:
        ids = listed_ids(prompt, ('tools',))[-1:]
        filled = fill_example(json.loads(example_of(prompt)), ids, '<exchange id>')
        return 'Here is the proposal:\n```json\n' + json.dumps(filled) + '\n```'

    events, _ = fork_events(fenced)
    record = events[0].record
    assert record is not None and record.fallback_reason is None
    assert record.extra['reply_tolerated'] == ['fence', 'prose']


def test_an_ambiguous_fork_reply_falls_back_with_its_reason() -> None:
    events, _ = fork_events(lambda prompt: '{"keep": ["g1"]}\nor rather\n{"keep": ["g2"]}')
    record = events[0].record
    assert record is not None and record.fallback_reason == 'ambiguous'
    assert record.detail == '2 different JSON objects in the reply; expected one'


def test_a_curator_reply_in_single_quotes_is_accepted() -> None:
    reply = "{'focal': ['g1'], 'orientation': {'relevant_state': 'two steps', 'required': [], 'prohibited': []}}"
    copy, _ = curator_outcome(lambda prompt: reply)
    assert copy.last_failure is None


def test_a_truncated_curator_reply_falls_back_with_its_reason() -> None:
    copy, _ = curator_outcome(lambda prompt: '{"focal": ["g1"], "orientation": {"relevant_state": "two')
    assert copy.last_failure is not None and copy.last_failure.startswith('unparseable: malformed JSON object')


def test_fill_refuses_a_slot_without_a_value_and_a_value_without_a_slot() -> None:
    assert compactor.fill('{a} {"json": {b}}', a='{b}', b='x') == '{b} {"json": x}'
    with pytest.raises(KeyError, match='slot'):
        compactor.fill('{a} {b}', a='x')
    with pytest.raises(KeyError, match='no slot'):
        compactor.fill('{a}', a='x', c='y')
