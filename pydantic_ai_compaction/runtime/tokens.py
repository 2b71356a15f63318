"""Token estimates and context windows on pydantic-ai's public API, anchored on the usage providers report.

The estimate is the one pydantic-ai-harness's compaction uses (`estimate_token_count`,
`estimate_context_tokens`, `resolve_context_window`), written against pydantic-ai's public message
classes so the library runs next to any pydantic-ai 2.x from 2.62 on without harness, and gives the same
numbers as harness where both are installed (a test compares them on recorded histories).

- `estimate_token_count`: every text the provider is sent, ~4 characters per token, or a *tokenizer*.
- `estimate_context_tokens`: anchored on the newest response that reports input tokens (what the
  provider counted for everything sent with that request, instructions and tool definitions included,
  plus that response's output tokens); only what came after it is estimated.

A tokenizer is any `Callable[[str], int]`; pass one where the character heuristic is too coarse (dense
JSON, non-Latin scripts before the first response reports usage):

Example:
    ```python
    import tiktoken

    from pydantic_ai_compaction import Fork, Trigger

    encoding = tiktoken.get_encoding('o200k_base')
    Fork(trigger=Trigger(tokens=18_000, tokenizer=lambda text: len(encoding.encode(text))))
    ```
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from json import dumps
from typing import TYPE_CHECKING, cast

from pydantic_ai.messages import (
    CapabilityInstructionSource,
    CompactionPart,
    InstructionBaselinePart,
    InstructionDeltaPart,
    InstructionId,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryPromptPart,  # pyright: ignore[reportDeprecated]
    SpeechPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolAvailabilityDeltaPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    is_multi_modal_content,
)
from pydantic_core import to_json

from pydantic_ai_compaction.runtime.degraded import described
from pydantic_ai_compaction.runtime.memo import IdentityMemo, same_objects

if TYPE_CHECKING:
    from pydantic_ai.models import AbstractModel, ModelRequestParameters
    from pydantic_ai.tools import ToolDefinition

Tokenizer = Callable[[str], int]
"""Counts the tokens of a string (for instance `lambda text: len(encoding.encode(text))` with tiktoken)."""

CHARS_PER_TOKEN = 4
"""The heuristic without a tokenizer: about four characters per token."""

DEFAULT_CONTEXT_WINDOW = 200_000
"""Window assumed when the model's cannot be resolved (harness's value: compacting early costs one summary,
overestimating the window costs the whole request)."""

_PYDANTIC_AI_METADATA = '__pydantic_ai__'
"""Namespace pydantic-ai stores its own response metadata under (part of the saved history format)."""

_CONTEXT_INPUT_KEYS = ('context_input_tokens', 'initial_input_tokens')
"""Where pydantic-ai records the input tokens that measure a response's context when its usage sums several
model requests (a Google long decode, an Anthropic server-side tool loop); the second is the key 2.56 wrote."""


def estimate_text_tokens(text: str, tokenizer: Tokenizer | None = None) -> int:
    """Estimated tokens of one string: *tokenizer*'s count, or its length over `CHARS_PER_TOKEN`."""
    if tokenizer is not None:
        return _counted(tokenizer, text)
    return len(text) // CHARS_PER_TOKEN


def _counted(tokenizer: Tokenizer, text: str) -> int:
    """*tokenizer*'s count of *text*, refused unless a count: NaN compares false with every threshold, so a
    tokenizer returning it would turn compaction off without a word; a negative count would hide a history. A
    fraction (`len(text) / 4`) is rounded down, as the default estimate is: records and events hold whole tokens."""
    count = tokenizer(text)
    if isinstance(count, bool) or not isinstance(count, int | float) or not 0 <= count < math.inf:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(
            f'the tokenizer returned {described(count)} for a text of {len(text):,} characters, not a count of tokens'
        )
    return int(count)


def estimate_token_count(messages: Sequence[ModelMessage], tokenizer: Tokenizer | None = None) -> int:
    """Estimated tokens of *messages*: every text the provider is sent, and the latest instructions once.

    Args:
        messages: The history.
        tokenizer: Counts a string's tokens; `None` uses ~4 characters per token.
    """
    if tokenizer is None:
        # Without an instruction change, each message's text is its own: their lengths add up to the same total
        # without building a single segment (every compaction estimates the whole history this way).
        total = 0
        for message in messages:
            measured = measure_message_text(message)
            if measured is None:
                break
            total += measured[0]
        else:
            return (total + sum(map(len, _instructions(messages)))) // CHARS_PER_TOKEN
    return _count(_all_text(messages), tokenizer)


