"""`Verified`: a summary is checked before it replaces history, in real agent runs."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import CompactionPart, ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import CompactionEvent, ConfigurationError, InstructionSources, StatelessSummary, Trigger
from pydantic_ai_compaction.processors.strategies.summary import SUMMARY_MARKER
from pydantic_ai_compaction.processors.strategies.verified import (
    APPENDIX_HEADER,
    DEFAULT_CHECKS,
    VERIFY_MARKER,
    Verified,
    protected_facts,
)
from pydantic_ai_compaction.runtime.degraded import SetupWarning
from pydantic_ai_compaction.runtime.transcript import user_text

SYSTEM = 'You audit service reports.'
FACT_LINE = 'INCIDENT INC-4471 owner=dana timeout_ms=1050'
CHANGE = 'CHANGE: report owners in uppercase'


def report(index: int) -> str:
    """Report *index*: filler lines, a fact in report 1 that report 4 refers back to, a marked change in report 2."""
    filler = [f'check {word} passed' for word in ('alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta')] * 6
    if index == 1:
        filler.insert(3, FACT_LINE)
    if index == 2:
        filler.insert(0, CHANGE)
    if index == 4:
        filler.insert(5, 'UPDATE INC-4471 severity raised')
    return f'report {index}\n' + '\n'.join(filler)


@dataclass
class Script:
    """Reads reports 0..5 one per step, then answers; summary and check requests get scripted replies."""

    summary: Callable[[str], str]
    check: Callable[[str], str] = lambda prompt: '{"omitted": []}'
    prompts: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    step: int = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = '\n'.join(user_text(p) for p in messages[-1].parts if isinstance(p, UserPromptPart))
        for marker, kind, reply in ((VERIFY_MARKER, 'check', self.check), (SUMMARY_MARKER, 'summary', self.summary)):
            if marker in prompt:
                self.prompts.setdefault(kind, []).append(prompt)
                return ModelResponse(parts=[TextPart(reply(prompt))])
        index = self.step
        self.step += 1
        if index > 5:
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('read_report', {'index': index}, tool_call_id=f'c{index}')])


def run(strategy: Any, script: Script) -> tuple[list[CompactionEvent], Any]:
    events: list[CompactionEvent] = []
    inner = strategy.inner
    inner.observer = events.append
    agent = Agent(FunctionModel(script), capabilities=[strategy], system_prompt=SYSTEM)

    @agent.tool_plain
    def read_report(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one service report."""
        return report(index)

    result = agent.run_sync('Audit reports 0-5.')
    return events, result


def summarizer(keep_last: int = 1) -> StatelessSummary[Any]:
    # About 220 tokens a report: the trigger is crossed once three reports are in.
    return StatelessSummary(trigger=Trigger(tokens=700), keep_last=keep_last)


def first_compaction(events: list[CompactionEvent]) -> CompactionEvent:
    return next(event for event in events if event.kind == 'compacted')


def boundary_text(event: CompactionEvent) -> str:
    return next(p.content or '' for m in event.history for p in m.parts if isinstance(p, CompactionPart))


LOSSY = 'Reports read so far passed their checks.'


def test_a_lossy_summary_gets_the_missing_fact_appended_from_the_removed_report() -> None:
    # The summary of reports 0-2 drops INC-4471; report 4, kept later, refers to it. The fact goes back in.
    events, result = run(Verified(summarizer()), Script(summary=lambda prompt: LOSSY))
    compacted = [event for event in events if event.kind == 'compacted']
    assert result.output == 'done'
    flagged = [e for e in compacted if e.record and e.record.extra['verification']['verdict'] == 'appended']
    assert flagged, [e.record.extra.get('verification') for e in compacted if e.record]
    event = flagged[0]
    assert event.record is not None
    check = event.record.extra['verification']
    assert check['missing_facts'] == ['INC-4471']  # timeout_ms=1050 is never referred to again
    text = boundary_text(event)
    assert text.startswith(LOSSY)
    assert f'{APPENDIX_HEADER}\n- {FACT_LINE}' in text


def test_a_complete_summary_passes_unchanged() -> None:
    complete = f'Reports passed. {FACT_LINE}. {CHANGE}.'
    events, _ = run(Verified(summarizer()), Script(summary=lambda prompt: complete))
    event = first_compaction(events)
    assert event.record is not None
    assert event.record.extra['verification']['verdict'] == 'passed'
    assert boundary_text(event) == complete
    assert event.record.extra['verification']['failed'] == []


