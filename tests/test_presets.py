"""Presets: each one runs in a real agent over a long tool loop, compacts, and keeps what its table row says."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import CompactionEvent, ConfigurationError, StatelessSummary, Tiered, presets
from pydantic_ai_compaction.presets import KeepWithin
from pydantic_ai_compaction.processors.strategies.summary import SUMMARY_MARKER
from pydantic_ai_compaction.processors.strategies.verified import APPENDIX_HEADER, VERIFY_MARKER, Verified
from pydantic_ai_compaction.processors.views.tiered import HANDOFF_MARKER
from pydantic_ai_compaction.runtime.transcript import user_text

WINDOW = 4_000
SUMMARY = 'SUMMARY: logs read, all checks passed.'
ASK = re.compile(r'logs (\d+)-(\d+)')


def log_body(index: int) -> str:
    """About 315 estimated tokens; every line names its log, so what stays verbatim can be read off the request."""
    return '\n'.join(f'log {index} line {line} check alpha passed value={line * 7}' for line in range(30))


@dataclass
class Loop:
    """Reads the logs the latest user prompt asks for (`logs A-B`), one per step; compaction calls get replies."""

    check_reply: str = '{"omitted": []}'
    agent_calls: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])
    compactor_calls: list[str] = field(default_factory=list[str])
    next: int = 0
    end: int = -1

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = '\n'.join(user_text(p) for p in messages[-1].parts if isinstance(p, UserPromptPart))
        if VERIFY_MARKER in prompt:
            self.compactor_calls.append('check')
            return ModelResponse(parts=[TextPart(self.check_reply)])
        if SUMMARY_MARKER in prompt or HANDOFF_MARKER in prompt:
            self.compactor_calls.append('summary')
            return ModelResponse(parts=[TextPart(SUMMARY)])
        self.agent_calls.append(list(messages))
        if (ask := ASK.search(prompt)) is not None:
            self.next, self.end = int(ask.group(1)), int(ask.group(2))
        if self.next > self.end:
            return ModelResponse(parts=[TextPart('done')])
        index = self.next
        self.next += 1
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': index}, tool_call_id=f'c{index}')])


def agent(loop: Loop, capabilities: list[Any]) -> Agent[None, str]:
    built = Agent(FunctionModel(loop), capabilities=capabilities, system_prompt='You audit logs.')

    @built.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        return log_body(index)

    return built


def observe(capabilities: list[Any]) -> list[CompactionEvent]:
    """Attach one observer to every strategy of a preset (views report nothing)."""
    events: list[CompactionEvent] = []
    for capability in capabilities:
        strategy = capability
        while isinstance(strategy, KeepWithin | Verified):
            strategy = strategy.inner  # pyright: ignore[reportUnknownMemberType]
        if isinstance(strategy, StatelessSummary):
            strategy.observer = events.append
    return events


def sent(messages: list[ModelMessage]) -> str:
    """Everything the model read in a request, as text."""
    pieces: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                pieces.append(user_text(part))
            elif isinstance(part, ToolReturnPart):
                pieces.append(part.model_response_str())
            elif isinstance(part, CompactionPart):
                pieces.append(part.content or '')
    return '\n'.join(pieces)


def verbatim_logs(messages: list[ModelMessage]) -> list[int]:
    """Indices of the logs whose full output the request carries."""
    return sorted(
        int(match.group(1))
        for message in messages
        for part in message.parts
        if isinstance(part, ToolReturnPart)
        and (match := re.match(r'log (\d+) line 0 ', part.model_response_str())) is not None
        and part.model_response_str() == log_body(int(match.group(1)))
    )


def first_after(loop: Loop, predicate: Any) -> list[ModelMessage]:
    return next(call for call in loop.agent_calls if predicate(call))


def has_boundary(messages: list[ModelMessage]) -> bool:
    return any(isinstance(part, CompactionPart) for message in messages for part in message.parts)


def test_codex_keeps_the_users_messages_and_summarizes_everything_else() -> None:
    capabilities = presets.codex(context_window=WINDOW, user_message_tokens=200)
    events = observe(capabilities)
    loop = Loop()
    run = agent(loop, capabilities)
    history = run.run_sync('Audit logs 0-3. FIRST-ASK').all_messages()
    history = run.run_sync('Now logs 4-7. SECOND-ASK', message_history=history).all_messages()
    run.run_sync('Now logs 8-19. THIRD-ASK', message_history=history)
    compacted = [event for event in events if event.kind == 'compacted']
    assert compacted
    after = first_after(loop, has_boundary)
    text = sent(after)
    # Every user message is still there word for word; no tool output read before the compaction is.
    for ask in ('Audit logs 0-3. FIRST-ASK', 'Now logs 4-7. SECOND-ASK', 'Now logs 8-19. THIRD-ASK'):
        assert ask in text
    assert SUMMARY in text
    # Of the logs, only the one in progress is in the request: it was read after the compaction was decided.
    assert len(verbatim_logs(after)) == 1 and f'log {verbatim_logs(after)[0]} line 0' in sent(after[-1:])
    record = compacted[0].record
    assert record is not None and record.strategy == 'summary'
    assert record.extra['kept_by_budget']  # the earlier user turns, kept by the 200-token budget


def test_codex_user_budget_of_zero_keeps_only_the_opening() -> None:
    capabilities = presets.codex(context_window=WINDOW, user_message_tokens=0)
    loop = Loop()
    run = agent(loop, capabilities)
    history = run.run_sync('Audit logs 0-3. FIRST-ASK').all_messages()
    history = run.run_sync('Now logs 4-7. SECOND-ASK', message_history=history).all_messages()
    run.run_sync('Now logs 8-19. THIRD-ASK', message_history=history)
    text = sent(first_after(loop, has_boundary))
    assert 'FIRST-ASK' in text  # the opening is never dropped
    assert 'SECOND-ASK' not in text


def test_opencode_prunes_old_tool_outputs_then_summarizes_keeping_a_recent_tail() -> None:
    capabilities = presets.opencode(
        context_window=WINDOW,
        reserve_tokens=2_800,
        prune_protect_tokens=600,
        prune_minimum_tokens=200,
        keep_results=3,
        preserve_recent_tokens=700,
    )
    events = observe(capabilities)
    loop = Loop()
    agent(loop, capabilities).run_sync('Audit logs 0-15.')
    # Pruning first: older outputs become one-line stubs, the three newest stay.
    pruned = first_after(loop, lambda call: '[cleared: ' in sent(call))
    kept = verbatim_logs(pruned)
    assert len(kept) == 3 and kept == list(range(kept[0], kept[0] + 3))
    assert '[cleared: 1,262 chars, began "log 0 line 0 ' in sent(pruned)
    # Then the summary: the newest exchanges within 700 tokens (two logs) stay verbatim, then the one in progress.
    compacted = [event for event in events if event.kind == 'compacted']
    assert compacted
    history = list(compacted[0].history)
    assert SUMMARY in sent(history)
    tail = verbatim_logs(history)
    assert tail == [tail[0], tail[0] + 1, tail[0] + 2] and tail[0] > 0


def test_pi_summarizes_into_an_updated_note_and_keeps_the_newest_tokens() -> None:
    capabilities = presets.pi(context_window=WINDOW, reserve_tokens=800, keep_recent_tokens=700)
    loop = Loop()
    result = agent(loop, capabilities).run_sync('Audit logs 0-19.')
    assert loop.compactor_calls.count('summary') >= 2  # the note was written, then updated
    after = first_after(loop, has_boundary)
    text = sent(after)
    assert 'Handoff note' in text and SUMMARY in text
    newest = verbatim_logs(after)
    assert 1 <= len(newest) <= 2 and 0 not in newest
    # A request-only view: like pi's session file, the persisted history still holds every log.
    assert verbatim_logs(result.all_messages()) == list(range(20))


def test_gemini_cli_snapshot_is_checked_by_a_second_pass_and_omissions_appended() -> None:
    omitted = 'log 1 line 4 check alpha passed value=28'
    capabilities = presets.gemini_cli(context_window=WINDOW)
    events = observe(capabilities)
    loop = Loop(check_reply=json.dumps({'omitted': [omitted]}))
    agent(loop, capabilities).run_sync('Audit logs 0-11.')
    assert loop.compactor_calls[:2] == ['summary', 'check']
    compacted = [event for event in events if event.kind == 'compacted']
    assert compacted
    record = compacted[0].record
    assert record is not None
    assert record.extra['verification']['omissions'] == [omitted]
    history = list(compacted[0].history)
    assert f'{APPENDIX_HEADER}\n- {omitted}' in sent(history)
    # The newest 30 % of the history stays verbatim: about a third of the logs read by then.
    kept = verbatim_logs(history)
    assert kept and kept == list(range(kept[0], kept[-1] + 1)) and 0 not in kept


def test_openhands_keeps_the_first_events_and_the_newest_half() -> None:
    capabilities = presets.openhands(context_window=WINDOW, max_size=12, keep_first=1)
    events = observe(capabilities)
    loop = Loop()
    agent(loop, capabilities).run_sync('Audit logs 0-9.')
    compacted = [event for event in events if event.kind == 'compacted']
    assert compacted
    history = list(compacted[0].history)
    kept = verbatim_logs(history)
    # keep_first=1: log 0's exchange; the tail: 12 // 2 - 1 - 1 = 4 messages, two tool exchanges; then the
    # exchange in progress.
    assert kept[0] == 0 and kept[1:] == [kept[1], kept[1] + 1, kept[1] + 2] and kept[1] > 1
    assert SUMMARY in sent(history)


def test_claude_code_clears_old_tool_results_and_compacts_near_the_window() -> None:
    # The summary threshold is lowered (a user's tweak): clearing alone keeps this short loop under 96.7 %.
    capabilities = presets.claude_code(
        context_window=WINDOW, auto_compact_fraction=0.3, clear_trigger_tokens=1_000, keep_tool_uses=3
    )
    events = observe(capabilities)
    loop = Loop()
    agent(loop, capabilities).run_sync('Audit logs 0-15.')
    cleared = first_after(loop, lambda call: '[cleared: ' in sent(call))
    assert len(verbatim_logs(cleared)) == 3
    compacted = [event for event in events if event.kind == 'compacted']
    assert compacted
    record = compacted[0].record
    assert record is not None and record.trigger_tokens is not None
    assert record.trigger_tokens > 0.3 * WINDOW
    # Nothing finished is kept verbatim by the summary: only the opening and the exchange in progress.
    assert len(verbatim_logs(list(compacted[0].history))) <= 1


@pytest.mark.parametrize('name', ['codex', 'opencode', 'pi', 'gemini_cli', 'openhands', 'claude_code'])
def test_every_preset_is_ordinary_capabilities_a_user_can_tweak(name: str) -> None:
    capabilities = getattr(presets, name)(context_window=200_000)
    assert capabilities and all(dataclasses.is_dataclass(c) for c in capabilities)
    views = [c for c in capabilities if isinstance(c, Tiered)]
    # Strategies first, then views: a view must not be saved as the persisted history.
    assert capabilities[len(capabilities) - len(views) :] == views


def test_preset_defaults_are_the_published_values() -> None:
    (codex,) = presets.codex(context_window=200_000)
    assert isinstance(codex, KeepWithin) and codex.user_tokens == 20_000
    assert codex.runtime.trigger.token_limit(None) == 180_000
    opencode, prune = presets.opencode(context_window=200_000)
    assert isinstance(opencode, KeepWithin) and opencode.recent_tokens == 15_000
    assert opencode.runtime.trigger.token_limit(None) == 180_000
    assert isinstance(prune, Tiered) and prune.clear_min_saving == 0.1 and prune.clear_at == 0.3
    (pi,) = presets.pi(context_window=200_000)
    assert isinstance(pi, Tiered) and pi.summarize_at == (200_000 - 16_384) / 200_000 and pi.summarize_to == 0.1
    (gemini,) = presets.gemini_cli(context_window=1_000_000)
    assert isinstance(gemini, Verified) and 'omissions' in gemini.checks
    assert gemini.runtime.trigger.token_limit(None) == 500_000
    (openhands,) = presets.openhands(context_window=200_000)
    assert isinstance(openhands, KeepWithin) and (openhands.first, openhands.recent_messages) == (4, 55)
    assert openhands.runtime.trigger.messages == 120
    summary, clearing = presets.claude_code(context_window=200_000)
    assert isinstance(summary, StatelessSummary) and summary.trigger.token_limit(None) == 193_400
    assert isinstance(clearing, Tiered) and (clearing.clear_at, clearing.keep_results) == (0.5, 3)


@pytest.mark.parametrize(
    ('call', 'message'),
    [
        (lambda: presets.codex(context_window=10), 'codex.context_window'),
        (lambda: presets.opencode(context_window=10_000, reserve_tokens=10_000), 'reserve_tokens=10000'),
        (lambda: presets.pi(context_window=30_000, keep_recent_tokens=20_000), 'pi: keep_recent_tokens=20000'),
        (lambda: presets.openhands(context_window=10_000, max_size=8, keep_first=3), 'openhands: keep_first=3'),
        (lambda: presets.gemini_cli(context_window=10_000, threshold=1.5), 'gemini_cli.threshold'),
    ],
)
def test_bad_preset_settings_name_the_parameter(call: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        call()


@pytest.mark.bench
def test_the_benchmark_presets_group_expands_and_every_preset_builds_at_the_benchmark_window() -> None:
    from pydantic_ai_compaction_bench import strategies

    assert strategies.expand(['native', 'presets', 'native']) == ['native', *strategies.PRESETS]
    config = strategies.StrategyConfig(trigger_tokens=18_000)
    for name in (*strategies.PRESETS, *strategies.VERIFIED):
        assert strategies.build(name, config), name
        assert strategies.settings(name, config), name
    # Absolute budgets are scaled from a 200K window to the benchmark's 36K: pi's tail fits under its trigger.
    (pi,) = strategies.build('preset-pi', config)
    assert isinstance(pi, Tiered) and pi.summarize_to == 0.1 and pi.summarize_at == (36_000 - 2_949) / 36_000


def test_the_docs_examples_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    monkeypatch.setenv('OPENAI_API_KEY', 'not-used')  # the example builds the model; nothing is sent
    docs = Path(__file__).parent.parent / 'docs'
    for name in ('presets.md', 'verification.md'):
        blocks = re.findall(r'```python\n(.*?)```', (docs / name).read_text(), re.DOTALL)
        assert blocks, name
        namespace: dict[str, object] = {'__name__': f'docs_{name}'}
        for block in blocks:
            exec(compile(block, name, 'exec'), namespace)


@pytest.mark.bench
def test_wilson_interval_contains_the_observed_rate() -> None:
    # Found running `bench recall --summary-budget 60`: every run failed, and the pass-rate plot raised
    # "'yerr' must not contain negative values" after the records were written.
    from pydantic_ai_compaction_bench.stats import wilson_interval

    for passed, runs in ((0, 5), (5, 5), (0, 9), (3, 7)):
        low, high = wilson_interval(passed, runs)
        assert low <= passed / runs <= high, (passed, runs, low, high)


@settings(max_examples=int(os.environ.get('PAC_EXAMPLES', '25')), deadline=None)
@given(steps=st.integers(1, 8), tokens=st.integers(0, 3_000), messages=st.integers(0, 12), first=st.integers(0, 3))
def test_keep_within_keeps_only_finished_exchanges_within_each_budget(
    steps: int, tokens: int, messages: int, first: int
) -> None:
    from pydantic_ai_compaction.runtime.segment import segment

    from .support import recorded_history

    view = segment(recorded_history(steps, lines=20))
    finished = [exchange for exchange in view.exchanges if not exchange.forced]
    by_tokens = KeepWithin(StatelessSummary(), recent_tokens=tokens).kept(view)
    by_messages = KeepWithin(StatelessSummary(), recent_messages=messages).kept(view)
    by_first = KeepWithin(StatelessSummary(), first=first).kept(view)
    for kept in (by_tokens, by_messages, by_first):
        assert set(kept) <= {exchange.id for exchange in finished}
    # The newest exchanges, as many as fit: a suffix of the finished ones.
    assert list(by_tokens) == [e.id for e in finished[len(finished) - len(by_tokens) :]]
    assert sum(view.by_id[i].tokens for i in by_tokens) <= tokens
    if len(by_tokens) < len(finished):
        assert sum(e.tokens for e in finished[len(finished) - len(by_tokens) - 1 :]) > tokens
    assert sum(len(view.by_id[i].refs) for i in by_messages) <= messages
    assert list(by_first) == [e.id for e in finished[:first]]


def test_wrappers_act_when_their_inner_strategy_acts() -> None:
    # A wrapper changes what its inner strategy proposes, never whether it acts: a baseline that only records
    # crossings stays a baseline when wrapped.
    from pydantic_ai_compaction import InstructionSources, NoCompaction, Reassert, StatelessSummary, Verified
    from pydantic_ai_compaction.presets import KeepWithin

    sources = InstructionSources(markers=('CHANGE:',))
    for inner, acts in ((NoCompaction(), False), (StatelessSummary(), True)):
        for wrapper in (KeepWithin(inner, first=1), Verified(inner), Reassert(inner, sources=sources)):
            assert wrapper.acts_on_crossing is acts, (type(wrapper).__name__, type(inner).__name__)
            assert wrapper.runtime == inner.runtime


def test_preset_parameters_are_checked_under_their_own_names() -> None:
    from pydantic_ai_compaction.presets import gemini_cli, opencode

    # A recent tail as large as what the trigger allows would keep everything verbatim: compaction "on",
    # the request growing past the window.
    with pytest.raises(ConfigurationError, match=r'opencode: preserve_recent_tokens=50000 must be below'):
        opencode(context_window=30_000, reserve_tokens=20_000, preserve_recent_tokens=50_000)
    # The caller's parameter is named, not the primitive the preset builds on.
    with pytest.raises(ConfigurationError, match=r'gemini_cli: preserve_fraction must be below 1'):
        gemini_cli(context_window=100_000, preserve_fraction=1.0)


PROMPTED_PRESETS: dict[str, Callable[[], list[Any]]] = {
    'codex': lambda: presets.codex(context_window=WINDOW, user_message_tokens=200),
    'opencode': lambda: presets.opencode(
        context_window=WINDOW,
        reserve_tokens=2_800,
        prune_protect_tokens=600,
        prune_minimum_tokens=200,
        keep_results=3,
        preserve_recent_tokens=700,
    ),
    'pi': lambda: presets.pi(context_window=WINDOW, reserve_tokens=800, keep_recent_tokens=700),
    'gemini_cli': lambda: presets.gemini_cli(context_window=WINDOW),
    'openhands': lambda: presets.openhands(context_window=WINDOW, max_size=12, keep_first=1),
    'claude_code': lambda: presets.claude_code(
        context_window=WINDOW, auto_compact_fraction=0.3, clear_trigger_tokens=1_000, keep_tool_uses=3
    ),
}
"""Each preset configured so that the loop below makes its compactor run."""


@pytest.mark.parametrize('name', list(PROMPTED_PRESETS))
def test_every_preset_prompt_sent_to_a_model_is_snapshotted(name: str, compaction_snapshot: Any) -> None:
    # The first call of each kind the preset's compactor makes: instructions and prompt, exactly as sent. A change
    # of brief, or a brief a model would copy literally, shows up in review.
    loop = Loop()
    sent_prompts: dict[str, str] = {}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = '\n'.join(user_text(p) for p in messages[-1].parts if isinstance(p, UserPromptPart))
        for marker in (VERIFY_MARKER, SUMMARY_MARKER, HANDOFF_MARKER):
            if marker in prompt:
                sent_prompts.setdefault(marker, f'=== instructions ===\n{info.instructions}\n=== prompt ===\n{prompt}')
        return loop(messages, info)

    built = Agent(FunctionModel(model), capabilities=PROMPTED_PRESETS[name](), system_prompt='You audit logs.')

    @built.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        return log_body(index)

    built.run_sync('Audit logs 0-15.')
    assert sent_prompts, f'{name}: its compactor never ran'
    assert '\n\n'.join(sent_prompts[marker] for marker in sorted(sent_prompts)) == compaction_snapshot
