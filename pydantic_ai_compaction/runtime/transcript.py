"""Readable renderings of exchanges: one-line descriptions for the fork, transcripts for summaries."""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterable, Sequence

from pydantic_ai.messages import (
    ERROR_OUTCOMES,
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponsePart,
    RetryFeedbackPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_core import to_jsonable_python

from pydantic_ai_compaction.protocols.types import Exchange
from pydantic_ai_compaction.runtime.encoding import args_text, clean_text, to_json
from pydantic_ai_compaction.runtime.pins import is_pinned
from pydantic_ai_compaction.runtime.segment import ConversationView, is_restatement, tool_content_parts


def cut_to(text: str, limit: int) -> str:
    """*text* as it is up to *limit* characters, then how many more it had: `… [1,234 more chars]`.

    A text cut so already is cut again from what it kept, its count carried: a restatement read back from a record
    is cut again at the next compaction, and must come out as the original does (or it would be restated beside
    itself), at the same limit or at another one set since.
    """
    marked = _CUT_MARK.search(text)
    if marked is None:
        return text if len(text) <= limit else text[:limit] + f'… [{len(text) - limit:,} more chars]'
    kept = text[: marked.start()]
    if len(kept) <= limit:
        return text
    more = int(marked.group(1).replace(',', '')) + len(kept) - limit
    return kept[:limit] + f'… [{more:,} more chars]'


_CUT_MARK = re.compile(r'… \[([0-9]{1,3}(?:,[0-9]{3}){0,8}) more chars\]\Z')
"""The mark `cut_to` ends a cut text with: a count as `{:,}` writes it (a text ending in anything else, a longer
count or commas alone, was not cut by it, and is cut)."""


def before_cut(text: str) -> str:
    """*text* without the mark `cut_to` ended it with, if it did: what it says of the original, word for word."""
    marked = _CUT_MARK.search(text)
    return text[: marked.start()] if marked is not None else text


def clip(text: str, limit: int) -> str:
    """*text* on one line, cut to *limit* characters with an ellipsis."""
    if limit > 0 and len(text) > _CLIP_READ * limit:
        # A long text (a file a tool call writes, a pasted log) is cut from its start alone: the one-line
        # form of a start is the start of the one-line form, so once it is longer than *limit* the rest
        # cannot change the clipped line.
        start = ' '.join(text[: _CLIP_READ * limit].split())
        if len(start) > limit:
            return start[: limit - 1] + '…'
    flat = ' '.join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)] + '…'


_CLIP_READ = 4
"""`clip` first reads this many times its limit (whitespace runs may shrink it), only then the whole text."""


def user_text(part: UserPromptPart) -> str:
    """The text of a user prompt (non-text items shown by kind), one item a line: the model reads each item as a
    block of its own, so two joined without a break would no longer be the text it read (a restatement of a turn
    of two sentences ran them together, and a marked line took the next item in)."""
    if isinstance(part.content, str):
        return part.content
    pieces: list[str] = []
    for item in part.content:
        if isinstance(item, str):
            pieces.append(item)
        elif isinstance(item, TextContent):
            pieces.append(item.content)
        else:
            pieces.append(f'[{getattr(item, "kind", type(item).__name__)}]')
    return '\n'.join(pieces)


def return_text(part: ToolReturnPart) -> str:
    """A tool return's content as the model reads it (a value pydantic-ai cannot write as JSON: losslessly encoded)."""
    content = part.content
    if isinstance(content, str) and part.outcome not in ERROR_OUTCOMES:
        return content  # what `model_response_str` returns for a string, without its walk for files
    try:
        return part.model_response_str()
    except ValueError:
        # pydantic will not write a lone surrogate as JSON (it has no UTF-8 form): the value is read in the
        # lossless encoding instead (the surrogate as its escape), as recall stores it, so one odd character
        # in a result never stops a compaction from reading the rest.
        if isinstance(content, str):
            value = content  # an error's text: its wrapper below writes the surrogate as an escape
        else:
            try:
                value = to_json(to_jsonable_python(content))
            except ValueError:
                value = clean_text(str(content))
        return to_json({'error': value}) if part.outcome in ERROR_OUTCOMES else value


def result_chars(part: ToolReturnPart) -> int:
    """`len(return_text(part))`: how many characters of a tool result the model reads.

    A string result is its own text. Any other (a dict, a list, a model, files, an error) is read as the JSON
    pydantic-ai renders, whose length is known only once it is rendered: it is rendered once per part and
    remembered (parts are never changed in place), not once for every listing that shows it.
    """
    content = part.content
    if isinstance(content, str) and part.outcome not in ERROR_OUTCOMES:
        return len(content)
    known = _RESULT_CHARS.get(part)
    if known is None:
        known = _RESULT_CHARS.put(part, len(return_text(part)))
    return known


class _Sizes:
    """Sizes by part identity, never keeping a part alive.

    Lighter than `IdentityMemo`, whose callback per entry costs a third of rendering a small result: an entry
    holds a plain weak reference, is read only while it still points at the very part asked about (an id
    reused by a new part never reads an old size), and entries whose part is gone are swept each time the
    table has doubled.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[ToolReturnPart], int]] = {}
        self._sweep_at = _FIRST_SWEEP

    def get(self, part: ToolReturnPart) -> int | None:
        entry = self._entries.get(id(part))
        return entry[1] if entry is not None and entry[0]() is part else None

    def put(self, part: ToolReturnPart, size: int) -> int:
        entries = self._entries
        if len(entries) >= self._sweep_at:
            # Read from a copy, made in one step (`list(entries.items())` is not: the garbage collector may run
            # finalizers while it builds the pairs, and another thread then adds to the table, which raised
            # "dictionary changed size during iteration"). Another thread may sweep the same entries.
            for key, (ref, _) in entries.copy().items():
                if ref() is None:
                    entries.pop(key, None)
            self._sweep_at = max(_FIRST_SWEEP, 2 * len(entries))
        entries[id(part)] = (weakref.ref(part), size)
        return size

    def __len__(self) -> int:
        return len(self._entries)


_FIRST_SWEEP = 1024

_RESULT_CHARS = _Sizes()
"""`result_chars` of each structured result already rendered."""


def describe(view: ConversationView, exchange: Exchange, *, limit: int = 100) -> str:
    """One line saying what an exchange holds, for the fork's exchange list."""
    return _describe(view.messages, exchange, limit)