def test_reject_never_writes_the_refused_summary_and_says_why() -> None:
    events, result = run(Verified(summarizer(), on_failure='reject'), Script(summary=lambda prompt: LOSSY))
    assert result.output == 'done'
    refused = [e for e in events if e.record is not None and e.record.fallback_reason == 'verification']
    assert refused
    record = refused[0].record
    assert record is not None and record.detail is not None
    assert record.detail.startswith('summary refused by verification: facts missing')
    assert 'INC-4471' in record.detail
    # The runtime's fallback wrote the boundary: the lossy summary is nowhere in the history.
    assert LOSSY not in boundary_text(refused[0])


def test_reject_cannot_keep_the_run_over_its_trigger() -> None:
    # A summarizer that always misses a fact the next step refers to: every summary is refused, and still
    # every request stays near the trigger instead of growing with the run (a refusal falls back, never declines).
    sizes: list[int] = []
    step = {'n': 0}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = ' '.join(
            p.content for p in messages[-1].parts if isinstance(p, UserPromptPart) and isinstance(p.content, str)
        )
        if SUMMARY_MARKER in prompt:
            return ModelResponse(parts=[TextPart('Work in progress.')])
        sizes.append(sum(len(str(part)) for message in messages for part in message.parts))
        step['n'] += 1
        if step['n'] <= 20:
            ticket = f'INC-{1000 + step["n"] - 1}'
            return ModelResponse(parts=[ToolCallPart('read', {'ticket': ticket}, tool_call_id=f'c{step["n"]}')])
        return ModelResponse(parts=[TextPart('done')])

    agent = Agent(
        FunctionModel(model),
        capabilities=[Verified(StatelessSummary(trigger=Trigger(tokens=2_000)), on_failure='reject')],
    )

    @agent.tool_plain
    def read(ticket: str) -> str:  # pyright: ignore[reportUnusedFunction]
        number = int(ticket.split('-')[1])
        return f'ticket {ticket} links INC-{number + 1}\n' + 'filler words here ' * 150

    agent.run_sync('go')
    assert len(sizes) == 21
    assert max(sizes) < 4 * 2_000 * 3, sizes


def test_a_dropped_instruction_change_is_appended_word_for_word() -> None:
    sources = InstructionSources(markers=('CHANGE:',))
    summary = f'Reports passed. {FACT_LINE}.'
    events, _ = run(Verified(summarizer(), sources=sources), Script(summary=lambda prompt: summary))
    appended = [e for e in events if e.record is not None and e.record.extra['verification']['missing_instructions']]
    assert appended
    assert appended[0].record is not None
    assert appended[0].record.extra['verification']['missing_instructions'] == [CHANGE]
    assert boundary_text(appended[0]).endswith(f'{APPENDIX_HEADER}\n- {CHANGE}')


def test_a_summary_longer_than_what_it_replaces_is_refused() -> None:
    events, _ = run(Verified(summarizer(keep_last=0)), Script(summary=lambda prompt: FACT_LINE + ' ' + 'word ' * 3000))
    refused = [e for e in events if e.record is not None and e.record.fallback_reason == 'verification']
    assert refused and refused[0].record is not None and refused[0].record.detail is not None
    assert 'not smaller than what it replaces' in refused[0].record.detail
    assert all('word word word' not in boundary_text(event) for event in refused)


# --- the second pass ---------------------------------------------------------------------------------------


def omissions_strategy() -> Verified[Any]:
    return Verified(summarizer(), checks=('not_empty', 'omissions'))


def test_the_second_pass_appends_only_omissions_the_transcript_holds() -> None:
    reply = json.dumps({'omitted': ['timeout_ms=1050', 'port 9443 was opened']})
    script = Script(summary=lambda prompt: LOSSY, check=lambda prompt: reply)
    events, _ = run(omissions_strategy(), script)
    event = first_compaction(events)
    assert event.record is not None
    check = event.record.extra['verification']
    # "port 9443" is not in the transcript: the checker invented it, so it is not an omission.
    assert check['omissions'] == ['timeout_ms=1050']
    assert boundary_text(event).endswith(f'{APPENDIX_HEADER}\n- {FACT_LINE}')
    # One summary call and one check call per compaction, both counted as compactor usage.
    assert event.record.compactor_usage.requests == 2
    assert len(script.prompts['check']) == len(script.prompts['summary'])


