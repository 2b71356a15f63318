"""A view's projection, saved with the history, so the next run sends the same one.

A view changes what a request sends, never the saved history, and keeps its projection on the run's
state. A chat whose every turn is a new run (`agent.run(prompt, message_history=...)`) would then start
each turn from the whole history again: `ClearThenSummarize` wrote a new handoff note from scratch at
every turn (a model call per turn, the facts of the earlier notes gone), and the request's prefix changed
at every turn, so the provider's cache never served it.

So a view also writes its projection as a record into the metadata of the response to the request that
first sent it (metadata is saved with the history and never sent to a model), and the next run rebuilds
the projection from the newest record, when the history it is given still has the shape the record was
made from (`shape_digest`). The record names the saved messages the projection shows, so it stays small:

- `[start, stop]`: saved messages `start` to `stop - 1`, as they are;
- `{"at": i, "parts": [p, ...], "stubs": {"p": text}}`: saved message `i` with only the parts listed
  (a message segmentation split), the tool results named in `stubs` with that text as their content;
- `{"new": key}`: a message the view made (a handoff boundary), written whole once, under
  `new[key]` of the first record that shows it.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from pydantic_ai.messages import BaseToolReturnPart, ModelMessage, ModelMessagesTypeAdapter, ModelResponse

from pydantic_ai_compaction.protocols.metadata import VIEW_RECORD, ours, str_dict, with_ours
from pydantic_ai_compaction.runtime.encoding import to_bytes, to_json

Restub = Callable[[BaseToolReturnPart, str], BaseToolReturnPart]
"""How the view replaces a tool result's content (its marks included): `restub(original, text)`."""


@dataclass
class Carried:
    """A projection read back from a saved history."""

    covers: int
    """How many saved messages, from the first, the projection stands for."""

    messages: list[ModelMessage]
    """What is sent in their place."""

    state: dict[str, Any]
    """What the view saved beside it (`ClearThenSummarize`: its handoff note)."""

    written: set[str] = field(default_factory=set[str])
    """Keys of the made messages the history holds already (a later record names them without writing them)."""


def shape_digest(messages: Sequence[ModelMessage]) -> str:
    """A digest of what a record relies on in *messages*: their order, kinds, timestamps and parts.

    Each part counts by its kind and tool call id, a tool result also by its content's length. A history that
    lost, gained or reordered messages, or whose results changed, has another digest; one saved and loaded
    back (`ModelMessagesTypeAdapter`) has the same.
    """
    digest = hashlib.blake2b(digest_size=16)
    for message in messages:
        items: list[str] = [message.kind, message.timestamp.isoformat() if message.timestamp else '']
        for part in message.parts:
            items.append(part.part_kind)
            call_id = getattr(part, 'tool_call_id', None)
            if isinstance(call_id, str):
                items.append(call_id)
            if isinstance(part, BaseToolReturnPart) and isinstance(part.content, str):
                items.append(str(len(part.content)))
        digest.update(to_bytes('\x1f'.join(items) + '\x1e'))
    return digest.hexdigest()


def encode(
    projection: Sequence[ModelMessage], covered: Sequence[ModelMessage], restub: Restub, written: set[str]
) -> tuple[list[Any], dict[str, Any]]:
    """The record of *projection* as *covered* (the saved messages it stands for) shows it, and the made
    messages whose keys are not in *written*, to write whole.

    Every entry is checked by building it back: what `decode` gives is *projection*, message for message.
    """
    where = {id(message): index for index, message in enumerate(covered)}
    parents: dict[int, int] = {}
    results: dict[str, list[int]] = {}
    for index, message in enumerate(covered):
        for part in message.parts:
            parents.setdefault(id(part), index)
            if isinstance(part, BaseToolReturnPart):
                results.setdefault(part.tool_call_id, []).append(index)
    ops: list[Any] = []
    new: dict[str, Any] = {}
    for message in projection:
        index = where.get(id(message))
        if index is not None:
            if ops and isinstance(ops[-1], list) and cast('list[int]', ops[-1])[1] == index:
                ops[-1][1] = index + 1
            else:
                ops.append([index, index + 1])
            continue
        derived = _derived(message, covered, parents, results, restub)
        if derived is not None:
            ops.append(derived)
            continue
        dumped: Any = ModelMessagesTypeAdapter.dump_python([message], mode='json')[0]
        key = hashlib.blake2b(to_bytes(to_json(dumped)), digest_size=8).hexdigest()
        ops.append({'new': key})
        if key not in written:
            new[key] = dumped
    return ops, new


