"""Compactor requests built from what the agent already sent (`StatelessSummary(request='sent')`,
`Fork(request='sent')`): the prefix is exactly an earlier request of the agent, so a provider's prompt cache
can serve it, and what stays verbatim anyway is not sent again."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import CompactionEvent, ConfigurationError, Fork, StatelessSummary, Trigger
from pydantic_ai_compaction.processors.strategies.fork import FORK_MARKER
from pydantic_ai_compaction.processors.strategies.summary import SUMMARY_MARKER, SUMMARY_SENT_PROMPT
from pydantic_ai_compaction.runtime import compactor, pairing_problems, segment
from pydantic_ai_compaction.runtime.segment import fragment

from .reliability import histories
from .support import fork_json, log_text

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '40'))
TRIGGER = Trigger(tokens=600)


@dataclass
class Call:
    kind: str
    messages: list[ModelMessage]
    info: AgentInfo


@dataclass
class Recorder:
    """Reads one log per step, then reports; records every request as the model received it."""

    logs: int = 9
    calls: list[Call] = field(default_factory=list[Call])

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        prompt = '\n'.join(str(p.content) for p in last.parts if isinstance(p, UserPromptPart))
        kind = 'fork' if FORK_MARKER in prompt else 'summary' if SUMMARY_MARKER in prompt else 'agent'
        self.calls.append(Call(kind, list(messages), info))
        if kind == 'fork':
            if 'variant=json' in prompt:
                return ModelResponse(parts=[TextPart(fork_json([]))])
            if 'variant=free' in prompt:
                return ModelResponse(parts=[TextPart('KEEP: none\nLogs read so far are clean.')])
        if kind != 'agent':
            return ModelResponse(parts=[TextPart('Logs read so far are clean; next: the following log.')])
        step = sum(call.kind == 'agent' for call in self.calls) - 1
        if step >= self.logs:
            return ModelResponse(parts=[TextPart('report: none found')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': step}, tool_call_id=f'c{step}')])


def run(capability: Any) -> tuple[Recorder, list[CompactionEvent]]:
    recorder = Recorder()
    agent = Agent(FunctionModel(recorder), capabilities=[capability], instructions='You audit logs.')

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        return log_text(index, 40)

    agent.run_sync('Audit logs 0-8 and report the incident ids.')
    return recorder, []


def same_request(sent: list[ModelMessage], earlier: list[ModelMessage], *, prefix: bool = False) -> bool:
    """Whether *sent* is *earlier* (or, with *prefix*, its beginning) part for part, in the same order."""
    flat = [part for message in sent for part in message.parts]
    before = [part for message in earlier for part in message.parts]
    if prefix:
        before = before[: len(flat)]
    return len(flat) == len(before) and all(a is b or a == b for a, b in zip(flat, before, strict=True))


SENT = {
    'summary': lambda: StatelessSummary[None](trigger=TRIGGER, request='sent'),
    'fork-json': lambda: Fork[None](trigger=TRIGGER, variant='json', request='sent'),
    'fork-free': lambda: Fork[None](trigger=TRIGGER, variant='free', request='sent'),
    'fork-fixed': lambda: Fork[None](trigger=TRIGGER, variant='fixed', request='sent'),
    'summary-keep-last': lambda: StatelessSummary[None](trigger=TRIGGER, request='sent', keep_last=1),
}
LEAVE_OUT_KEPT = ('fork-fixed', 'summary-keep-last')
"""Options that also leave out exchanges they keep besides the one in progress."""


@pytest.mark.parametrize('name', list(SENT))
def test_the_compactor_request_is_an_earlier_agent_request_then_the_prompt(name: str) -> None:
    recorder, _ = run(SENT[name]())
    compactions = [index for index, call in enumerate(recorder.calls) if call.kind != 'agent']
    assert len(compactions) >= 2, [call.kind for call in recorder.calls]
    for index in compactions:
        call = recorder.calls[index]
        last = call.messages[-1]
        prompt = last.parts[-1]
        assert isinstance(last, ModelRequest) and isinstance(prompt, UserPromptPart)
        prefix = [*call.messages[:-1], ModelRequest(parts=list(last.parts[:-1]))]
        earlier = [c for c in recorder.calls[:index] if c.kind == 'agent']
        # The compactor's prefix is one of the agent's own earlier requests, exactly: instructions, tool
        # definitions and messages.
        # (`fixed` and `keep_last` leave out the exchanges they keep too: that prefix was sent as the beginning of
        # a request.)
        matches = [c for c in earlier if same_request(prefix, c.messages, prefix=name in LEAVE_OUT_KEPT)]
        assert matches, f'{name}: the request before the prompt matches no earlier agent request'
        match = matches[-1]
        assert call.info.instructions == match.info.instructions == 'You audit logs.'
        assert [t.name for t in call.info.function_tools] == [t.name for t in match.info.function_tools]
        assert call.info.model_settings is not None and call.info.model_settings.get('tool_choice') == 'none'
        # The newest result, which the compaction keeps verbatim, is not in it: the agent's next request
        # (after the compaction) is the first to send it.
        after = recorder.calls[index + 1]
        newest = after.messages[-1].parts
        assert after.kind == 'agent' and not any(part in newest for message in call.messages for part in message.parts)
        if name not in LEAVE_OUT_KEPT:
            assert match is earlier[-1]
        else:
            assert not same_request(prefix, earlier[-1].messages)
    if name.startswith('summary'):
        assert all(recorder.calls[i].messages[-1].parts[-1].content == SUMMARY_SENT_PROMPT for i in compactions)  # pyright: ignore[reportAttributeAccessIssue]


@pytest.mark.parametrize('name', list(SENT))
def test_a_sent_compaction_keeps_what_it_did_not_send_and_drops_what_it_summarized(name: str) -> None:
    events: list[CompactionEvent] = []
    capability = SENT[name]()
    capability.observer = events.append
    recorder = Recorder()
    agent = Agent(FunctionModel(recorder), capabilities=[capability], instructions='You audit logs.')

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        return log_text(index, 40)

    result = agent.run_sync('Audit logs 0-8 and report the incident ids.')
    assert result.output == 'report: none found'
    compacted = [e for e in events if e.kind == 'compacted' and e.record is not None]
    assert len(compacted) >= 2
    for event in compacted:
        record = event.record
        assert record is not None and record.fallback_reason is None, record
        if name.startswith('summary'):
            assert record.variant == 'sent'
        assert pairing_problems(list(event.history)) == []
        # The newest result, which the compactor did not read, is in the compacted history verbatim.
        last = event.history[-1]
        assert isinstance(last, ModelRequest) and any(p.part_kind == 'tool-return' for p in last.parts)


@settings(max_examples=EXAMPLES, deadline=None)
@given(histories(), st.integers(0, 12), st.booleans())
def test_sent_prefix_is_the_exchanges_before_the_cut_exactly(
    history: list[ModelMessage], trailing: int, forced_only: bool
) -> None:
    view = segment(history)
    tail = {exchange.id for exchange in view.exchanges[len(view.exchanges) - trailing :]} if trailing else set[str]()

    def stays(exchange: Any) -> bool:
        return exchange.forced if forced_only else exchange.id in tail

    prefix = compactor.sent_prefix(view, stays)
    cut = len(view.exchanges)
    while cut and stays(view.exchanges[cut - 1]):
        cut -= 1
    # Fresh computation: every part of the exchanges before the cut, in history order, as the same objects.
    expected = [
        part
        for exchange in view.exchanges[:cut]
        for ref in exchange.refs
        for part in fragment(view.messages, ref).parts
    ]
    got = [part for message in prefix for part in message.parts]
    assert len(got) == len(expected) and all(a is b for a, b in zip(got, expected, strict=True))
    # Whole messages are the history's own objects, so nothing already sent is rebuilt.
    whole = sum(1 for message in prefix if any(message is original for original in view.messages))
    assert whole >= len(prefix) - 1
    if cut == len(view.exchanges):
        assert prefix == list(view.messages)
    if cut and prefix:
        assert pairing_problems(compactor.with_appended_prompt(prefix, 'summarize')) == []


def test_sent_options_are_validated() -> None:
    with pytest.raises(ConfigurationError, match=r"StatelessSummary\.request must be one of 'transcript', 'sent'"):
        StatelessSummary(request='cached')  # pyright: ignore[reportArgumentType]
    with pytest.raises(ConfigurationError, match=r"Fork\.request must be one of 'next', 'sent'"):
        Fork(request=True)  # pyright: ignore[reportArgumentType]
    for name, kwargs in (
        ('model', {'model': 'test'}),
        ('max_transcript_tokens', {'max_transcript_tokens': 5_000}),
        ('instructions', {'instructions': 'Summarize.'}),
    ):
        with pytest.raises(ConfigurationError, match=rf"StatelessSummary\.{name} does not apply with request='sent'"):
            StatelessSummary(request='sent', **kwargs)
    assert StatelessSummary(request='sent').request == 'sent'


# --- The transcript renders only what it sends ------------------------------------------------------------


def transcript_of_every_exchange(
    view: Any, exchanges: list[Any], budget: int
) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """The fresh computation: every exchange rendered and measured, then the newest that fit chosen."""
    from pydantic_ai_compaction.runtime.transcript import render_messages
    from pydantic_ai_compaction.runtime.trigger import text_tokens

    rendered = [render_messages(view.messages_of(exchange)) for exchange in exchanges]
    sizes = [text_tokens(text) for text in rendered]
    chosen = used = 0
    for size in reversed(sizes):
        if chosen and used + size > budget:
            break
        chosen += 1
        used += size
    first = len(exchanges) - chosen
    pieces: list[str] = []
    cut: list[str] = []
    for exchange, text, size in zip(exchanges[first:], rendered[first:], sizes[first:], strict=True):
        if size > budget:
            keep_chars = max(1, len(text) * budget // max(size, 1))
            text = (
                f'[… the first {len(text) - keep_chars:,} characters of this exchange are cut …]\n{text[-keep_chars:]}'
            )
            cut.append(exchange.id)
        pieces.append(text)
    return '\n'.join(pieces), tuple(exchange.id for exchange in exchanges[:first]), tuple(cut)


@settings(max_examples=EXAMPLES, deadline=None)
@given(histories(), st.integers(20, 1_500))
def test_the_bounded_transcript_is_the_one_rendering_every_exchange_gives(
    history: list[ModelMessage], budget: int
) -> None:
    from pydantic_ai_compaction.processors.strategies.summary import bounded_transcript

    view = segment(history)
    exchanges = [exchange for exchange in view.exchanges if not exchange.forced]
    transcript, left_out, cut = bounded_transcript(view, exchanges, budget)
    expected, expected_left_out, expected_cut = transcript_of_every_exchange(view, exchanges, budget)
    assert (left_out, cut) == (expected_left_out, expected_cut)
    if left_out:
        note, _, body = transcript.partition('\n')
        tokens = sum(exchange.tokens for exchange in exchanges if exchange.id in left_out)
        assert note.startswith(f'[{len(left_out)} earlier exchange(s) (') and f'about {tokens:,} tokens' in note
        assert body == expected
    else:
        assert transcript == expected


# --- The fork's listing reads parts in place --------------------------------------------------------------


def described_from_fragments(view: Any, exchange: Any, limit: int = 100) -> str:
    """The fresh computation: `describe` over the exchange's fragment messages, one filter per kind of part."""
    from pydantic_ai.messages import CompactionPart, ToolReturnPart

    from pydantic_ai_compaction.runtime.encoding import args_text
    from pydantic_ai_compaction.runtime.pins import is_pinned
    from pydantic_ai_compaction.runtime.transcript import clip, user_text

    messages = view.messages_of(exchange)
    calls = [p for m in messages if not isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolCallPart)]
    returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
    if exchange.kind == 'boundary':
        summaries = [
            p.content or '(opaque provider compaction)'
            for m in messages
            for p in m.parts
            if isinstance(p, CompactionPart)
        ]
        return 'earlier compaction: ' + clip(' '.join(summaries), limit)
    if exchange.kind == 'restatement':
        return 'restated instructions'
    if calls:
        sizes = {p.tool_call_id: len(p.model_response_str()) for p in returns}
        rendered = ', '.join(
            f'{c.tool_name}({clip(args_text(c.args), 60)}) → {sizes.get(c.tool_call_id, 0):,} chars' for c in calls
        )
        return clip(rendered, limit)
    prompts = [
        user_text(p) for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)
    ]
    if exchange.kind in ('opening', 'turn') and prompts:
        pinned = any(is_pinned(p) for m in messages for p in m.parts)
        return ('pinned: ' if pinned else 'user: ') + clip(' '.join(prompts), limit)
    texts = [p.content for m in messages for p in m.parts if isinstance(p, TextPart)]
    return 'assistant: ' + clip(' '.join(texts), limit)


@settings(max_examples=EXAMPLES, deadline=None)
@given(histories())
def test_the_listing_describes_each_exchange_as_its_fragments_do(history: list[ModelMessage]) -> None:
    from pydantic_ai.messages import ToolReturnPart

    from pydantic_ai_compaction.runtime.transcript import describe, return_text

    view = segment(history)
    for exchange in view.exchanges:
        assert describe(view, exchange) == described_from_fragments(view, exchange)
    for message in history:
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                assert return_text(part) == part.model_response_str()
