"""Tool call / return pairing: the invariant a provider rejects a request over."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequestPart,
    ModelResponse,
    RetryPromptPart,  # pyright: ignore[reportDeprecated]
    ToolCallPart,
    ToolReturnPart,
)


def answers_call(part: ModelRequestPart) -> str | None:
    """The tool call id a request part answers, if it answers one."""
    if isinstance(part, ToolReturnPart):
        return part.tool_call_id
    if isinstance(part, RetryPromptPart) and part.tool_name is not None:  # pyright: ignore[reportDeprecated]
        return part.tool_call_id
    return None


def pairing_problems(messages: Sequence[ModelMessage]) -> list[str]:
    """Every way *messages* breaks pairing; empty when each call has one return after it and each return its call.

    Calls in the final message may still be unanswered: that is a run waiting for its tools.
    """
    problems: list[str] = []
    open_calls: dict[str, int] = {}
    answered: set[str] = set()
    for index, message in enumerate(messages):
        pair_message(index, message, open_calls, answered, problems)
    return [*problems, *unanswered(open_calls, len(messages) - 1)]


def pair_message(
    index: int, message: ModelMessage, open_calls: dict[str, int], answered: set[str], problems: list[str]
) -> None:
    """One message's step of the pairing scan: opens its calls, closes the calls its returns answer.

    Args:
        index: The message's index in the history (for the problems' wording).
        message: The message.
        open_calls: Calls without a return yet, by id, with the index of their response (updated).
        answered: Ids of calls already answered (updated).
        problems: Returns without a call and calls answered twice (appended to).
    """
    if isinstance(message, ModelResponse):
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                open_calls[part.tool_call_id] = index
        return
    for part in message.parts:
        call_id = answers_call(part)
        if call_id is None:
            continue
        if call_id in open_calls:
            del open_calls[call_id]
            answered.add(call_id)
        elif call_id in answered:
            problems.append(f'tool call {call_id!r} answered twice (message {index})')
        else:
            problems.append(f'tool return {call_id!r} has no call before it (message {index})')


def unanswered(open_calls: dict[str, int], last: int) -> list[str]:
    """The problems of calls left without a return, except those in the final message (index *last*)."""
    return [unanswered_problem(call_id, index) for call_id, index in open_calls.items() if index != last]


def unanswered_problem(call_id: str, index: int) -> str:
    """The problem of a call (made in message *index*) left without a return."""
    return f'tool call {call_id!r} has no return (message {index})'


def dangling_calls(messages: Sequence[ModelMessage]) -> set[str]:
    """Ids of the calls *messages* leaves without a return, except those of the final message."""
    open_calls: dict[str, int] = {}
    for index, message in enumerate(messages):
        pair_message(index, message, open_calls, set(), [])
    return {call_id for call_id, index in open_calls.items() if index != len(messages) - 1}
