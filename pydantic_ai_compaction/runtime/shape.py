"""The shape every history we produce must have, whatever a strategy, view or memory tool did.

Providers reject a request over its shape, not its content: Anthropic and Gemini need the first
message from the user; pydantic-ai needs the last one to be a request; tool calls must be answered
right after they are made; and two model turns in a row (a kept answer whose question was dropped)
read to the provider as one turn split in two, with nothing between to answer. The runtime checks
every compacted history (`engine`) and every projected request or rewritten log (`project`) against
these rules before it is used.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_ai.messages import CompactionPart, ModelMessage, ModelResponse

from pydantic_ai_compaction.runtime.pairing import pairing_problems


def shape_problems(messages: Sequence[ModelMessage], *, before: Sequence[ModelMessage] | None = None) -> list[str]:
    """Every way *messages* breaks the provider shape; empty when it has none.

    Args:
        messages: The history to check.
        before: The history it was made from. Rules *before* already broke are not held against
            *messages* (a history that arrived ending on a response is not ours to fix), except pairing.
    """
    problems = pairing_problems(messages)
    if not messages:
        return [*problems, 'the history is empty']
    if isinstance(messages[0], ModelResponse) and not (before and isinstance(before[0], ModelResponse)):
        problems.append('the first message is a response, not a request')
    if isinstance(messages[-1], ModelResponse) and not (before and isinstance(before[-1], ModelResponse)):
        problems.append('the last message is a response, not a request')
    adjacent = adjacent_responses(messages)
    if adjacent and (before is None or len(adjacent) > len(adjacent_responses(before))):
        problems.extend(f'two responses in a row (messages {index} and {index + 1})' for index in adjacent)
    return problems


def adjacent_responses(messages: Sequence[ModelMessage]) -> list[int]:
    """Indices *i* where message *i* and *i + 1* are both responses (a provider's compaction excepted).

    A provider's compaction item is an assistant-role message that only that provider's own API reads
    (OpenAI Responses, Anthropic), where it stands between turns, so it does not count as a turn on
    either side of it.
    """
    out: list[int] = []
    for index in range(len(messages) - 1):
        first, second = messages[index], messages[index + 1]
        if (
            isinstance(first, ModelResponse)
            and isinstance(second, ModelResponse)
            and not _is_compaction(first)
            and not _is_compaction(second)
        ):
            out.append(index)
    return out


def _is_compaction(message: ModelMessage) -> bool:
    return any(isinstance(part, CompactionPart) for part in message.parts)


def is_compaction_response(message: ModelMessage) -> bool:
    """Whether *message* is a response holding a provider's compaction item."""
    return isinstance(message, ModelResponse) and _is_compaction(message)
