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

from pydantic_ai.messages import CompactionPart, ModelMessage, ModelResponse, ToolCallPart

from pydantic_ai_compaction.protocols.metadata import MessageMarks
from pydantic_ai_compaction.runtime.pairing import pair_message, pairing_problems, unanswered


def shape_problems(messages: Sequence[ModelMessage], *, before: Sequence[ModelMessage] | None = None) -> list[str]:
    """Every way *messages* breaks the provider shape; empty when it has none.

    Args:
        messages: The history to check.
        before: The history it was made from. Rules *before* already broke are not held against
            *messages* (a history that arrived ending on a response is not ours to fix), except pairing.
    """
    return _with_turn_rules(pairing_problems(messages), messages, adjacent_responses(messages), before)


def _with_turn_rules(
    problems: list[str], messages: Sequence[ModelMessage], adjacent: list[int], before: Sequence[ModelMessage] | None
) -> list[str]:
    """*problems* (pairing) and those of the turn rules: not empty, first and last a request, no two responses in a
    row (*adjacent*, from `adjacent_responses`), each held against *messages* only if *before* kept it."""
    if not messages:
        return [*problems, 'the history is empty']
    if isinstance(messages[0], ModelResponse) and not (before and isinstance(before[0], ModelResponse)):
        problems.append('the first message is a response, not a request')
    if isinstance(messages[-1], ModelResponse) and not (before and isinstance(before[-1], ModelResponse)):
        problems.append('the last message is a response, not a request')
    if adjacent and (before is None or len(adjacent) > len(adjacent_responses(before))):
        problems.extend(f'two responses in a row (messages {index} and {index + 1})' for index in adjacent)
    return problems


def forgotten_loop(messages: Sequence[ModelMessage]) -> ModelResponse | None:
    """The last response of *messages*, if it made calls and `ForgetReasoning` dropped its signed (or
    provider-bound) thinking; else `None`.

    The next request carries that step's results (and whatever prompt follows them): a provider that signs thinking
    reads the step as the tool loop in progress, whose thinking block it needs back (Anthropic refuses the request
    without it). `ForgetReasoning` never drops it there; a compaction that drops what followed a forgotten step
    would put it there.
    """
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, ModelResponse):
            if _reasoning_dropped(message) and makes_calls(message):
                return message
            return None
    return None


def makes_calls(message: ModelMessage) -> bool:
    """Whether *message* is a response that calls tools (whose results the next request carries)."""
    return isinstance(message, ModelResponse) and any(isinstance(part, ToolCallPart) for part in message.parts)


def _reasoning_dropped(message: ModelResponse) -> bool:
    marks = MessageMarks.from_metadata(message.metadata)
    # Unsigned reasoning may go anywhere: no provider asks for it back. Without the mark (a step decided before it
    # was written), the thinking is taken as signed: a needless fallback costs less than a refused request.
    return marks.reasoning == 'dropped' and not marks.unsigned_thinking


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


class ShapeCheck:
    """`shape_problems` for a request that grows from one call to the next, scanning only what follows.

    A view that projects every request of a run sends, through a tool loop, the previous projection
    plus the new messages. The problems of a list depend only on what its messages hold, in order, so
    when the list starts with the list checked last (compared in one C-level pass: equal messages, the
    same objects in practice), the scan goes on from where it stopped instead of starting over. Any
    other list is scanned from the start. The answer is the one `shape_problems` gives as long as no
    message it checked has its `parts` reassigned or edited in place (the rule every part of the library
    and pydantic-ai's own history keep; a user processor that breaks it is not seen here, as it is not by
    the segmentation memo either: `tests/test_incremental_answers.py` shows it).

    An owner that builds each list by truncating and extending one list of its own can say how many leading
    messages are those of the list checked last (`kept`): only the rest is compared, so a request costs what
    changed, not the length of the list.

    Holds the list it checked last: keep one per run (a view's per-run state).
    """

    def __init__(self) -> None:
        self._checked: Sequence[ModelMessage] = ()
        self._open: dict[str, int] = {}
        self._answered: set[str] = set()
        self._pairing: list[str] = []
        self._adjacent: list[int] = []
        self._kept: tuple[int, Sequence[ModelMessage]] = (0, ())
        self._given: Sequence[ModelMessage] = ()
        """The list `problems` was passed last (`_checked` is a copy of it unless `kept` applied)."""

    def kept(self, count: int, since: Sequence[ModelMessage]) -> None:
        """The next list checked starts with the first *count* messages of *since*, as the same objects (its owner
        only truncated and extended its own list since it handed out *since*): when *since* is the list checked
        last, they are not compared again.

        Applies to the next `problems` call only. The owner must not change the list it passes to `problems`
        afterwards (it is then held, not copied).
        """
        self._kept = (count, since)

    def problems(self, messages: Sequence[ModelMessage], *, before: Sequence[ModelMessage] | None = None) -> list[str]:
        """What `shape_problems(messages, before=before)` returns."""
        (kept, since), self._kept = self._kept, (0, ())
        checked = self._checked
        seen = len(checked)
        if kept and since is self._given:
            kept = min(kept, seen)
            current = messages  # held as passed: `kept` says its owner leaves it as it is
            same = len(current) >= seen and list(current[kept:seen]) == list(checked[kept:seen])
        else:
            current = list(messages)
            same = bool(seen) and len(current) >= seen and current[:seen] == [*checked]
        if not same:
            self._open, self._answered, self._pairing, self._adjacent = {}, set(), [], []
            seen = 0
        self._scan(current, seen)
        self._checked, self._given = current, messages
        problems = [*self._pairing, *unanswered(self._open, len(current) - 1)]
        return _with_turn_rules(problems, current, list(self._adjacent), before)

    def _scan(self, messages: Sequence[ModelMessage], start: int) -> None:
        """`pairing_problems`' and `adjacent_responses`' loops over `messages[start:]`, carrying their state."""
        open_calls, answered, problems = self._open, self._answered, self._pairing
        for index in range(start, len(messages)):
            message = messages[index]
            if index and _turn(messages[index - 1]) and _turn(message):
                self._adjacent.append(index - 1)
            pair_message(index, message, open_calls, answered, problems)


def _turn(message: ModelMessage) -> bool:
    """A response that counts as a model turn (a provider's compaction item does not)."""
    return isinstance(message, ModelResponse) and not _is_compaction(message)
