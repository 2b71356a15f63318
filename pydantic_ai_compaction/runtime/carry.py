"""A view's projection, saved with the history, so the next run sends the same one.

A view changes what a request sends, never the saved history, and keeps its projection on the run's
state. A chat whose every turn is a new run (`agent.run(prompt, message_history=...)`) would then start
each turn from the whole history again: `ClearThenSummarize` wrote a new handoff note from scratch at
every turn (a model call per turn, the facts of the earlier notes gone), and the request's prefix changed
at every turn, so the provider's cache never served it.

So a view also writes its projection as a record into the metadata of the response to the request that
first sent it, or of that request itself when its response was streamed (`on_request`; metadata is saved
with the history and never sent to a model), and the next run rebuilds
the projection from the newest record, when the history it is given is still the one the record was made
from (the same messages saying the same: `content_digest`). The record names the saved messages the projection
shows, so it stays small:

- `[start, stop]`: saved messages `start` to `stop - 1`, as they are;
- `{"at": i, "parts": [p, ...], "stubs": {"p": text}}`: saved message `i` with only the parts listed
  (a message segmentation split), the tool results named in `stubs` with that text as their content;
- `{"new": key}`: a message the view made (a handoff boundary), written whole once, under
  `new[key]` of the first record that shows it;
- first, `{"base": id, "count": n}`: the first *n* entries of the record `id` (an earlier one), so a record
  repeats nothing of the one before it that it keeps (most of it: clearing adds lines, it rarely changes them),
  and the records of a long chat grow with what changes, not with everything cleared so far.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress, count
from typing import Any, cast

from pydantic_ai.messages import (
    BaseToolReturnPart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    repair_messages,
)

from pydantic_ai_compaction.protocols.metadata import VIEW_RECORD, ours, str_dict, with_ours
from pydantic_ai_compaction.runtime.encoding import to_bytes, to_json
from pydantic_ai_compaction.runtime.pairing import answers_call
from pydantic_ai_compaction.runtime.tokens import tool_return_text, value_text

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

    base: Base | None = None
    """The record read, for the next one to build on."""


@dataclass(frozen=True)
class Base:
    """A record a later one may start from: its id and its entries, in full."""

    id: str
    ops: list[Any]
    depth: int = 0
    """How many records its entries name through `base` entries, one behind the other (0: written in full)."""


MAX_CHAIN = 100
"""The most records a record names one behind the other (`base`); the next is written in full. Each link is read at
the next run's start, and a chat that only clears names the one before at every record (1,166 deep after a
1,200-step loop)."""


def content_digest(messages: Sequence[ModelMessage]) -> str:
    """A digest of what a record relies on in *messages*: their order, kinds, parts and what each part says.

    A history that lost, gained or reordered messages, or whose text changed anywhere (a result masked, a prompt
    edited), has another digest: a record must not bring back what the application took out. One saved and loaded
    back (`ModelMessagesTypeAdapter`) has the same, and so does one whose timestamps a store rounded or moved to
    another time zone (they are left out: nothing a record rebuilds depends on them).
    """
    return content_digests(messages, (len(messages),))[len(messages)]


def content_digests(messages: Sequence[ModelMessage], ends: Iterable[int]) -> dict[int, str]:
    """`content_digest(messages[:end])` for each of *ends* (those within *messages*), in one pass over them."""
    # SHA-256, the first 32 hex digits: it reads every character the history holds, and where the processor has
    # SHA instructions it reads them half again as fast as BLAKE2b (8.8 against 13.3 ms over 1,000 messages of 8 KB).
    wanted = {end for end in ends if 0 <= end <= len(messages)}
    digest = hashlib.sha256()
    update = digest.update
    out: dict[int, str] = {0: digest.hexdigest()[:32]} if 0 in wanted else {}
    for index in range(max(wanted, default=0)):
        message = messages[index]
        update(to_bytes(message.kind + '\x1e'))
        for part in message.parts:
            call_id = getattr(part, 'tool_call_id', None)
            update(to_bytes(f'{part.part_kind}\x1f{call_id if isinstance(call_id, str) else ""}\x1f'))
            update(to_bytes(_said(part)))  # not joined to the head: a result's 8 KB would be copied once more
            update(b'\x1e')
        if index + 1 in wanted:
            out[index + 1] = digest.copy().hexdigest()[:32]
    return out


def _said(part: object) -> str:
    """What a part says, as the digest reads it (a file by its identifier)."""
    if isinstance(part, ToolReturnPart):
        result = cast('ToolReturnPart[Any]', part)
        content: object = result.content
        return content if isinstance(content, str) else tool_return_text(result)
    if isinstance(part, BaseToolReturnPart):
        return value_text(cast('object', part.content))
    if isinstance(part, UserPromptPart):
        if isinstance(part.content, str):
            return part.content
        return '\x1d'.join(
            item if isinstance(item, str) else getattr(item, 'content', None) or getattr(item, 'identifier', '')
            for item in part.content
        )
    if isinstance(part, ToolCallPart):
        return value_text(part.args)
    content = getattr(part, 'content', None)
    return content if isinstance(content, str) else ''


def encode(
    projection: Sequence[ModelMessage], covered: Sequence[ModelMessage], restub: Restub, written: set[str]
) -> tuple[list[Any], dict[str, Any]]:
    """The record of *projection* as *covered* (the saved messages it stands for) shows it, and the made
    messages whose keys are not in *written*, to write whole.

    Every derived entry is checked by building it back: what `read` gives is *projection*, message for message.
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


