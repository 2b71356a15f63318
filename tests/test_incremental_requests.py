"""Per-request paths read only what is new, and give exactly what a reading of the whole history gives.

Each test grows a history request by request, as a run does, with the edits a run sees between requests (the
decided history saved or refused, a result numbered at the end, a compaction, a truncated or copied history),
and compares every request's answer with the from-scratch computation.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from pydantic_ai_compaction import ForgetReasoning
from pydantic_ai_compaction.processors.memory import recall as recall_module
from pydantic_ai_compaction.processors.memory.recall import Recall
from pydantic_ai_compaction.processors.views import forget as forget_module
from pydantic_ai_compaction.processors.views.forget import context_text, reasoning_decision
from pydantic_ai_compaction.runtime import tokens as tokens_module
from pydantic_ai_compaction.runtime.segment import is_restatement, tool_content_parts
from pydantic_ai_compaction.runtime.stores.memory import InMemoryArchiveStore
from pydantic_ai_compaction.runtime.tokens import estimate_context_tokens

from .reliability import histories

EXAMPLES = settings(
    max_examples=int(os.environ.get('PAC_EXAMPLES', '25')), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

ACTIONS = st.sampled_from(['save', 'save', 'save', 'save', 'refuse', 'number', 'truncate', 'compact', 'copy'])
"""What happens to the history between two requests (a run mostly saves what the hook returned)."""


def copied(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The same history as new message and part objects: nothing remembered about the old ones applies."""
    return [replace(m, parts=[replace(p) for p in m.parts]) for m in messages]  # pyright: ignore[reportArgumentType]


def between(action: str, saved: list[ModelMessage], sent: list[ModelMessage], cut: int) -> list[ModelMessage]:
    """The history the next request starts from: *saved* is what the hook returned, *sent* what it was given."""
    if action == 'refuse':
        return sent
    if action == 'number' and saved and isinstance(saved[-1], ModelRequest):
        # Archive numbers the newest results after this hook ran: the last message is replaced by a copy.
        last = saved[-1]
        return [*saved[:-1], replace(last, parts=[replace(p) for p in last.parts])]
    if action == 'truncate':
        return saved[: max(1, min(cut, len(saved)))]
    if action == 'compact' and len(saved) > 3:
        # A summary in place of older messages (at least two: what follows moves), the rest kept as they were.
        keep = max(3, min(cut, len(saved) - 1))
        return [saved[0], ModelRequest(parts=[CompactionPart(content='summary of earlier work')]), *saved[keep:]]
    if action == 'copy':
        return copied(saved)
    return saved


# --- ForgetReasoning.decide -------------------------------------------------------------------------------------


def decide_whole(capability: ForgetReasoning[None], messages: list[ModelMessage]) -> list[ModelMessage] | None:
    """The decision as made before it was incremental: every message read on every request."""
    last_prompt = max(
        (
            index
            for index, message in enumerate(messages)
            if isinstance(message, ModelRequest)
            and any(
                isinstance(p, UserPromptPart) and not is_restatement(p) and at not in tool_content_parts(message)
                for at, p in enumerate(message.parts)
            )
        ),
        default=-1,
    )
    # The last response, when it made calls, is the tool loop a provider sees running even after a new prompt.
    last_response = max((i for i, m in enumerate(messages) if isinstance(m, ModelResponse)), default=-1)
    results_of: dict[str, ToolReturnPart] = {}
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    results_of[part.tool_call_id] = part
    out = list(messages)
    changed = False
    for index, message in enumerate(messages):
        if not isinstance(message, ModelResponse) or reasoning_decision(message) in ('kept', 'dropped', 'scored'):
            continue
        if index + 1 >= len(messages):
            continue
        calls = [p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)]
        if any(call not in results_of for call in calls):
            continue
        # A call's result is the one in the requests right after its step; a result arriving later to that id
        # counts only when none came there (an id can be used again by a later step).
        answered: dict[str, ToolReturnPart] = {}
        for after in messages[index + 1 :]:
            if isinstance(after, ModelResponse):
                break
            for part in after.parts:
                if isinstance(part, ToolReturnPart):
                    answered.setdefault(part.tool_call_id, part)
        results = [answered.get(call) or results_of[call] for call in calls]
        thinking = [p for p in message.parts if isinstance(p, ThinkingPart)]
        decision = 'kept'
        extra: dict[str, object] = {}
        if capability.policy == 'score':
            # The conversation before the step as its own list: what the scorer saw before.
            before = out[:index]
            scored = capability._score(before, len(before), message) if thinking else None  # pyright: ignore[reportPrivateUsage]
            if scored is not None:
                parts, skipped, blocks = scored
                decision = 'scored'
                extra = {'skipped_blocks': skipped, 'blocks': blocks}
                message = replace(message, parts=parts)
        elif (
            thinking
            and len(thinking) < len(message.parts)
            and capability._should_drop(message, [r.outcome for r in results])  # pyright: ignore[reportPrivateUsage]
        ):
            decision = 'dropped'
            running = index > last_prompt or (index == last_response and bool(calls))
            if any(p.signature or p.id or p.provider_details for p in thinking) and running:
                decision = 'deferred'
        if decision == reasoning_decision(message):
            continue
        parts = (
            message.parts if decision != 'dropped' else [p for p in message.parts if not isinstance(p, ThinkingPart)]
        )
        marks = forget_module.MessageMarks(
            reasoning=decision,
            thinking_chars=sum(len(p.content) for p in thinking),
            output_tokens=message.usage.output_tokens,
            unsigned_thinking=decision == 'dropped'
            and not any(p.signature or p.id or p.provider_details for p in thinking),
        )
        metadata = marks.to_metadata(message.metadata)
        if extra:
            metadata = forget_module.with_ours(metadata, extra)
        out[index] = replace(message, parts=list(parts), metadata=metadata)
        changed = True
    return out if changed else None