def _derived(
    message: ModelMessage,
    covered: Sequence[ModelMessage],
    parents: dict[int, int],
    results: dict[str, list[int]],
    restub: Restub,
) -> dict[str, Any] | None:
    """The entry showing *message* as a saved message with some of its parts (some results stubbed), or `None`."""
    candidates = [parents[id(part)] for part in message.parts if id(part) in parents]
    candidates += [
        index
        for part in message.parts
        if isinstance(part, BaseToolReturnPart)
        for index in results.get(part.tool_call_id, ())
    ]
    for index in dict.fromkeys(candidates):
        original = covered[index]
        chosen: list[int] = []
        stubs: dict[str, str] = {}
        for part in message.parts:
            at = next((p for p, o in enumerate(original.parts) if o is part), None)
            if at is None and isinstance(part, BaseToolReturnPart) and isinstance(part.content, str):
                at = next(
                    (
                        p
                        for p, o in enumerate(original.parts)
                        if isinstance(o, BaseToolReturnPart) and o.tool_call_id == part.tool_call_id
                    ),
                    None,
                )
                if at is not None:
                    stubs[str(at)] = part.content
            if at is None:
                break
            chosen.append(at)
        else:
            entry: dict[str, Any] = {'at': index, 'parts': chosen, 'stubs': stubs}
            if _build(entry, covered, restub) == message:
                return entry
    return None


def _build(entry: dict[str, Any], covered: Sequence[ModelMessage], restub: Restub) -> ModelMessage | None:
    """The message a derived entry names, or `None` when *covered* cannot hold it (a record forged or stale)."""
    index, chosen, stubs = entry.get('at'), entry.get('parts'), str_dict(entry.get('stubs'))
    if not (isinstance(index, int) and 0 <= index < len(covered) and isinstance(chosen, list) and chosen):
        return None
    original = covered[index]
    parts: list[Any] = []
    for at in cast('list[object]', chosen):
        if not (isinstance(at, int) and not isinstance(at, bool) and 0 <= at < len(original.parts)):
            return None
        part = original.parts[at]
        text = stubs.get(str(at))
        if text is not None:
            if not (isinstance(part, BaseToolReturnPart) and isinstance(text, str)):
                return None
            part = restub(part, text)
        parts.append(part)
    return replace(original, parts=parts)


def record(
    owner: str, covers: int, digest: str, ops: list[Any], new: dict[str, Any], state: dict[str, Any]
) -> dict[str, Any]:
    """The record a view writes into a response's metadata."""
    return {'owner': owner, 'covers': covers, 'digest': digest, 'messages': ops, 'new': new, 'state': state}


def with_record(response: ModelResponse, value: dict[str, Any]) -> ModelResponse:
    """*response* carrying *value* as its view record (its other metadata kept)."""
    return replace(response, metadata=with_ours(response.metadata, {VIEW_RECORD: value}))


def _records(history: Sequence[ModelMessage], owner: str, end: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """The records *owner* wrote into *history* before position *end*, newest first, with their response's position."""
    for index in range(end - 1, -1, -1):
        message = history[index]
        if isinstance(message, ModelResponse) and message.metadata:
            value = str_dict(ours(message.metadata).get(VIEW_RECORD))
            if value.get('owner') == owner:
                yield index, value


def read(history: Sequence[ModelMessage], owner: str, restub: Restub) -> Carried | None:
    """The projection *owner* last recorded in *history*, rebuilt; `None` when there is none.

    A record whose history changed shape since (another capability compacted it, the application edited it) gives
    no messages (`covers` 0) but still its state: a view carries its note on even when it must project again.
    """
    found = _records(history, owner, len(history))
    newest = next(found, None)
    if newest is None:
        return None
    position, value = newest
    state = str_dict(value.get('state'))
    covers = value.get('covers')
    ops = value.get('messages')
    if not (
        isinstance(covers, int)
        and not isinstance(covers, bool)
        and 0 < covers <= position
        and isinstance(ops, list)
        and value.get('digest') == shape_digest(history[:covers])
    ):
        return Carried(0, [], state)
    covered = history[:covers]
    made = _made(history, owner, position, value, cast('list[object]', ops))
    if made is None:
        return Carried(0, [], state)
    messages: list[ModelMessage] = []
    for op in cast('list[object]', ops):
        if isinstance(op, list):
            bounds = cast('list[object]', op)
            start, stop = [*bounds, None, None][:2]
            if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start < stop <= covers):
                return Carried(0, [], state)
            messages.extend(covered[start:stop])
        elif isinstance(op, dict) and 'new' in op:
            messages.append(made[cast('dict[str, Any]', op)['new']])
        elif isinstance(op, dict):
            built = _build(cast('dict[str, Any]', op), covered, restub)
            if built is None:
                return Carried(0, [], state)
            messages.append(built)
        else:
            return Carried(0, [], state)
    return Carried(covers, messages, state, set(made))


def _made(
    history: Sequence[ModelMessage], owner: str, position: int, value: dict[str, Any], ops: list[object]
) -> dict[str, ModelMessage] | None:
    """The made messages *ops* name, read from the record at *position* or the earlier ones; `None` if one is
    missing or does not load."""
    wanted = {str_dict(op).get('new') for op in ops} - {None}
    found: dict[str, ModelMessage] = {}
    for _, each in itertools.chain([(position, value)], _records(history, owner, position)):
        if not wanted - found.keys():
            break
        for key, dumped in str_dict(each.get('new')).items():
            if key in wanted and key not in found:
                try:
                    found[key] = ModelMessagesTypeAdapter.validate_python([dumped])[0]
                except ValueError:
                    return None
    return found if all(isinstance(key, str) and key in found for key in wanted) else None