class GrowingEstimate:
    """`estimate_token_count(messages)` (no tokenizer) of a list that grows from one call to the next, reading only
    the messages from the last one measured on, and the sum of *per_message* over the same messages.

    A view sends, through a tool loop, the previous request plus the new messages: measured whole, each request
    cost the length of the history in Python (about 2 ms a request over 5,000 messages). When the list starts with
    the list measured last up to its newest response (the same objects, compared in one C-level pass), only the
    rest is read: the messages after that response are read again, since pydantic-ai still adds to the request of
    the step in progress in place after the hooks (an instruction change it records), and a capability may have put
    a request-only message after it. Any other list is measured from the start. A request holding an instruction
    change, whose text depends on the messages around it, has the whole list measured every time, as
    `estimate_token_count` does. As with the segmentation's memo, a message up to the newest response that has its
    `parts` edited in place is not seen to change (a strict xfail in `tests/test_incremental_paths.py`).

    Holds the list it measured last, as passed (a copy would touch every message at every request): keep one per
    run (a view's per-run state), and do not change a list after passing it.
    """

    __slots__ = ('_measured', '_per_message', '_settled')

    def __init__(self, per_message: Callable[[ModelMessage], int] | None = None) -> None:
        self._per_message = per_message
        self._measured: Sequence[ModelMessage] = ()
        self._settled: tuple[int, int, str, bool] = (0, 0, '', True)
        """What the messages measured last add up to up to their newest response: characters, *per_message*, the
        newest instructions among them, and whether every one was measured on its own (no instruction change)."""

    def measure(self, messages: Sequence[ModelMessage], *, kept: int = 0) -> tuple[int, int]:
        """`estimate_token_count(messages)`, and *per_message* summed over *messages* (0 without it).

        *kept*: how many leading messages of *messages* are known to be those of the list measured last, as the same
        objects (its owner built both from one list it does not change): only the rest are compared.
        """
        measured = self._measured
        start = step_start(measured)
        kept = min(kept, start)
        # By identity, in C: an equal copy can measure otherwise (`0 == False`, written `0` and `false`).
        if not same_objects(messages[kept:start], measured[kept:start]):  # a shorter list gives a shorter slice
            self._settled, start = (0, 0, '', True), 0
        chars, extra, instructions, exact = self._settled
        per_message = self._per_message
        settles = step_start(messages)  # what the next call reads again starts here
        for index in range(start, len(messages)):
            if index == settles:
                self._settled = (chars, extra, instructions, exact)
            message = messages[index]
            if per_message is not None:
                extra += per_message(message)
            if isinstance(message, ModelRequest) and message.instructions:
                instructions = message.instructions
            if exact:
                counted = measure_message_text(message)
                if counted is None:
                    exact = False
                else:
                    chars += counted[0]
        if settles >= len(messages):  # no message read again (an empty list): all of it is settled
            self._settled = (chars, extra, instructions, exact)
        self._measured = messages
        if exact:
            return (chars + len(instructions)) // CHARS_PER_TOKEN, extra
        return estimate_token_count(messages), extra


def step_start(messages: Sequence[ModelMessage]) -> int:
    """Where the messages after the newest response start (0 without one): the request of the step in progress, which
    pydantic-ai still adds to in place after the `before_model_request` hooks (the changes of instructions, tools
    and settings it records), and any request-only message a capability put after it (a reminder)."""
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], ModelResponse):
            return index + 1
    return 0


def estimate_context_tokens(
    messages: Sequence[ModelMessage],
    tokenizer: Tokenizer | None = None,
    *,
    model_request_parameters: ModelRequestParameters | None = None,
) -> int:
    """Best available estimate of the request *messages* would produce, anchored on provider usage.

    The newest response reporting input tokens measured everything its request sent (instructions,
    tool definitions, every earlier message) and its output tokens measured itself: their sum is the
    anchor. Only the messages after it are estimated, without the instructions the anchor already paid
    for, unless they changed since (then the old set's estimate is swapped for the new one). Tools
    revealed after the anchor add their schemas from *model_request_parameters*. Without any usage,
    this is `estimate_token_count` plus those schemas.

    Args:
        messages: The history.
        tokenizer: Counts a string's tokens; `None` uses ~4 characters per token.
        model_request_parameters: The pending request's parameters, for the schemas of revealed tools.
    """
    anchor = _latest_anchor(messages)
    if anchor is None:
        return _count([*_all_text(messages), *_revealed_schemas(messages, model_request_parameters)], tokenizer)
    after = messages[anchor + 1 :]
    response = messages[anchor]
    assert isinstance(response, ModelResponse)
    anchored = context_input_tokens(response) + response.usage.output_tokens
    then = _instructions_up_to(messages, anchor)
    # The newest set after the anchor, else the anchor's: what `_instructions(messages)` finds, read from the end.
    current = _instructions(after) or then
    if current != then:
        anchored += _count(current, tokenizer) - _count(then, tokenizer)
    # The messages after the anchor are read on their own, as the request that follows will send them.
    segments = [*_flat(_message_text(after)), *_revealed_schemas(after, model_request_parameters)]
    return max(anchored + _count(segments, tokenizer), 0)