@st.composite
def reasoning_steps(draw: Any) -> list[ModelMessage]:
    """Steps with thinking (signed or not), writes and reads that succeed, fail or are retried, results that
    arrive a step late or twice, and user turns."""
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('fix the bug')])]
    late: list[ToolReturnPart] = []
    for step in range(draw(st.integers(1, 12))):
        parts: list[ModelResponsePart] = []
        if draw(st.booleans()):
            parts.append(ThinkingPart(f'think {step}\n\nmore {step}', signature='sig' if draw(st.booleans()) else None))
        calls = [
            ToolCallPart(draw(st.sampled_from(['write_file', 'read'])), {'i': step}, tool_call_id=f'c{step}-{n}')
            for n in range(draw(st.integers(0, 2)))
        ]
        parts.extend(calls)
        if not calls or draw(st.integers(0, 3)) == 0:
            parts.append(TextPart(f'answer {step}'))
        messages.append(ModelResponse(parts=parts, model_name='gen'))
        returns: list[ToolReturnPart] = []
        for call in calls:
            outcome = draw(st.sampled_from(['success', 'success', 'failed', 'retried']))
            returned = ToolReturnPart(call.tool_name, f'out {step}', tool_call_id=call.tool_call_id, outcome=outcome)
            fate = draw(st.integers(0, 5))
            if fate == 0:
                late.append(returned)  # arrives with a later step
            else:
                returns.append(returned)
                if fate == 1:
                    late.append(replace(returned, outcome='success'))  # answered again later
        if late and draw(st.booleans()):
            returns.extend(late)
            late = []
        request_parts: list[Any] = list(returns)
        if not calls or draw(st.integers(0, 4)) == 0:
            request_parts.append(UserPromptPart(f'next {step}'))
        messages.append(ModelRequest(parts=request_parts))
    return messages


def scorer(context: str, blocks: list[str]) -> list[float]:
    # Depends on the context, so a wrong conversation-before-the-step shows as another choice of blocks.
    return [float((len(context) + len(block) * 7) % 11) for block in blocks]


def run_forget(history: list[ModelMessage], policy: str, actions: list[tuple[str, int]]) -> None:
    capability = ForgetReasoning[None](policy=policy, scorer=scorer, drop_share=0.5)  # pyright: ignore[reportArgumentType]
    reference = ForgetReasoning[None](policy=policy, scorer=scorer, drop_share=0.5)  # pyright: ignore[reportArgumentType]
    current: list[ModelMessage] = []
    for position, message in enumerate(history):
        sent = [*current, message]
        decided = capability.decide(sent)
        assert decided == decide_whole(reference, sent)
        action, cut = actions[position % len(actions)] if actions else ('save', 0)
        current = between(action, decided if decided is not None else sent, sent, cut)


@EXAMPLES
@given(
    reasoning_steps(),
    st.sampled_from(['drop', 'after_artifact', 'score', 'keep']),
    st.lists(st.tuples(ACTIONS, st.integers(0, 30)), max_size=8),
)
def test_forget_decides_each_request_as_a_reading_of_the_whole_history(
    history: list[ModelMessage], policy: str, actions: list[tuple[str, int]]
) -> None:
    run_forget(history, policy, actions)


