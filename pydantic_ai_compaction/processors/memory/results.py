"""Tool results as memory keeps them: their ids, their originals, and archiving them to a store.

The one surface `Archive`, `Recall` and the clearing view share, so no capability imports another's
module: a result's id and archive reference live in its metadata, its original is its content without
the id prefix, and `archive_results` is the only code that files originals in a store.
"""

from __future__ import annotations

import operator
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

from pydantic import ValidationError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, ToolCallPart, ToolReturnPart

from pydantic_ai_compaction.protocols.archive import ArchivedResult, ArchiveError, ArchiveStore
from pydantic_ai_compaction.protocols.metadata import ResultMarks, ours, with_ours
from pydantic_ai_compaction.protocols.types import METADATA_KEY
from pydantic_ai_compaction.runtime.degraded import described
from pydantic_ai_compaction.runtime.encoding import (
    args_text,
    from_bytes,
    from_json,
    has_surrogate_keys,
    has_surrogates,
    to_json_in_order,
)
from pydantic_ai_compaction.runtime.transcript import clip

HARNESS_CLEARED = 'pydantic-ai-harness.compaction.cleared-tool-result.v1'
"""The `ToolReturnPart.metadata` key pydantic-ai-harness sets on a result whose content it replaced with a placeholder
(harness is optional: its name is written here, not imported)."""


def cleared_by_harness(part: ToolReturnPart) -> bool:
    """Whether *part* is a result a harness compaction cleared: its content is a placeholder, not the output."""
    metadata = part.metadata
    return isinstance(metadata, dict) and cast('dict[str, object]', metadata).get(HARNESS_CLEARED) is True


def result_id_of(part: ToolReturnPart) -> str | None:
    """The id `Archive` gave a tool result, if any."""
    return ResultMarks.from_metadata(part.metadata).result_id


def archived_ref_of(part: ToolReturnPart) -> str | None:
    """The archive reference of a stubbed result, if it was archived."""
    return ResultMarks.from_metadata(part.metadata).archived


def markable(part: ToolReturnPart) -> bool:
    """Whether *part* can carry marks without losing anything: its metadata is a dict or unset. A tool's
    `ToolReturn(metadata=...)` may be any value (a trace id, an object of the application's), which marks would
    have to replace: such a result is left as the tool returned it (`Archive` gives it no id)."""
    return part.metadata is None or isinstance(part.metadata, dict)


def with_marks(part: ToolReturnPart, **marks: object) -> dict[str, Any]:
    """*part*'s metadata with *marks* added under `METADATA_KEY` (a new dict: parts are never mutated)."""
    return with_ours(part.metadata, marks)


def original_part(part: ToolReturnPart) -> ToolReturnPart:
    """The result as the tool returned it, without the id prefix `Archive` added."""
    prefix = ResultMarks.from_metadata(part.metadata).id_prefix
    if prefix is not None and isinstance(part.content, str) and part.content.startswith(prefix):
        return replace(part, content=part.content[len(prefix) :])
    return part


_TUPLE = {METADATA_KEY: {'tuple': True}}
"""The stored request's metadata when the result's content is a tuple, which JSON writes as a list."""


def serialize_part(part: ToolReturnPart) -> bytes:
    """The stored form of a result: pydantic-ai's JSON, or the lossless JSON when that refuses its text."""
    # pydantic-core writes a lone surrogate in a dict's key as U+FFFD (where it refuses one anywhere else): each
    # such key is written as a marker string no value holds, and put back in, escaped, once the JSON is written.
    keys: list[str] = []
    token = secrets.token_hex(8)
    if has_surrogate_keys(part.content) or has_surrogate_keys(part.metadata):
        part = replace(part, content=_marked(part.content, keys, token), metadata=_marked(part.metadata, keys, token))
    # pydantic-ai sends a list as one block per item and a tuple as one value: the stored request says which
    # it was, so the recovered result is sent as the original was.
    message: list[ModelMessage] = [
        ModelRequest(parts=[part], metadata=_TUPLE if isinstance(part.content, tuple) else None)
    ]
    try:
        data = ModelMessagesTypeAdapter.dump_json(message)
    except ValueError:
        # Lone surrogates: the lossless encoding escapes them, and keeps the order of a dict's keys (the model reads
        # them in that order).
        data = to_json_in_order(ModelMessagesTypeAdapter.dump_python(message, mode='json')).encode('ascii')
    if not keys:
        return data
    marker = re.compile(rb'"\\u0000' + token.encode() + rb':(\d+)\\u0000"')
    return marker.sub(lambda match: to_json_in_order(keys[int(match.group(1))]).encode('ascii'), data)


def _marked(value: Any, keys: list[str], token: str) -> Any:
    """*value* with each dict key holding a lone surrogate replaced by a marker naming its place in *keys*."""
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in cast('dict[Any, Any]', value).items():
            if isinstance(key, str) and has_surrogates(key):
                keys.append(key)
                key = f'\x00{token}:{len(keys) - 1}\x00'
            out[key] = _marked(item, keys, token)
        return out
    if isinstance(value, list | tuple):
        items = [_marked(item, keys, token) for item in cast('list[Any]', value)]
        return tuple(items) if isinstance(value, tuple) else items
    return value


