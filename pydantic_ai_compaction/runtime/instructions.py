"""Instruction sources: where instruction changes come from, for restating them verbatim.

Only two kinds of text are ever restated: what the user wrote (their prompts after the opening one),
and lines of tool output that start with a marker the user configured. Content a tool supplies as a
user-role part (`ToolReturn(content=...)`) is tool output, never a user prompt, and unmarked tool
output never counts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import cast

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart

from pydantic_ai_compaction.protocols.metadata import record_extra, record_strings
from pydantic_ai_compaction.protocols.types import Exchange
from pydantic_ai_compaction.runtime.checks import ConfigurationError, check_instance
from pydantic_ai_compaction.runtime.memo import IdentityMemo
from pydantic_ai_compaction.runtime.pins import is_pinned
from pydantic_ai_compaction.runtime.segment import (
    ConversationView,
    is_restatement,
    our_record,
    settled_prefix,
    tool_content_parts,
)
from pydantic_ai_compaction.runtime.transcript import before_cut, return_text, user_text
from pydantic_ai_compaction.runtime.validate import note_start, view_records, view_starts_with

_TIMESTAMP = re.compile(
    r'[ \t]*(?:'
    r'\[[^\]\n]{1,40}\]'  # [12:00:01], [2026-03-15 08:01:05]
    r'|\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)?(?:Z|[+-]\d{2}:?\d{2})?'  # ISO 8601 and close
    r'|\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?'  # 08:01:05
    r')[ \t]+'
)
"""An optional timestamp a log line may start with before its marker."""


@dataclass(frozen=True)
class InstructionSources:
    """Which texts count as instruction changes. Unmarked tool output never does.

    `markers` has no default on purpose: reading instructions from tool output is a decision about
    trust, so it is made explicitly. `InstructionSources(markers=())` restates only what the user
    wrote; `InstructionSources(markers=('CHANGE:',))` also restates tool-output lines that start with
    `CHANGE:` (after an optional timestamp), as in the seed study's logs.

    Example:
        ```python
        InstructionSources(markers=('CHANGE:', re.compile(r'POLICY CHANGE\\b')))
        ```
    """

    markers: Sequence[str | re.Pattern[str]]
    """A tool-output line is an instruction change when, after an optional leading timestamp, it starts with
    one of these strings or one of these patterns matches there. `()` reads no tool output at all."""

    user_prompts: bool = True
    """Treat every user prompt after the opening one as an instruction change (only text the user wrote:
    content a tool attached to its result is not a user prompt)."""

    _compiled: tuple[str | re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    _strings: tuple[str, ...] | None = field(init=False, repr=False, compare=False)
    """The markers when all are strings (a text is then searched for them, not split into lines), else `None`."""

    _lead: str | None = field(init=False, repr=False, compare=False)
    """The first character every string marker starts with, if they share one: a text without it holds none."""

    _marks: IdentityMemo[tuple[str, ...]] = field(init=False, repr=False, compare=False)
    """Marked lines per part (weak), so a part is split into lines once, not at every compaction."""

    _gathered: list[tuple[tuple[Exchange, ...], tuple[str, ...]]] = field(init=False, repr=False, compare=False)
    """The lines `gather_instructions` found in the settled exchanges of the last few histories it read (newest
    first): a longer history starting with the same exchanges is read only after them."""

    def __post_init__(self) -> None:
        markers: object = self.markers
        if isinstance(markers, str | bytes | bytearray) or not isinstance(markers, Iterable):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(
                'InstructionSources.markers must be a sequence of strings or compiled patterns (a bare string would '
                f'be split into one-character markers), got {markers!r}'
                + (f'; write markers=({markers!r},).' if isinstance(markers, str) else '.')  # pyright: ignore[reportUnnecessaryIsInstance]
            )
        items: list[str | re.Pattern[str]] = []
        for index, marker in enumerate(cast('Iterable[object]', markers)):
            if isinstance(marker, str):
                if not marker.strip():
                    raise ConfigurationError(
                        f'InstructionSources.markers must not contain empty strings: item {index} is {marker!r}.'
                    )
                items.append(marker.strip())
            elif isinstance(marker, re.Pattern):
                pattern = cast('re.Pattern[str]', marker)
                if not isinstance(pattern.pattern, str):  # pyright: ignore[reportUnnecessaryIsInstance]
                    raise ConfigurationError(
                        f'InstructionSources.markers[{index}] must be a str pattern, got {marker!r}.'
                    )
                if pattern.search('') is not None:
                    # `''`, `'^'`, `'.*'`: every line of every tool result would be restated as an instruction, which
                    # the refusal of an empty string marker is there to prevent.
                    raise ConfigurationError(
                        f'InstructionSources.markers[{index}] must not match the empty string (it would mark every '
                        f'line of tool output as an instruction), got {marker!r}.'
                    )
                items.append(pattern)
            else:
                raise ConfigurationError(
                    f'InstructionSources.markers[{index}] must be a string or a compiled pattern, got {marker!r} '
                    f'({type(marker).__name__}).'
                )
        check_instance('InstructionSources', 'user_prompts', self.user_prompts, bool, 'True or False')
        object.__setattr__(self, '_compiled', tuple(items))
        strings = tuple(item for item in items if isinstance(item, str))
        object.__setattr__(self, '_strings', strings if len(strings) == len(items) else None)
        leads = {marker[0] for marker in strings}
        shared = len(strings) == len(items) and len(leads) == 1
        object.__setattr__(self, '_lead', leads.pop() if shared else None)
        object.__setattr__(self, '_marks', IdentityMemo[tuple[str, ...]]())
        object.__setattr__(self, '_gathered', [])

    def marked_lines(self, part: object, text_of: Callable[[], str]) -> tuple[str, ...]:
        """The marked lines of *part*'s text (`text_of()`), stripped; memoized by the part's identity."""
        if not self._compiled:
            return ()
        cached = self._marks.get((part,))
        if cached is not None:
            return cached
        return self._marks.put((part,), self.lines_in(text_of()))

    def lines_in(self, text: str) -> tuple[str, ...]:
        """The marked lines of *text*, stripped, in order.

        With string markers only, the text is searched for each marker (one scan, no line split out unless a
        marker occurs in it); a line is read only where a marker follows whitespace or the start of the text,
        as it must to start a line's body. With a pattern, every line is matched.
        """
        strings = self._strings
        if strings is None:
            return tuple(line.strip() for line in text.splitlines() if self.marked(line))
        if self._lead is not None and self._lead not in text:
            return ()  # one `memchr` over the text: the usual answer for output without the marker's first character
        found: dict[int, str] = {}
        for marker in strings:
            position = _find(text, marker, 0)
            while position >= 0:
                if position and not text[position - 1].isspace():
                    position = _find(text, marker, position + 1)  # inside a word: no line starts here
                    continue
                start, end = _line_around(text, position)
                line = text[start:end]
                if start not in found and self.marked(line):
                    found[start] = line.strip()
                position = _find(text, marker, end)
        return tuple(found[start] for start in sorted(found)) if len(strings) > 1 else tuple(found.values())

    def marked(self, line: str) -> bool:
        """Whether a tool-output line starts with a marker (after an optional timestamp)."""
        if not self._compiled:
            return False
        rest = line_body(line)
        for marker in self._compiled:
            if isinstance(marker, str):
                if rest.startswith(marker) or line.lstrip().startswith(marker):
                    return True
            elif marker.match(rest) is not None or marker.match(line.lstrip()) is not None:
                return True
        return False


def _find(text: str, marker: str, start: int) -> int:
    """`text.find(marker, start)`, skipping at memory speed to the marker's first character.

    A one-character search runs as `memchr`, many times faster than a search for the whole marker; a text in
    which that character never occurs (an upper-case marker in lower-case output) is passed over at once.
    """
    head = text.find(marker[0], start)
    return head if head < 0 else text.find(marker, head)


def _line_around(text: str, position: int) -> tuple[int, int]:
    """Start and end of the line of *text* holding *position*, as `str.splitlines` cuts it (any line break)."""
    start = text.rfind('\n', 0, position) + 1
    before = text[start:position].splitlines(keepends=True)
    if before:
        last = before[-1]
        # The text before the position, back to the previous newline, may hold another kind of line break.
        start = position if last.splitlines()[0] != last else position - len(last)
    end = text.find('\n', position)
    after = text[position : len(text) if end < 0 else end].splitlines()
    return start, position + (len(after[0]) if after else 0)


def line_body(line: str) -> str:
    """*line* without its leading whitespace and optional leading timestamp."""
    stamp = _TIMESTAMP.match(line)
    return line[stamp.end() :] if stamp else line.lstrip()


def tool_provided(message: ModelMessage, part: object) -> bool:
    """Whether *part* is a user-role part a tool supplied (`ToolReturn(content=...)`) rather than text the user wrote.

    *message* is the whole persisted request holding *part*; the runtime's `tool_content_parts` decides.
    """
    if not isinstance(part, UserPromptPart) or not isinstance(message, ModelRequest):
        return False
    index = next((i for i, other in enumerate(message.parts) if other is part), None)
    return index is not None and index in tool_content_parts(message)


def gather_instructions(view: ConversationView, sources: InstructionSources) -> tuple[str, ...]:
    """Every instruction change seen so far, oldest first, without repeats (a repeated one at its latest place).

    Changes restated by earlier compactions come first (their originals may be gone), then user
    prompts after the opening one and marked tool-output lines still in the history. The prompt of the turn in
    progress is left out while its exchange is the one being worked on: a restatement goes right before that
    exchange, and the model reads the prompt after it. Once the turn has gone on past its prompt (a compaction
    inside the run), the prompt sits before the restatement, so it is listed too, after the changes said before
    it, where "latest last" reads it as newer than them; it is not listed when none was (`_beside_turn`).
    """
    found: list[str] = []
    for record in view_records(view):  # read once per view
        found.extend(record_strings(record, 'restated'))
        found.extend(record_strings(record_extra(record), 'instructions'))
    recorded = len(found)
    exchanges = view.exchanges
    start = 0
    lines: list[str] = []
    for before, gathered in sources._gathered:  # pyright: ignore[reportPrivateUsage]
        if view_starts_with(view, before, _no_lines):  # the start shared with the view before is not read again
            start, lines = len(before), list(gathered)
            break
    owner: list[dict[int, ModelMessage]] = []  # built on the first user part: tool loops rarely need it
    settled = settled_prefix(exchanges)
    if settled > start:
        _gather(view, sources, exchanges[start:settled], lines, owner)
        kept = sources._gathered  # pyright: ignore[reportPrivateUsage]
        kept[:] = [(exchanges[:settled], tuple(lines)), *kept][:_GATHERED_KEPT]
        note_start(view, kept[0][0], _no_lines)  # the next view sharing them is not checked again, exchange by exchange
        start = settled
    _gather(view, sources, exchanges[start:], lines, owner)
    if not recorded:
        return _beside_turn(view, sources, _latest_places(lines), owner)
    # A line a record holds too is either that very turn, kept verbatim before the boundary holding the record (a
    # selective strategy kept the old rule's exchange), or the change said again: the first keeps the record's
    # place, the second takes its latest one. Where each line and each record sits tells them apart.
    held_after: list[tuple[int, set[str]]] = []  # per boundary, newest first: what it and the later ones hold
    held: set[str] = set()
    for position in range(len(exchanges) - 1, -1, -1):
        if exchanges[position].kind == 'boundary':
            held = held | _held(view, exchanges[position])
            held_after.append((position, held))
    last = held_after[0][0] if held_after else len(exchanges)
    said: list[tuple[str, bool]] = []  # each history line, and whether a record written after it holds it
    for position in range(min(last, len(exchanges))):  # the few kept before the newest boundary, read one by one
        one: list[str] = []
        _gather(view, sources, exchanges[position : position + 1], one, owner)
        if one:
            later = next((texts for at, texts in reversed(held_after) if at > position), set[str]())
            said.extend((text, _holds(later, text)) for text in one)
    # `lines` holds the exchanges' lines in their order, and a boundary has none: the rest came after the newest one.
    said.extend((text, False) for text in lines[len(said) :])
    return _beside_turn(view, sources, _ordered(found, said), owner)


def _beside_turn(
    view: ConversationView,
    sources: InstructionSources,
    gathered: tuple[str, ...],
    owner: list[dict[int, ModelMessage]],
) -> tuple[str, ...]:
    """*gathered*, without the finished turn in progress's own lines unless a change said before the turn is listed.

    Those lines are kept verbatim just before where a restatement goes: listed, they only repeat it, which is worth
    it where they must follow an older change (latest last), not where every change listed came after them.
    """
    if not gathered:
        return gathered
    exchanges, copies = view.exchanges, view.copies
    # Segmentation notes where it marked the current turn: a view it did not build is read whole.
    marked = copies[1] if copies is not None and copies[0] is exchanges else range(len(exchanges))
    turn = next((e for e in map(exchanges.__getitem__, marked) if e.protected == 'current_turn'), None)
    if turn is None or turn.unfinished:
        return gathered
    own: list[str] = []
    _gather(view, sources, (turn,), own, owner)
    mine = set(own)
    first = next((at for at, text in enumerate(gathered) if text in mine), None)
    if first is None or any(text not in mine for text in gathered[:first]):
        return gathered
    # Nothing listed was said before the turn: the model reads its lines first anyway, right above.
    return tuple(text for text in gathered if text not in mine)


def _held(view: ConversationView, exchange: Exchange) -> set[str]:
    """The instruction changes the records of one boundary exchange hold (restated, or carried on)."""
    texts: set[str] = set()
    for index, chosen in exchange.refs:
        parts = view.messages[index].parts
        for part in parts if chosen is None else [parts[p] for p in chosen]:  # a merged request holds others too
            record = our_record(part)
            if record is not None:
                texts.update(record_strings(record, 'restated'))
                texts.update(record_strings(record_extra(record), 'instructions'))
    return texts


def _holds(texts: set[str], text: str) -> bool:
    """Whether *texts* hold *text*, whole or as the start a `Reassert` cut."""
    return text in texts or any(text.startswith(before_cut(held)) for held in texts if before_cut(held) != held)


def _latest_places(lines: Iterable[str]) -> tuple[str, ...]:
    """*lines* without repeats, each at its latest place: a rule set back to its earlier wording (lowercase, then
    uppercase, then lowercase again) is restated last, where it wins, not before the wording it replaced."""
    return tuple(reversed(dict.fromkeys(reversed(list(lines)))))


def _ordered(recorded: list[str], said: list[tuple[str, bool]]) -> tuple[str, ...]:
    """The changes the records hold, then the history's lines in order, each once: a line said again takes its latest
    place, a line a record written after it holds (its own turn, kept verbatim) keeps the record's place."""
    # Records in the order they were written, each change at its latest place (a later checkpoint lists one again
    # when it was said again; a restatement lists every change, in order).
    ordered = dict.fromkeys(_latest_places(recorded))
    starts = {start: text for text in recorded if (start := before_cut(text)) != text}
    for text, own in said:
        key = (
            text
            if text in ordered
            else next((whole for start, whole in starts.items() if text.startswith(start)), None)
        )
        if own and key is not None:
            continue
        if key is not None:
            del ordered[key]
        ordered.pop(text, None)
        ordered[text] = None
    return tuple(ordered)