@EXAMPLES
@given(
    histories(), st.sampled_from(['drop', 'after_artifact', 'score']), st.lists(st.tuples(ACTIONS, st.integers(0, 30)))
)
def test_forget_on_generated_histories_equals_the_whole_reading(
    history: list[ModelMessage], policy: str, actions: list[tuple[str, int]]
) -> None:
    run_forget(history, policy, actions)


@EXAMPLES
@given(histories(), st.integers(0, 40))
def test_the_scorer_context_is_read_back_from_the_step_only(history: list[ModelMessage], end: int) -> None:
    end = min(end, len(history))
    for limit in (10, 200, 4_000):
        assert forget_module._context_before(history, end, limit) == context_text(history[:end], limit)  # pyright: ignore[reportPrivateUsage]


def test_forget_reads_only_the_new_step_on_each_request() -> None:
    capability = ForgetReasoning[None](policy='drop')
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('go')])]
    starts: list[int] = []
    original = forget_module._Decided.rewind  # pyright: ignore[reportPrivateUsage]

    def spy(self: Any, messages: list[ModelMessage]) -> int:
        start = original(self, messages)
        starts.append(len(messages) - start)
        return start

    forget_module._Decided.rewind = spy  # pyright: ignore[reportPrivateUsage]
    try:
        for step in range(40):
            history.append(
                ModelResponse(parts=[ThinkingPart(f't{step}'), ToolCallPart('read', {}, tool_call_id=f'c{step}')])
            )
            history.append(ModelRequest(parts=[ToolReturnPart('read', 'ok', tool_call_id=f'c{step}')]))
            history = capability.decide(history) or history
    finally:
        forget_module._Decided.rewind = original  # pyright: ignore[reportPrivateUsage]
    assert starts[0] == 3  # the first request reads everything
    assert starts[1:] == [2] * 39  # every later one only the step it adds
    assert all(reasoning_decision(m) == 'dropped' for m in history if isinstance(m, ModelResponse))


# --- Recall ------------------------------------------------------------------------------------------------------


def pending_whole(recall: Recall[None], messages: list[ModelMessage]) -> list[tuple[str, object, ModelMessage, int]]:
    """Every part of the history not indexed yet, as read before it was incremental."""
    pending: list[tuple[str, object, ModelMessage, int]] = []
    for index, message in enumerate(messages):
        for part in message.parts:
            fingerprint = recall._fingerprint(part)  # pyright: ignore[reportPrivateUsage]
            if fingerprint is not None and fingerprint not in recall._indexed:  # pyright: ignore[reportPrivateUsage]
                pending.append((fingerprint, part, message, index))
    return pending


def calls_whole(
    messages: list[ModelMessage], pending: list[tuple[str, object, ModelMessage, int]]
) -> dict[int, object]:
    """For each tool result of the requests holding *pending* parts, by its `id`, the nearest call with its id before
    it, found by reading the whole history."""
    found: dict[int, object] = {}
    for index in sorted({at for *_, at in pending}):
        for result in messages[index].parts:
            if isinstance(result, ToolReturnPart):
                before = [
                    p
                    for m in messages[:index]
                    for p in m.parts
                    if isinstance(p, ToolCallPart) and p.tool_call_id == result.tool_call_id
                ]
                if before:
                    found[id(result)] = before[-1]
    return found


@EXAMPLES
@given(histories(), st.lists(st.tuples(ACTIONS | st.just('store fails'), st.integers(0, 30)), max_size=8))
def test_recall_indexes_each_request_as_a_reading_of_the_whole_history(
    history: list[ModelMessage], actions: list[tuple[str, int]]
) -> None:
    recall = Recall[None](store=InMemoryArchiveStore())
    whole = Recall[None](store=InMemoryArchiveStore())
    current: list[ModelMessage] = []
    for position, message in enumerate(history):
        sent = [*current, message]
        action, cut = actions[position % len(actions)] if actions else ('save', 0)
        pending, _ = recall._pending(sent)  # pyright: ignore[reportPrivateUsage]
        assert pending == pending_whole(recall, sent)
        assert recall_module._calls_of(sent, pending) == calls_whole(sent, pending)  # pyright: ignore[reportPrivateUsage]
        if action != 'store fails':  # a failed store leaves nothing remembered: the next request asks again
            recall.index('c', sent)
            whole._seen.clear()  # pyright: ignore[reportPrivateUsage]
            whole.index('c', sent)
        current = between(action, sent, sent, cut)
    assert recall.store._lines == whole.store._lines  # pyright: ignore[reportAttributeAccessIssue, reportPrivateUsage]