def settled(
    ops: list[Any], projection: Sequence[ModelMessage], covered: Sequence[ModelMessage], restub: Restub
) -> tuple[list[Any], list[ModelMessage]] | None:
    """*ops* (the entries of *projection* over *covered*) and *covered* as the next run will hold them, or `None`
    when that cannot be told part for part (the record is then written as it is, and read only if the next run holds
    *covered* as is).

    pydantic-ai's next run starts from the history it is given made provider-valid (`repair_messages`): requests in a
    row become one, its tool results first (a structured output's "Final result processed." and the next prompt),
    and the parts sitting between a request's tool results go after them (a `ToolReturn`'s content). A record naming
    the messages as this run holds them would name the wrong ones there. Only the requests where that can happen are
    given to pydantic-ai, each after a response that makes every call their results answer, so nothing else of the
    history is read twice; and an entry showing a merged request's parts becomes one showing those parts of the
    merged request: nothing a message says is copied into the record.
    """
    spots = _spots(covered)
    if not spots:
        return ops, list(covered)
    result: list[ModelMessage] = []
    owner: list[int] = []  # where each message of *covered* goes in *result*
    done = 0
    for start, stop in spots:
        # The messages before the spot, as they are (in C: a history has thousands).
        owner.extend(range(len(result), len(result) + start - done))
        result.extend(covered[done:start])
        run = cast('list[ModelRequest]', covered[start:stop])
        held = _as_held(run)
        if held is None:
            return None
        first = len(result)
        kept = {id(request): first + at for at, request in enumerate(held)}
        where = {id(part): first + at for at, request in enumerate(held) for part in request.parts}
        for request in run:
            places = {where[id(part)] for part in request.parts}
            if id(request) in kept:
                owner.append(kept[id(request)])
            elif len(places) == 1:
                owner.append(places.pop())
            elif not places:  # empty: merged into the request before it, or (first) the one after
                owner.append(owner[-1] if len(owner) > start else first)
            else:
                return None  # split across two: not a shape pydantic-ai makes
        result.extend(held)
        done = stop
    owner.extend(range(len(result), len(result) + len(covered) - done))
    result.extend(covered[done:])
    if len(result) == len(covered) and all(map(operator.is_, result, covered)):
        return ops, list(covered)
    translated = _translated(ops, projection, covered, result, owner, spots, restub)
    return None if translated is None else (translated, result)