EXAMPLE_LEAD = 'shaped like this example:\n'


def example_of(prompt: str) -> str:
    start = prompt.index(EXAMPLE_LEAD) + len(EXAMPLE_LEAD)
    return prompt[start : prompt.index('\n', start)]


def test_the_second_pass_example_copied_literally_adds_nothing() -> None:
    events, _ = run(omissions_strategy(), Script(summary=lambda prompt: LOSSY, check=example_of))
    event = first_compaction(events)
    assert event.record is not None
    verification = event.record.extra['verification']
    assert verification['verdict'] == 'passed'
    # Passed by the deterministic checks; the second pass is said not to have run, not to have passed.
    assert 'omissions' not in verification['checks']
    assert verification['not_run'] == {'omissions': "its reply copied the prompt's example"}
    assert boundary_text(event) == LOSSY


def test_a_second_pass_whose_model_fails_is_warned_and_recorded_as_not_run() -> None:
    def down(prompt: str) -> str:
        raise RuntimeError('verifier model down')

    with pytest.warns(RuntimeWarning, match=r'the omissions pass did not run \(its model failed: RuntimeError'):
        events, result = run(omissions_strategy(), Script(summary=lambda prompt: LOSSY, check=down))
    assert result.output == 'done'
    event = first_compaction(events)
    assert event.record is not None
    verification = event.record.extra['verification']
    assert verification['checks'] == ['not_empty']
    assert verification['not_run'] == {'omissions': 'its model failed: RuntimeError: verifier model down'}
    assert verification['verdict'] == 'passed'


def test_a_second_pass_model_that_cannot_run_is_a_setup_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip('openai')
    monkeypatch.delenv('OPENAI_API_KEY', raising=False)
    strategy = Verified(summarizer(), checks=('not_empty', 'omissions'), model='openai:gpt-5-mini')
    with pytest.warns(SetupWarning, match=r"the omissions pass cannot run .*check Verified's model="):
        events, _ = run(strategy, Script(summary=lambda prompt: LOSSY))
    event = first_compaction(events)
    assert event.record is not None
    assert event.record.extra['verification']['not_run']['omissions'].startswith('its model failed: UserError')


def test_the_second_pass_example_filled_as_described_is_used() -> None:
    def fill(prompt: str) -> str:
        example = json.loads(example_of(prompt))
        assert list(example) == ['omitted'] and len(example['omitted']) == 1
        return json.dumps({'omitted': ['owner=dana']})

    events, _ = run(omissions_strategy(), Script(summary=lambda prompt: LOSSY, check=fill))
    event = first_compaction(events)
    assert event.record is not None
    assert event.record.extra['verification']['omissions'] == ['owner=dana']


def test_the_second_pass_prompt(compaction_snapshot: Any) -> None:
    script = Script(summary=lambda prompt: LOSSY)
    run(omissions_strategy(), script)
    prompt = script.prompts['check'][0]
    assert not re.search(r'\{[a-z_]+\}|\{\{|\}\}', prompt)
    assert prompt.startswith(VERIFY_MARKER) and f'<summary>\n{LOSSY}\n</summary>' in prompt
    assert prompt == compaction_snapshot


# --- facts and configuration -------------------------------------------------------------------------------


def test_protected_facts_are_ids_paths_and_long_numbers_not_timestamps_or_vocabulary() -> None:
    text = '\n'.join(
        [
            '2026-03-11T08:00:01Z api INFO path=/v1/orders status=200 latency_ms=42',
            '2026-03-11T08:00:02Z api INFO path=/v1/orders status=200 latency_ms=17',
            '2026-03-11T08:00:03Z api INFO path=/v1/orders status=200 latency_ms=5',
            '2026-03-11T08:00:04Z api INFO path=/v1/orders status=200 latency_ms=9',
            '2026-03-11T08:00:05Z INCIDENT inc-4471 service=api file=src/app/main.py timeout_ms=1050',
        ]
    )
    assert protected_facts(text, max_lines=3) == {'inc-4471', 'src/app/main.py', '1050'}