def context_input_tokens(response: ModelResponse) -> int:
    """The input tokens of *response* as a measure of its context (not of its cost).

    `usage.input_tokens`, except for a response whose usage sums several model requests: pydantic-ai then
    records the input tokens of the request that measures the context in the response's metadata.
    """
    namespace: object = (response.metadata or {}).get(_PYDANTIC_AI_METADATA)
    if isinstance(namespace, dict):
        recorded = cast('dict[str, object]', namespace)
        for key in _CONTEXT_INPUT_KEYS:
            value = recorded.get(key)
            if isinstance(value, int):
                return value
    return response.usage.input_tokens


def resolve_context_window(model: AbstractModel | str) -> int | None:
    """The model's context window in tokens, or `None` when it is not known.

    A model instance reports its own (`Model.context_window`: its profile's, a user's `profile=` override
    included, filled from `genai-prices` where no profile sets one; a wrapper forwards the wrapped model's,
    a `FallbackModel` the smallest of its candidates). Otherwise, and for a `provider:model` string,
    `genai-prices` is asked directly. Pair it with `DEFAULT_CONTEXT_WINDOW` for a usable number.
    """
    if not isinstance(model, str):
        window = model.context_window
        if window is not None and window > 0:
            return window
    from genai_prices.data_snapshot import get_snapshot

    model_id = model if isinstance(model, str) else model.model_id
    provider_id, separator, model_ref = model_id.partition(':')
    if not separator:
        provider_id, model_ref = '', model_id
    try:
        _, info = get_snapshot().find_provider_model(
            model_ref=model_ref, provider=None, provider_id=provider_id or None, provider_api_url=None
        )
    except LookupError:
        return None
    window = info.context_window
    # A registry entry can carry a zero or negative window: no request could fit it, so it means unknown.
    return window if window is not None and window > 0 else None


def _count(segments: Sequence[str], tokenizer: Tokenizer | None) -> int:
    # With a tokenizer each segment is counted on its own, as a provider tokenizes each part separately;
    # the heuristic divides the total once, so short segments do not each round down to nothing.
    if tokenizer is not None:
        return sum(_counted(tokenizer, segment) for segment in segments)
    return sum(len(segment) for segment in segments) // CHARS_PER_TOKEN


def _flat(groups: list[list[str]]) -> list[str]:
    return [segment for group in groups for segment in group]


def _all_text(messages: Sequence[ModelMessage]) -> list[str]:
    return [*_flat(_message_text(messages)), *_instructions(messages)]


def _latest_anchor(messages: Sequence[ModelMessage]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, ModelResponse) and message.usage.input_tokens:
            return index
    return None


def _instructions(messages: Sequence[ModelMessage]) -> list[str]:
    """The instructions the next request is sent with: the newest non-empty set, counted once.

    Every request stores the instructions in force when it was made, but a request sends one set: summing
    them would count a system prompt once per turn.
    """
    for message in reversed(messages):
        if isinstance(message, ModelRequest) and message.instructions:
            return [message.instructions]
    return []


_ANCHOR_INSTRUCTIONS: IdentityMemo[tuple[int, int, weakref.ref[ModelMessage] | None]] = IdentityMemo()
"""Per anchor response: its index, and the index and object of the newest request with instructions at or
before it (-1 and `None`: none). Weak: dropped with the response."""