def _spots(covered: Sequence[ModelMessage]) -> list[tuple[int, int]]:
    """The runs of requests in a row in *covered* that pydantic-ai's run start may change, in order: two or more,
    or one with a part between its tool results. Found in C where it can: this runs at every record."""
    kinds = list(map(_KIND, covered))
    flagged = [index for index in compress(count(1), map(operator.eq, kinds, kinds[1:])) if kinds[index] == 'request']
    flagged += [
        index
        for index in compress(count(), map((3).__le__, map(len, map(_PARTS, covered))))
        if kinds[index] == 'request' and _mixed(cast('ModelRequest', covered[index]))
    ]
    spots: list[tuple[int, int]] = []
    for index in sorted(flagged):
        if spots and index < spots[-1][1]:
            continue
        start, stop = index, index + 1
        while start > 0 and kinds[start - 1] == 'request':
            start -= 1
        while stop < len(kinds) and kinds[stop] == 'request':
            stop += 1
        spots.append((start, stop))
    return spots


_KIND = operator.attrgetter('kind')
_PARTS = operator.attrgetter('parts')


def _mixed(request: ModelRequest) -> bool:
    """Whether a part of *request* that answers no tool call sits between two that do (pydantic-ai moves it)."""
    parts = request.parts
    if len(parts) < 3:
        return False
    answers = [at for at, part in enumerate(parts) if answers_call(part) is not None]
    return len(answers) > 1 and answers[-1] - answers[0] + 1 > len(answers)


def _as_held(run: list[ModelRequest]) -> list[ModelRequest] | None:
    """*run* (requests in a row) as pydantic-ai's run start leaves them, or `None` if it would drop or add a part.

    Given to `repair_messages` after a response making the calls its results answer: alone, each result would be
    an orphan and dropped. That response is the last, whose calls pydantic-ai leaves unanswered as they are.
    """
    calls = [
        ToolCallPart(cast('ToolReturnPart', part).tool_name, tool_call_id=call)
        for request in run
        for part in request.parts
        if (call := answers_call(part)) is not None
    ]
    lead: list[ModelMessage] = [ModelResponse(parts=calls)] if calls else []
    held = repair_messages([*lead, *run], repair_last_response=False)[len(lead) :]
    given = sorted(id(part) for request in run for part in request.parts)
    if not all(isinstance(message, ModelRequest) for message in held):
        return None
    if sorted(id(part) for message in held for part in message.parts) != given:
        return None
    return cast('list[ModelRequest]', held)


@dataclass
class _Shown:
    """The pieces of a merged (or moved) request an entry shows, gathered in order."""

    at: int
    """Its position in the history as the next run holds it."""
    sent: list[ModelMessage] = field(default_factory=list[ModelMessage])
    """The messages the projection sent for them (pydantic-ai merges them when it sends them)."""
    places: dict[int, int] = field(default_factory=dict[int, int])
    """Where each of their parts (by id) sits in the merged request."""
    stubs: dict[str, str] = field(default_factory=dict[str, str])
    """The stubbed ones, by that place."""
    requests: list[ModelRequest] = field(default_factory=list[ModelRequest])
    """The saved requests they come from."""
    first: int = 0
    """The position of the first of them in the projection."""