@pytest.mark.parametrize(
    ('kwargs', 'message'),
    [
        ({'checks': ('facts', 'bogus')}, 'Verified.checks[1]'),
        ({'checks': 'facts'}, 'Verified.checks must be a sequence'),
        ({'on_failure': 'drop'}, 'Verified.on_failure'),
        ({'max_fact_lines': 0}, 'Verified.max_fact_lines'),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        Verified(summarizer(), **kwargs)


def test_verified_keeps_the_inner_trigger_and_names_itself() -> None:
    inner = summarizer()
    verified = Verified(inner)
    assert verified.runtime.trigger == Trigger(tokens=700)
    assert verified.strategy_name == 'verified(summary)'
    assert tuple(verified.checks) == DEFAULT_CHECKS


def test_a_second_pass_that_cannot_run_ends_the_run_under_warnings_made_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip('openai')
    monkeypatch.delenv('OPENAI_API_KEY', raising=False)
    strategy = Verified(summarizer(), checks=('not_empty', 'omissions'), model='openai:gpt-5-mini')
    with warnings.catch_warnings():
        warnings.simplefilter('error', SetupWarning)
        # As a compactor that cannot run does: before, the engine took it for the summarizer's failure, threw the
        # summary away and recorded `compactor_error`, and the run went on.
        with pytest.raises(SetupWarning, match='the omissions pass cannot run'):
            run(strategy, Script(summary=lambda prompt: LOSSY))


def test_a_summary_no_check_could_run_on_is_unchecked_not_passed() -> None:
    def down(prompt: str) -> str:
        raise RuntimeError('verifier model down')

    strategy = Verified(summarizer(), checks=('omissions',))
    with pytest.warns(RuntimeWarning, match='the omissions pass did not run'):
        events, _ = run(strategy, Script(summary=lambda prompt: LOSSY, check=down))
    event = first_compaction(events)
    assert event.record is not None
    verification = event.record.extra['verification']
    assert (verification['checks'], verification['verdict']) == ([], 'unchecked')  # before: 'passed'


@pytest.mark.parametrize('quoted', [True, False])
def test_a_turn_of_several_items_is_kept_when_the_summary_quotes_each(quoted: bool) -> None:
    # The turn was read as its items run together ('Use lowercase ids.Never touch prod.'), which no summary holds: a
    # summary quoting both rules word for word failed the check and got them appended again.
    from pydantic_ai.messages import ModelRequest

    rules = ['Use lowercase ids.', 'Never touch prod.'] if quoted else ['Use lowercase ids.']
    summary = f'Logs 0-2 read. Rules: {" / ".join(rules)}'
    events: list[CompactionEvent] = []
    strategy = Verified(summarizer(), sources=InstructionSources(markers=()))
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('Audit the reports.')]),
        ModelResponse(parts=[TextPart('Started.')]),
        ModelRequest(parts=[UserPromptPart(['Use lowercase ids.', 'Never touch prod.'])]),
        ModelResponse(parts=[TextPart('Noted.')]),
    ]
    strategy.inner.observer = events.append
    agent = Agent(FunctionModel(Script(summary=lambda prompt: summary)), capabilities=[strategy], system_prompt=SYSTEM)

    @agent.tool_plain
    def read_report(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return report(index)

    agent.run_sync('Audit reports 0-5.', message_history=history)
    verification = first_compaction(events).record.extra['verification']  # pyright: ignore[reportOptionalMemberAccess]
    expected = [] if quoted else ['Use lowercase ids.\nNever touch prod.']
    assert verification['missing_instructions'] == expected
    assert ('instructions' in verification['failed']) is not quoted


@pytest.mark.parametrize(
    ('instruction', 'summary', 'held'),
    [
        ('Use lowercase ids.\nNever touch prod.', "rules: ['Use lowercase ids.', 'Never touch prod.']", True),
        ('Use lowercase ids.\nNever touch prod.', 'Never touch prod. Use lowercase ids.', False),  # out of order
        ('Until the audit ends:\ndo not\nrestart the billing service.', 'Next: restart the billing service.', False),
        ('Rollback window\n5\nminutes', 'Rollback window is 15 minutes', False),  # `5` only inside `15`
        ('Set the rate limit to\n10\nrequests per second.', 'Set the rate limit to 100 requests per second.', False),
        ('Set the rate limit to\n10\nrequests per second.', 'set the rate limit to 10 requests per second.', True),
        ('Use port\n80', 'use port 8080', False),  # the whole instruction inside a longer word
        ('Use port 80', 'Then use port 8080.', False),
        ('Use port 80', 'Then use port 80.', True),
        (
            '使用小写ID。\n不要动生产环境',
            '用户要求使用小写ID。并且不要动生产环境。',
            True,
        ),  # no spaces, no words to cut
        ('İstanbul office only', 'Scope: istanbul office only.', True),
        ('ห้ามแตะระบบจริง', 'ผู้ใช้สั่งว่าห้ามแตะระบบจริงเด็ดขาด', True),  # Thai: no spaces, no words to cut
        ('Pin Python to version 3', 'Pin Python to version 3.12 everywhere.', False),  # a number going on
        ('Pin Python to version 3.', 'Pin Python to version 3.12 everywhere.', False),  # ... after its full stop
        ('Cap the batch at 5', 'Cap the batch at 5,000 rows.', False),
        ('Cap the batch at 5', 'Cap the batch at 5, then stop.', True),
        ('Set MAX', 'Set MAX_RETRIES to 3.', False),
        ('port 80', 'xport 80', False),  # at the text's second character
        ('.5 s delay', 'use a 10.5 s delay', False),  # a number going on before the piece's point
        ('.5 s delay', 'use a .5 s delay', True),
        ('मत करो', 'उसने कहा: मत करोगे', False),  # a vowel sign goes on with its word (Hindi)
        ('मत करो', 'उसने कहा: मत करो।', True),
        ('Use the "blue" team', 'Use the \u201cblue\u201d team for ops.', True),  # typographic quotes
        ("Don't restart billing", 'Don\u2019t restart billing.', True),
        ('- Use lowercase ids.\n- Never touch prod.', 'Rules:\n* Use lowercase ids.\n\u2022 Never touch prod.', True),
        ('- Never touch prod.', 'Rule: never touch prod.', True),  # one item, its marker dropped
        ('- Use lowercase ids.\n- Never touch prod.', 'Rules: never touch prod.', False),  # an item missing
        ('Set the offset to - 5 degrees', 'Set the offset to 5 degrees.', False),  # a minus is no list marker
        ('Rules:\nReport a - b, never b - a', 'Rules: (all below)\n- Report a - b, never b - a', True),
    ],
)
def test_an_instruction_of_several_lines_is_held_line_by_line_in_order_as_whole_words(
    instruction: str, summary: str, held: bool
) -> None:
    # Each line anywhere passed summaries that said something else: `do not` and `5` are in almost any text.
    from pydantic_ai_compaction.processors.strategies.verified import _holds, _normalized  # pyright: ignore[reportPrivateUsage]

    assert _holds(_normalized(summary), instruction) is held


def test_a_cut_instruction_s_last_word_may_go_on_in_the_summary() -> None:
    # `Reassert` cuts mid-word (`prod` of `production`): the summary quoting the whole change held no whole `prod`.
    from pydantic_ai_compaction.processors.strategies.verified import _holds, _normalized  # pyright: ignore[reportPrivateUsage]

    summary = _normalized('Rules: Use lowercase ids. Never touch production.')
    assert _holds(summary, 'Use lowercase ids.\nNever touch prod', cut=True)
    assert not _holds(summary, 'Use lowercase ids.\nNever touch prod')
    assert not _holds(summary, 'Use uppercase ids.\nNever touch prod', cut=True)


def test_a_change_reassert_restated_cut_is_checked_for_what_the_cut_keeps() -> None:
    # The restatement's record holds the cut text, mark included, which no summary quoting the change holds: every
    # compaction after the first failed `instructions` (appended the cut text, or fell back under `reject`).
    from pydantic_ai_compaction import Reassert

    long_change = 'CHANGE: report owners in uppercase and ' + 'also list every service name exactly as written ' * 3
    summary = f'Reports passed. {FACT_LINE}. {long_change}'
    markers = InstructionSources(markers=('CHANGE:',))
    events: list[CompactionEvent] = []
    inner = Verified(StatelessSummary(trigger=Trigger(tokens=450), keep_last=1), sources=markers, on_failure='reject')
    strategy = Reassert(inner, sources=markers, change_chars=60)
    inner.inner.observer = events.append
    agent = Agent(FunctionModel(Script(summary=lambda prompt: summary)), capabilities=[strategy], system_prompt=SYSTEM)

    @agent.tool_plain
    def read_report(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return report(index).replace(CHANGE, long_change)

    agent.run_sync('Audit reports 0-5.')
    records = [e.record for e in events if e.kind == 'compacted' and e.record is not None]
    assert len(records) >= 3 and any(record.restated for record in records)
    assert [(r.fallback_reason, r.extra['verification']['failed']) for r in records] == [(None, [])] * len(records)