def _instructions_up_to(messages: Sequence[ModelMessage], end: int) -> list[str]:
    """`_instructions(messages[: end + 1])`, without reading the whole history on every request.

    A history whose requests carry no instructions would be read to its start on every request. The
    lookup is remembered per anchor response (`end` is the index of a response with usage): the next
    anchor's reads back only to the previous one, as long as it sits at the same index, and so does a
    remembered request with instructions (a request swapped for another at the same index before an anchor
    still in place is not seen: checking them all is the cost this avoids).
    """
    found = -1
    remembered = False
    index = end
    while index >= 0:
        message = messages[index]
        if isinstance(message, ModelRequest) and message.instructions:
            found = index
            break
        if isinstance(message, ModelResponse) and message.usage.input_tokens:
            earlier = _ANCHOR_INSTRUCTIONS.get((message,))
            if earlier is not None and earlier[0] == index:
                _, at, ref = earlier
                if at < 0 or (ref is not None and messages[at] is ref()):
                    found, remembered = at, index == end
                    break
        index -= 1
    anchor = messages[end]
    if not remembered and isinstance(anchor, ModelResponse):
        _ANCHOR_INSTRUCTIONS.put((anchor,), (end, found, weakref.ref(messages[found]) if found >= 0 else None))
    if found < 0:
        return []
    request = messages[found]
    assert isinstance(request, ModelRequest) and request.instructions
    return [request.instructions]


def _message_text(messages: Sequence[ModelMessage]) -> list[list[str]]:
    """The text segments each message is sent with, without instructions.

    An instruction change recorded before the current instruction window is not sent any more (the window's
    baseline replaced it), except a loaded capability's, which stays until a compaction ends the load.
    """
    window_start = _instruction_window_start(messages)
    loads_start = _post_compaction_start(messages)
    out: list[list[str]] = []
    for index, message in enumerate(messages):
        segments: list[str] = []
        if isinstance(message, ModelRequest):
            opened_at = _window_boundary_index(message) if index == window_start else -1
            for part_index, part in enumerate(message.parts):
                if (
                    isinstance(part, InstructionDeltaPart)
                    and (index < window_start or part_index <= opened_at)
                    and not (_is_loaded_block(part.id) and (index, part_index) >= loads_start)
                ):
                    continue
                segments.extend(_request_part_text(part))
        else:
            for part in message.parts:
                segments.extend(_response_part_text(part))
        out.append(segments)
    return out


def measure_message_text(message: ModelMessage) -> tuple[int, int] | None:
    """Characters of the texts *message* is sent with on its own (instructions excluded), and how many of them
    were produced by converting a value that is not a plain string (structured results, arguments, files).

    The first is the total of the segments `estimate_token_count([message])` reads without instructions,
    summed without building them: a history never seen is measured at about the cost of reading its parts.
    The second says what measuring it again would cost, so a caller remembers only what is worth it.
    `None` for a request holding an instruction change, whose text depends on the messages around it.
    """
    # The branches follow `_request_part_text` and `_response_part_text`, in their order.
    total = converted = 0
    if isinstance(message, ModelRequest):
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                content = part.content
                if type(part) is ToolReturnPart and type(content) is str:
                    total += len(content)  # a plain string holds no file: its text is itself (`tool_return_text`)
                    continue
                length = len(tool_return_text(part))
            elif isinstance(part, UserPromptPart):
                content = part.content
                if isinstance(content, str):
                    total += len(content)
                    continue
                length = sum(map(len, _prompt_texts(part)))
            elif isinstance(part, SystemPromptPart):
                total += len(part.content)
                continue
            elif isinstance(part, InstructionDeltaPart):
                return None
            else:
                length = sum(map(len, _request_part_text(part)))
            total += length
            converted += length
        return total, converted
    for part in message.parts:
        if isinstance(part, TextPart):
            total += len(part.content)
        elif isinstance(part, ToolCallPart):
            args = part.args
            if isinstance(args, str):
                total += len(part.tool_name) + len(args)
            else:
                length = len(value_text(args))
                total += len(part.tool_name) + length
                converted += length
        elif isinstance(part, ThinkingPart):
            total += len(part.content or '')
        else:
            length = sum(map(len, _response_part_text(part)))
            total += length
            converted += length
    return total, converted


def value_text(value: object) -> str:
    """`str(value)`, the text harness's estimator measures, or the value's JSON when `str` refuses it.

    An integer past Python's digit limit (`sys.get_int_max_str_digits`, 4,300 by default) has no `str`, but
    pydantic-ai sends it (as JSON): measured by its JSON, such a result does not turn every view off.
    """
    try:
        return str(value)
    except ValueError:
        return to_json(value, fallback=repr).decode(errors='replace')