def _translated(
    ops: list[Any],
    projection: Sequence[ModelMessage],
    covered: Sequence[ModelMessage],
    held: list[ModelMessage],
    owner: list[int],
    spots: list[tuple[int, int]],
    restub: Restub,
) -> list[Any] | None:
    """*ops* naming the messages of *held* (*covered* as the next run holds it: `owner[i]` is where `covered[i]`
    goes; *spots*: the runs of requests pydantic-ai may have changed), or `None` when an entry shows a merged request
    in a way no entry over *held* sends as it was sent."""
    out: list[Any] = []
    shown: _Shown | None = None
    places: dict[int, dict[int, int]] = {}
    starts = [start for start, _ in spots]

    def add_range(start: int, stop: int) -> None:
        if out and isinstance(out[-1], list) and cast('list[int]', out[-1])[1] == start:
            out[-1][1] = stop
        else:
            out.append([start, stop])

    def flush() -> bool:
        """Write the entry of the merged request shown last; `False` if no entry sends it as it was sent."""
        nonlocal shown
        if shown is None:
            return True
        group, shown = shown, None
        target = cast('ModelRequest', held[group.at])
        # As pydantic-ai sends the messages shown (one request, its parts in the order it gives them), part for part.
        sent = _as_held(cast('list[ModelRequest]', group.sent))
        if sent is None or len(sent) != 1 or not sent[0].parts:
            return False  # not merged when sent, or nothing but an empty request
        order = [group.places[id(part)] for part in sent[0].parts]
        if order != sorted(order):
            return False
        # pydantic-ai merges the requests it sends in a row, those whose instructions agree (or are unset), and the
        # merged request keeps the first set: sent in its place, the merged request must merge with the requests
        # around it as the ones shown did. So every request in that row has its instructions, or none.
        said = target.instructions
        if said != next((request.instructions for request in group.requests if request.instructions), None):
            return False
        before = itertools.takewhile(lambda m: isinstance(m, ModelRequest), reversed(projection[: group.first]))
        after = itertools.takewhile(lambda m: isinstance(m, ModelRequest), projection[group.first + len(group.sent) :])
        if any(cast('ModelRequest', m).instructions not in (None, said) for m in [*before, *after, *group.requests]):
            return False
        if order == list(range(len(target.parts))) and not group.stubs:
            add_range(group.at, group.at + 1)
        else:
            out.append({'at': group.at, 'parts': order, 'stubs': group.stubs})
        return True

    def pieces(op: object) -> Iterator[tuple[int, int, list[int] | None, dict[str, str]]]:
        """The saved messages an entry shows: `(start, stop, parts, stubs)`, a spot's requests one by one, the
        messages between spots as a whole (`parts` `None`: all of them)."""
        if isinstance(op, list):
            start, stop = cast('list[int]', op)
            while start < stop:
                spot = bisect.bisect_right(starts, start) - 1
                if spot >= 0 and start < spots[spot][1]:
                    yield start, start + 1, None, {}
                    start += 1
                else:
                    until = min(stop, starts[spot + 1]) if spot + 1 < len(starts) else stop
                    yield start, until, None, {}
                    start = until
        else:
            entry = cast('dict[str, Any]', op)
            yield entry['at'], entry['at'] + 1, entry['parts'], entry['stubs']

    position = 0  # in the projection, of the next message
    for op in ops:
        if isinstance(op, dict) and 'new' in op:
            if not flush():
                return None
            out.append(op)
            position += 1
            continue
        for start, stop, chosen, stubs in pieces(cast('object', op)):
            message, at = covered[start], owner[start]
            if held[at] is message:  # as it is (and those after it up to *stop*): the entry as it was, moved
                if not flush():
                    return None
                if chosen is None:
                    add_range(at, owner[stop - 1] + 1)
                else:
                    out.append({'at': at, 'parts': chosen, 'stubs': stubs})
                position += stop - start
                continue
            if not isinstance(message, ModelRequest):
                return None
            place = places.get(at)
            if place is None:
                place = places[at] = {id(part): where for where, part in enumerate(held[at].parts)}
            picked = list(range(len(message.parts))) if chosen is None else chosen
            if any(id(message.parts[p]) not in place for p in picked):
                return None
            if shown is None or shown.at != at:
                if not flush() or any(at <= _last_shown(each) for each in out):
                    return None  # a merged request shown twice, apart: one message there, not two
                shown = _Shown(at, first=position)
            if message in shown.requests:
                return None  # one request shown in two pieces: merged, they would be one
            built = (
                message if chosen is None else _build({'at': start, 'parts': chosen, 'stubs': stubs}, covered, restub)
            )
            if built is None:
                return None
            shown.requests.append(message)
            shown.sent.append(built)
            for p, part in zip(picked, built.parts, strict=True):
                shown.places[id(part)] = place[id(message.parts[p])]
                if str(p) in stubs:
                    shown.stubs[str(place[id(message.parts[p])])] = stubs[str(p)]
            position += 1
    return out if flush() else None


def _last_shown(entry: object) -> int:
    """The last position in the history an entry shows (-1 for a made message)."""
    if isinstance(entry, list):
        return cast('list[int]', entry)[1] - 1
    value = str_dict(entry).get('at')
    return value if isinstance(value, int) else -1