def _describe(messages: Sequence[ModelMessage], exchange: Exchange, limit: int) -> str:
    kind = exchange.kind
    if kind == 'restatement':
        return 'restated instructions'
    # The exchange's parts read in place (no fragment messages built), in one pass: the fork lists every
    # exchange of the history.
    if kind == 'boundary':
        summaries: list[str] = []
        for index, selected in exchange.refs:
            parts = messages[index].parts
            for part in parts if selected is None else [parts[p] for p in selected]:
                if isinstance(part, CompactionPart):
                    summaries.append(part.content or '(opaque provider compaction)')
        return 'earlier compaction: ' + clip(' '.join(summaries), limit)
    calls: list[ToolCallPart] = []
    sizes: dict[str, int] = {}
    prompts: list[str] = []
    texts: list[str] = []
    pinned = False
    for index, selected in exchange.refs:
        message = messages[index]
        parts: Sequence[ModelRequestPart | ModelResponsePart] = (
            message.parts if selected is None else [message.parts[p] for p in selected]
        )
        if isinstance(message, ModelRequest):
            for part in parts:
                if isinstance(part, ToolReturnPart):
                    sizes[part.tool_call_id] = result_chars(part)
                elif isinstance(part, UserPromptPart):
                    prompts.append(user_text(part))
                    pinned = pinned or is_pinned(part)
        else:
            for part in parts:
                if isinstance(part, ToolCallPart):
                    calls.append(part)
                elif isinstance(part, TextPart):
                    texts.append(part.content)
    if calls:
        if len(calls) == 1:  # most tool exchanges: one call, its line built without a generator and a join
            call = calls[0]
            name = call.tool_name
            rendered = f'{name}({clip(args_text(call.args), 60)}) → {sizes.get(call.tool_call_id, 0):,} chars'
            if len(rendered) <= limit and ' ' not in name and name.isprintable():
                # Already one line: the name holds no whitespace (`isprintable` is false for every other kind),
                # and a clipped text has no space at either end nor two in a row.
                return rendered
        else:
            rendered = ', '.join(
                f'{call.tool_name}({clip(args_text(call.args), 60)}) → {sizes.get(call.tool_call_id, 0):,} chars'
                for call in calls
            )
        return clip(rendered, limit)
    if kind in ('opening', 'turn') and prompts:
        return ('pinned: ' if pinned else 'user: ') + clip(' '.join(prompts), limit)
    return 'assistant: ' + clip(' '.join(texts), limit)


def listing(view: ConversationView, exchanges: Iterable[Exchange] | None = None) -> str:
    """Every exchange id with its kind, size, flags and a one-line description."""
    messages = view.messages
    lines: list[str] = []
    append = lines.append
    for exchange in exchanges if exchanges is not None else view.exchanges:
        if exchange.protected or exchange.unfinished:
            flags = f'{exchange.kind}, ~{exchange.tokens:,} tokens'
            if exchange.protected:
                flags += f', protected: {exchange.protected}'
            if exchange.unfinished:
                flags += ', in progress'
            append(f'{exchange.id} [{flags}] {_describe(messages, exchange, 100)}')
        else:
            append(f'{exchange.id} [{exchange.kind}, ~{exchange.tokens:,} tokens] {_describe(messages, exchange, 100)}')
    return '\n'.join(lines)


def render_messages(messages: Iterable[ModelMessage], *, tool_limit: int | None = None) -> str:
    """A plain transcript: who said what, tool calls with arguments, tool results with content."""
    lines: list[str] = []
    for message in messages:
        # A user part that `ToolReturn(content=...)` added is tool output: labelled as the user, its text
        # would read to a summarizer as the user's own instruction.
        from_tools = tool_content_parts(message) if isinstance(message, ModelRequest) else frozenset[int]()
        for index, part in enumerate(message.parts):
            if isinstance(part, SystemPromptPart):
                lines.append(f'SYSTEM: {part.content}')
            elif isinstance(part, UserPromptPart):
                label = 'TOOL CONTENT' if index in from_tools else 'RESTATED' if is_restatement(part) else 'USER'
                lines.append(f'{label}: {user_text(part)}')
            elif isinstance(part, ToolReturnPart):
                content = return_text(part)
                if tool_limit is not None and len(content) > tool_limit:
                    content = content[:tool_limit] + f'… [{len(content) - tool_limit:,} more chars]'
                lines.append(f'TOOL RESULT {part.tool_name} ({part.outcome}): {content}')
            elif isinstance(part, RetryFeedbackPart):
                lines.append(f'RETRY: {part.model_response()}')
            elif isinstance(part, CompactionPart):
                lines.append(f'EARLIER SUMMARY: {part.content or "(opaque provider compaction)"}')
            elif isinstance(part, TextPart):
                lines.append(f'ASSISTANT: {part.content}')
            elif isinstance(part, ToolCallPart):
                lines.append(f'TOOL CALL {part.tool_name}({args_text(part.args)})')
            elif isinstance(part, ThinkingPart) and part.content:
                lines.append(f'THINKING: {part.content}')
    return '\n'.join(lines)