def deserialize_part(payload: bytes) -> ToolReturnPart:
    """The result `serialize_part` stored, exactly.

    A payload read back as another bytes-like object (`memoryview` is what psycopg2 gives for `bytea`) is read as
    its bytes, and one read back as text as its text.

    Raises:
        ValueError: The payload is not a stored result.
    """
    if isinstance(payload, bytearray | memoryview):
        payload = bytes(payload)
    elif isinstance(payload, str):
        payload = payload.encode('utf-8', 'surrogatepass')
    elif not isinstance(payload, bytes):  # pyright: ignore[reportUnnecessaryIsInstance]  # a store of your own returns anything
        raise ValueError(f'not a stored result: a payload of {type(payload).__name__}, not bytes')
    try:
        (request,) = ModelMessagesTypeAdapter.validate_json(payload)
    except ValidationError:
        # The lossless form: pydantic's JSON parser refuses escaped lone surrogates and integers past its range;
        # `from_json` keeps both exactly.
        try:
            data = from_json(from_bytes(payload))
        except ValueError as error:
            raise ValueError(f'not a stored result: {error}') from None
        (request,) = ModelMessagesTypeAdapter.validate_python(data)
    part = request.parts[0] if request.parts else None
    if not isinstance(part, ToolReturnPart):
        raise ValueError(f'not a stored result: {type(part).__name__}')
    content: object = part.content
    if ours(request.metadata).get('tuple') is True and isinstance(content, list):
        part = replace(part, content=tuple(cast('list[object]', content)))
    return part


def args_json(call: ToolCallPart) -> str:
    """A call's arguments as canonical JSON (lossless: big integers, lone surrogates); raw text that is not JSON."""
    return args_text(call.args)


def reserve(store: ArchiveStore, conversation: str, counter: str, count: int, highest: int = 0) -> list[int]:
    """*count* new numbers of a store counter, all above *highest* (the highest the history shows).

    Blocking: called in a worker thread.
    """
    numbers = _checked(store, store.next_numbers(conversation, counter, count), count)
    if numbers[0] <= highest:
        # A new store or conversation key starts its counter at 1 while the history already holds
        # numbers: move past the highest one so a number is never given twice (a million at a time: the store
        # answers with a list of them).
        gap = highest - numbers[-1]
        while gap > 0:
            store.next_numbers(conversation, counter, min(gap, _WALKED_AT_ONCE))
            gap -= _WALKED_AT_ONCE
        numbers = _checked(store, store.next_numbers(conversation, counter, count), count)
    return numbers


def _checked(store: ArchiveStore, numbers: object, count: int) -> list[int]:
    """*numbers*, a store's answer to `next_numbers`, when it is *count* increasing numbers from 1 to
    `MAX_SHOWN_NUMBER`; else an `ArchiveError` saying what it returned (a store of the user's may answer anything:
    `r-1` or `r1000000000000000000000000000000` given as a result id, or the same id to two results)."""
    if (
        isinstance(numbers, list)
        and len(cast('list[object]', numbers)) == count
        and all(type(number) is int for number in cast('list[object]', numbers))
    ):
        checked = cast('list[int]', numbers)
        if not checked or (
            checked[0] >= 1 and checked[-1] <= MAX_SHOWN_NUMBER and all(map(operator.lt, checked, checked[1:]))
        ):
            return checked
    shown = clip(described(cast(object, numbers)), 80)
    raise ArchiveError(
        f'archive store: next_numbers returned {shown}, not {count} increasing numbers from 1 to '
        f'{MAX_SHOWN_NUMBER:,} ({type(store).__name__})',
        operation='next_numbers',
    )


MAX_SHOWN_NUMBER = 10_000_000
"""The highest result id or archive reference number a history is taken to show (`shown_number`): a conversation
does not archive ten million results, and walking a store's counter past a forged `r999999999999` took a list of
a trillion numbers (a `MemoryError` on every request)."""

_WALKED_AT_ONCE = 1_000_000
"""Numbers `reserve` asks a store for at once to move its counter past a history's."""


def shown_number(digits: str) -> int | None:
    """The number of a result id or reference a history shows (`r12` → 12, given `'12'`), or `None` for one past
    `MAX_SHOWN_NUMBER`, which is forged (also past the 4,300 digits `int` reads, which failed the run)."""
    if len(digits) > len(str(MAX_SHOWN_NUMBER)) or not (digits.isascii() and digits.isdigit()):
        return None
    number = int(digits)
    return number if number <= MAX_SHOWN_NUMBER else None


def archive_results(
    store: ArchiveStore,
    conversation: str,
    results: Sequence[tuple[ToolReturnPart, str]],
    calls: Mapping[str, ToolCallPart],
    highest: int = 0,
) -> list[ArchivedResult]:
    """File the originals of *results* (each with its note) in *store*, in one transaction; their entries.

    References (`a1`, `a2`, ...) come from the store's `archive` counter, above *highest* (the highest
    reference the history already shows). Blocking: called in a worker thread.

    Raises:
        Exception: Whatever the store raised; nothing was archived.
    """
    numbers = reserve(store, conversation, 'archive', len(results), highest)
    now = datetime.now(UTC).isoformat()
    entries = [
        ArchivedResult(
            conversation_id=conversation,
            ref=f'a{number}',
            result_id=result_id_of(part) or '',
            tool_name=part.tool_name,
            tool_call_id=part.tool_call_id,
            args_json=args_json(calls[part.tool_call_id]) if part.tool_call_id in calls else '{}',
            payload=serialize_part(original_part(part)),
            note=note,
            created_at=now,
        )
        for (part, note), number in zip(results, numbers, strict=True)
    ]
    store.put_archived(entries)
    return entries