_GATHERED_KEPT = 4
"""Histories whose gathered lines an `InstructionSources` keeps (conversations sharing it each keep theirs)."""


def _no_lines(exchange: Exchange) -> bool:
    """Whether `gather_instructions` reads nothing from *exchange* (kept verbatim, or restated already)."""
    kind = exchange.kind
    return kind == 'opening' or kind == 'boundary' or kind == 'restatement'


def _gather(
    view: ConversationView,
    sources: InstructionSources,
    exchanges: Sequence[Exchange],
    found: list[str],
    owner_map: list[dict[int, ModelMessage]],
) -> None:
    """Append the instruction lines of *exchanges* to *found* (*owner_map*: the part owners, once built)."""
    messages = view.messages
    lines_in = sources.lines_in
    # The first-character test is `lines_in`'s own: a subclass that reads lines its own way is always called.
    lead = sources._lead if type(sources).lines_in is InstructionSources.lines_in else None  # pyright: ignore[reportPrivateUsage]
    # Without markers no tool output is read (`lines_in` and `marked_lines` find nothing): only user parts are.
    unmarked = (
        not sources._compiled  # pyright: ignore[reportPrivateUsage]
        and type(sources).lines_in is InstructionSources.lines_in
        and type(sources).marked_lines is InstructionSources.marked_lines
    )
    for exchange in exchanges:
        kind = exchange.kind
        if kind == 'opening' or kind == 'boundary' or kind == 'restatement':  # `_no_lines`, without a call
            continue
        for index, chosen in exchange.refs:
            message = messages[index]
            if not isinstance(message, ModelRequest):
                continue
            parts = message.parts if chosen is None else [message.parts[p] for p in chosen]
            for part in parts:
                if isinstance(part, ToolReturnPart):
                    if unmarked:
                        continue
                    content = part.content
                    if type(part) is ToolReturnPart and type(content) is str and part.outcome == 'success':
                        if lead is not None and lead not in content:
                            continue  # `lines_in`'s first test, without the call: no marker starts in this text
                        # A plain string is searched again rather than remembered: one search for a marker
                        # costs about what remembering its result does (what `model_response_str` returns).
                        lines = lines_in(content)
                    else:
                        lines = sources.marked_lines(part, lambda part=part: return_text(part))
                    if lines:
                        found.extend(lines)
                    continue
                if not isinstance(part, UserPromptPart) or is_restatement(part):
                    continue
                # The exchange in progress is kept verbatim after the restatement: restating it would only repeat
                # it. A turn that went on past its prompt sits before the restatement (`_beside_turn`).
                in_progress = exchange.unfinished
                if not owner_map:
                    owner_map.append(
                        {
                            id(item): request
                            for request in view.messages
                            if isinstance(request, ModelRequest)
                            for item in request.parts
                        }
                    )
                if tool_provided(owner_map[0].get(id(part), _fragment(message, chosen)), part):
                    # Tool output in a user-role part: read like any tool output, never as the user's words.
                    found.extend(sources.marked_lines(part, lambda part=part: user_text(part)))
                elif sources.user_prompts and not in_progress and not is_pinned(part):
                    text = user_text(part).strip()
                    if text:
                        found.append(text)


def _fragment(message: ModelRequest, chosen: tuple[int, ...] | None) -> ModelRequest:
    """*message* narrowed to the *chosen* parts, as `ConversationView.messages_of` gives it."""
    return message if chosen is None else replace(message, parts=[message.parts[p] for p in chosen])