def record(
    owner: str,
    covers: int,
    digest: str,
    ops: list[Any],
    new: dict[str, Any],
    state: dict[str, Any],
    base: Base | None = None,
) -> tuple[dict[str, Any], Base]:
    """The record a view writes into a response's metadata, or a streamed step's request's (its entries the *base*
    record holds named by it), and the base it is for the next one."""
    identity = hashlib.blake2b(to_bytes(f'{owner}\x1f{digest}\x1f{to_json(ops)}'), digest_size=8).hexdigest()
    shared = 0
    if base is not None and base.depth < MAX_CHAIN:
        for mine, theirs in zip(ops, base.ops, strict=False):
            if mine != theirs:
                break
            shared += 1
    if base is not None and shared > 1:
        written, own = [{'base': base.id, 'count': shared}, *ops[shared:]], Base(identity, ops, base.depth + 1)
    else:
        written, own = ops, Base(identity, ops)
    value = {
        'owner': owner,
        'id': own.id,
        'covers': covers,
        'digest': digest,
        'messages': written,
        'new': new,
        'state': state,
    }
    return value, own


def with_record(response: ModelResponse, value: dict[str, Any]) -> ModelResponse:
    """*response* carrying *value* as its view record (its other metadata kept)."""
    return replace(response, metadata=with_ours(response.metadata, {VIEW_RECORD: value}))


def on_request(request: ModelRequest, value: dict[str, Any]) -> None:
    """Write *value* as a view record into the metadata of *request*, the saved request of a streamed step, in place.

    Under `agent.run_stream`, the history a run ends with holds the response pydantic-ai built from the stream,
    not the one `after_model_request` returned, so a record written there is lost; the step's saved request is in
    that history, as the same object. The one object this library changes in place, and only its metadata (never
    sent to a model, left out of `content_digest`): pydantic-ai itself fills that request in place after the hooks
    (its run id, the instructions and the changes it records), so it is this run's own.
    """
    request.metadata = with_ours(request.metadata, {VIEW_RECORD: value})


def record_id(message: ModelMessage, owner: str) -> str | None:
    """The id of the record *owner* wrote into *message*, if it holds one."""
    value = str_dict(ours(message.metadata).get(VIEW_RECORD)) if message.metadata else {}
    identity = value.get('id') if value.get('owner') == owner else None
    return identity if isinstance(identity, str) else None