def _request_part_text(part: ModelRequestPart) -> list[str]:
    if isinstance(part, UserPromptPart):
        return [''.join(_prompt_texts(part))]
    if isinstance(part, SystemPromptPart):
        return [part.content]
    if isinstance(part, InstructionDeltaPart):
        return [part.render()]
    if isinstance(part, ToolReturnPart):
        # A retried call's feedback travels as that call's return; tool-search and capability-load
        # returns subclass `ToolReturnPart` and land here too.
        return [tool_return_text(part)]
    if isinstance(part, RetryFeedbackPart):
        return [part.model_response()]
    if isinstance(part, RetryPromptPart):  # pyright: ignore[reportDeprecated]
        # A hand-built history can still hold the deprecated part; it is sent as its content.
        return [value_text(part.content)]
    if isinstance(part, CompactionPart):
        return [part.content or '']
    if isinstance(part, SpeechPart):
        return [part.transcript or '']
    # Baselines, tool reveals, settings and capability-load changes are bookkeeping, not text; a part
    # added by a newer pydantic-ai is skipped rather than guessed at (this runs before every request).
    return []


def _response_part_text(part: ModelResponsePart) -> list[str]:
    if isinstance(part, TextPart):
        return [part.content]
    if isinstance(part, ToolCallPart | NativeToolCallPart):
        return [part.tool_name, value_text(part.args)]
    if isinstance(part, ThinkingPart | CompactionPart):
        # A redacted thinking block carries a signature and no text.
        return [part.content or '']
    if isinstance(part, NativeToolReturnPart):
        try:
            return [part.tool_name, part.model_response_str()]
        except ValueError:
            # pydantic will not write a lone surrogate as JSON: measured by its `str`, as a tool return is, so one
            # odd character in a provider's tool result does not turn every strategy and view off for good.
            return [part.tool_name, value_text(part.content)]
    if isinstance(part, SpeechPart):
        return [part.transcript or '']
    # A file's payload is binary: its length in characters says nothing about what the provider bills.
    return []


def _prompt_texts(part: UserPromptPart) -> list[str]:
    if isinstance(part.content, str):
        return [part.content]
    return [
        item if isinstance(item, str) else item.content for item in part.content if isinstance(item, str | TextContent)
    ]


def tool_return_text(part: ToolReturnPart) -> str:
    """The text a tool return is measured by: its content's `value_text`, a file in it as its reference."""
    # A file in a tool result is sent as a reference by identifier, not spelled out.
    if not part.files:
        return value_text(part.content)
    return ' '.join(
        f'See file {item.identifier}.' if is_multi_modal_content(item) else value_text(item)
        for item in part.content_items()
    )


def _revealed_schemas(messages: Sequence[ModelMessage], parameters: ModelRequestParameters | None) -> list[str]:
    """Schemas of the tools made available in *messages*: sent with the next request, outside any message."""
    if parameters is None:
        return []
    names = {
        name
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolAvailabilityDeltaPart)
        for name in part.tools_added
    }
    return [_schema_text(tool) for name in names if (tool := parameters.tool_defs.get(name)) is not None]


def _schema_text(tool: ToolDefinition) -> str:
    return ''.join((tool.name, tool.description or '', dumps(tool.parameters_json_schema, sort_keys=True)))


def _instruction_window_start(messages: Sequence[ModelMessage]) -> int:
    """The index of the message the current instruction window opened at (a baseline or a compaction), or 0."""
    return max(
        (index for index, message in enumerate(messages) if any(_is_window_boundary(p) for p in message.parts)),
        default=0,
    )


def _window_boundary_index(message: ModelMessage) -> int:
    """The last part of *message* that ends the instruction window before it, or -1."""
    return max((index for index, part in enumerate(message.parts) if _is_window_boundary(part)), default=-1)


def _is_window_boundary(part: ModelRequestPart | ModelResponsePart) -> bool:
    return isinstance(part, InstructionBaselinePart | CompactionPart)


def _is_loaded_block(instruction_id: InstructionId | None) -> bool:
    """Whether an instruction change belongs to a loaded capability's block (it outlives instruction windows)."""
    return (
        instruction_id is not None
        and instruction_id.name is None
        and isinstance(instruction_id.source, CapabilityInstructionSource)
    )


def _post_compaction_start(messages: Sequence[ModelMessage]) -> tuple[int, int]:
    """Where the history after the newest compaction begins, as (message, part); `(0, 0)` without one.

    A summary the application wrote sits in a request, and the window opens with that request's turn (the
    run of consecutive requests pydantic-ai merges into one); a provider's sits in a response, which the
    provider replays from that part on.
    """
    for message_index in range(len(messages) - 1, -1, -1):
        message = messages[message_index]
        if isinstance(message, ModelResponse):
            for part_index in range(len(message.parts) - 1, -1, -1):
                if isinstance(message.parts[part_index], CompactionPart):
                    return message_index, part_index
        elif any(isinstance(part, CompactionPart) for part in message.parts):
            start = message_index
            while start > 0 and isinstance(messages[start - 1], ModelRequest):
                start -= 1
            return start, 0
    return 0, 0