def test_recall_reads_only_the_new_step_on_each_request() -> None:
    recall = Recall[None](store=InMemoryArchiveStore())
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('go')])]
    read: list[int] = []
    for step in range(30):
        history = [
            *history,
            ModelResponse(parts=[ToolCallPart('grep', {'q': step}, tool_call_id=f'c{step}')]),
            ModelRequest(parts=[ToolReturnPart('grep', f'line {step}', tool_call_id=f'c{step}')]),
        ]
        _, start = recall._pending(history)  # pyright: ignore[reportPrivateUsage]
        read.append(len(history) - start)
        recall.index('c', history)
    assert read == [3] + [2] * 29
    hits = recall.store.search('c', 'line 29')
    assert [(hit.tool_name, hit.args) for hit in hits[:1]] == [('grep', '{"q":29}')]


# --- the trigger's anchored estimate -----------------------------------------------------------------------------


@st.composite
def anchored_histories(draw: Any) -> list[ModelMessage]:
    """Requests with or without instructions, responses with or without reported usage."""
    messages: list[ModelMessage] = []
    for step in range(draw(st.integers(1, 30))):
        instructions = draw(st.sampled_from([None, None, None, '', 'be brief', 'be thorough and cite lines']))
        messages.append(
            ModelRequest(parts=[UserPromptPart(f'ask {step} ' * draw(st.integers(1, 5)))], instructions=instructions)
        )
        usage = RequestUsage(input_tokens=draw(st.sampled_from([0, 10, 500])), output_tokens=draw(st.integers(0, 50)))
        messages.append(ModelResponse(parts=[TextPart(f'answer {step}')], usage=usage, model_name='gen'))
    return messages


def estimate_whole(messages: list[ModelMessage]) -> int:
    """The anchored estimate with the anchor's instructions read from a copy of everything before it."""
    anchor = tokens_module._latest_anchor(messages)  # pyright: ignore[reportPrivateUsage]
    if anchor is None:
        return estimate_context_tokens(messages)
    response = messages[anchor]
    assert isinstance(response, ModelResponse)
    anchored = tokens_module.context_input_tokens(response) + response.usage.output_tokens
    current = tokens_module._instructions(messages)  # pyright: ignore[reportPrivateUsage]
    then = tokens_module._instructions(messages[: anchor + 1])  # pyright: ignore[reportPrivateUsage]
    if current != then:
        anchored += tokens_module._count(current, None) - tokens_module._count(then, None)  # pyright: ignore[reportPrivateUsage]
    after = messages[anchor + 1 :]
    segments = tokens_module._flat(tokens_module._message_text(after))  # pyright: ignore[reportPrivateUsage]
    return max(anchored + tokens_module._count(segments, None), 0)  # pyright: ignore[reportPrivateUsage]


@EXAMPLES
@given(anchored_histories(), st.lists(st.tuples(ACTIONS, st.integers(0, 60)), max_size=8))
def test_the_anchored_estimate_of_each_request_equals_a_reading_of_the_whole_history(
    history: list[ModelMessage], actions: list[tuple[str, int]]
) -> None:
    current: list[ModelMessage] = []
    for position, message in enumerate(history):
        sent = [*current, message]
        assert estimate_context_tokens(sent) == estimate_whole(sent) == estimate_context_tokens(copied(sent))
        action, cut = actions[position % len(actions)] if actions else ('save', 0)
        current = between(action, sent, sent, cut)


def test_the_anchor_instructions_are_read_back_to_the_previous_anchor_only() -> None:
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('go')], instructions='be brief')]
    read: list[int] = []
    original = tokens_module._instructions_up_to  # pyright: ignore[reportPrivateUsage]
    visited = 0

    class Counting(list[ModelMessage]):
        def __getitem__(self, index: Any) -> Any:
            nonlocal visited
            visited += 1
            return super().__getitem__(index)

    for step in range(40):
        history.append(ModelResponse(parts=[TextPart('x')], usage=RequestUsage(input_tokens=100 + step)))
        history.append(ModelRequest(parts=[UserPromptPart(f'step {step}')]))
        visited = 0
        found = original(Counting(history), len(history) - 2)
        read.append(visited)
        assert found == ['be brief']
    assert estimate_context_tokens(history) == estimate_whole(history)
    # The anchor, the request before it and the previous anchor (and the request it remembers), whatever the length.
    assert read == [5] + [7] * 39