def _records(history: Sequence[ModelMessage], owner: str, end: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """The records *owner* wrote into *history* before position *end*, newest first, with their message's position
    (a response's, or a streamed step's request: `on_request`)."""
    for index in range(end - 1, -1, -1):
        message = history[index]
        if message.metadata:
            value = str_dict(ours(message.metadata).get(VIEW_RECORD))
            if value.get('owner') == owner:
                yield index, value


def read(history: Sequence[ModelMessage], owner: str, restub: Restub, key: str | None = None) -> Carried | None:
    """The projection *owner* last recorded in *history*, rebuilt; `None` when there is none or none can be used.

    Nothing of a record is used once the history it was made from changed (`content_digest`): its state may repeat
    what the application took out (a handoff note quoting a deleted turn). When the newest record's history changed
    after an earlier record's, the newest earlier one whose history did not is read: pydantic-ai gives a result to a
    call another capability's rejection left without one when the next run starts, which changes the history the
    records written since stand for, not the one before. Every record is checked in one pass over the history (its
    digest taken at each record's end). A record made under another archive *key* (`state['key']`) gives its state
    but no messages: its lines name archive entries this run cannot read.
    """
    candidates: list[tuple[int, dict[str, Any], int]] = []
    for position, value in _records(history, owner, len(history)):
        covers = value.get('covers')
        # A record covers the messages before the one that holds it; one on a request (`on_request`) covers that
        # request too, whose own text it was made with.
        if (
            isinstance(covers, int)
            and not isinstance(covers, bool)
            and 0 < covers <= position + isinstance(history[position], ModelRequest)
            and isinstance(value.get('messages'), list)
        ):
            candidates.append((position, value, covers))
    digests = content_digests(history, {covers for _, _, covers in candidates})
    for position, value, covers in candidates:
        if value.get('digest') == digests[covers]:
            return _rebuilt(history, owner, restub, key, position, value, covers)
    return None


def _rebuilt(
    history: Sequence[ModelMessage],
    owner: str,
    restub: Restub,
    key: str | None,
    position: int,
    value: dict[str, Any],
    covers: int,
) -> Carried | None:
    """The projection of the record *value* (at *position*, standing for the first *covers* messages), rebuilt."""
    state = str_dict(value.get('state'))
    ops = value.get('messages')
    if state.get('key') != key:
        return Carried(0, [], state)
    expanded = _expanded(history, owner, position, cast('list[object]', ops))
    if expanded is None:
        return None
    ops, depth = expanded
    covered = history[:covers]
    made = _made(history, owner, position, value, ops)
    if made is None:
        return None
    messages: list[ModelMessage] = []
    last, split = -1, False  # the saved message shown last; whether by a part of it (the next may show another)
    for op in ops:
        if isinstance(op, list):
            start, stop = [*cast('list[object]', op), None, None][:2]
            # In order, each saved message shown once: a forged record must not send a message twice.
            if not (isinstance(start, int) and isinstance(stop, int) and last < start < stop <= covers):
                return None
            messages.extend(covered[start:stop])
            last, split = stop - 1, False
        elif isinstance(op, dict) and 'new' in op:
            messages.append(made[cast('dict[str, Any]', op)['new']])
        elif isinstance(op, dict):
            entry = cast('dict[str, Any]', op)
            index = entry.get('at')
            built = _build(entry, covered, restub)
            if built is None or not isinstance(index, int) or index < last or (index == last and not split):
                return None
            messages.append(built)
            last, split = index, True
        else:
            return None
    identity = value.get('id')
    base = Base(identity, list(ops), depth) if isinstance(identity, str) else None
    return Carried(covers, messages, state, set(made), base)


def _expanded(
    history: Sequence[ModelMessage], owner: str, position: int, ops: list[object]
) -> tuple[list[object], int] | None:
    """*ops* (of the record at *position*) with a leading `base` entry replaced by the entries it names, followed
    from record to record, and how many links that took; `None` when a base is not in the history before the record
    naming it (or is named twice, in a forged record).

    A loop over the records read once, not a call per link: a chain as deep as the ones written before `MAX_CHAIN`
    (a thousand links) went past the interpreter's recursion limit, and the run's requests went out unprojected.
    """
    by_id: dict[str, list[tuple[int, dict[str, Any]]]] | None = None
    rests: list[tuple[int, list[object]]] = []  # from the record read down: each link's count and its own entries
    seen: set[str] = set()
    while True:
        first = str_dict(ops[0]) if ops else {}
        if 'base' not in first:
            break
        identity, count = first.get('base'), first.get('count')
        if not (isinstance(identity, str) and isinstance(count, int) and not isinstance(count, bool) and count > 0):
            return None
        if identity in seen:
            return None
        seen.add(identity)
        if by_id is None:
            by_id = {}
            for at, earlier in _records(history, owner, position):  # newest first
                found = earlier.get('id')
                if isinstance(found, str):
                    by_id.setdefault(found, []).append((at, earlier))
        # The newest record of that id before the one naming it, as a scan back from there finds it.
        named = next((each for each in by_id.get(identity, ()) if each[0] < position), None)
        if named is None:
            return None
        position, earlier = named
        theirs = earlier.get('messages')
        if not isinstance(theirs, list):
            return None
        rests.append((count, ops[1:]))
        ops = cast('list[object]', theirs)
    full = ops
    for count, rest in reversed(rests):
        if len(full) < count:
            return None
        full = [*full[:count], *rest]
    return full, len(rests)


def _made(
    history: Sequence[ModelMessage], owner: str, position: int, value: dict[str, Any], ops: list[object]
) -> dict[str, ModelMessage] | None:
    """The made messages *ops* name, read from the record at *position* or the earlier ones; `None` if one is
    missing or does not load."""
    named = [str_dict(op).get('new') for op in ops if 'new' in str_dict(op)]
    if not all(isinstance(key, str) for key in named):
        return None  # a forged key (a list, a dict) names nothing
    wanted = set(cast('list[str]', named))
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
    return found if wanted <= found.keys() else None
