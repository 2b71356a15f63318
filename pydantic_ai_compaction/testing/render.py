"""A stable, readable rendering of a message list for snapshots and reviews.

Everything that changes from run to run (timestamps, random tool call ids, provider ids) is left
out or numbered in order of appearance, so the same compaction renders the same text every time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, cast

from pydantic_ai.messages import (
    BinaryContent,
    CompactionPart,
    FilePart,
    FileUrl,
    ModelMessage,
    ModelRequest,
    RetryFeedbackPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UploadedFile,
    UserPromptPart,
)

from pydantic_ai_compaction.runtime.encoding import args_text
from pydantic_ai_compaction.runtime.segment import is_restatement, our_record, segment
from pydantic_ai_compaction.runtime.transcript import return_text, user_text

DEFAULT_WIDTH = 80
"""Characters of content shown per part."""


def _clip(text: str, width: int) -> str:
    flat = text.replace('\n', '⏎')
    return flat if len(flat) <= width else flat[:width] + '…'


def render(messages: Sequence[ModelMessage], *, width: int = DEFAULT_WIDTH) -> str:
    """Render *messages*: one header line per message (index, role, exchange id), one line per part.

    Args:
        messages: The history to render.
        width: Characters of each part's content to show; the full length is always printed.
    """
    view = segment(messages)
    owner: dict[tuple[int, int], str] = {}
    for exchange in view.exchanges:
        for index, parts in exchange.refs:
            for part_index in parts if parts is not None else range(len(messages[index].parts)):
                owner[(index, part_index)] = exchange.id
    call_names: dict[str, str] = {}

    def call_name(call_id: str) -> str:
        return call_names.setdefault(call_id, f'call{len(call_names) + 1}')

    lines: list[str] = []
    for index, message in enumerate(messages):
        role = 'request' if isinstance(message, ModelRequest) else 'response'
        ids = sorted({owner.get((index, p), '?') for p in range(len(message.parts))}, key=_id_order)
        lines.append(f'[{index}] {role} {",".join(ids)}')
        if isinstance(message, ModelRequest) and message.instructions:
            # Dropped or changed by a compaction, the instructions are what the model no longer reads.
            text = message.instructions
            lines.append(f'{" " * 10}instructions ({len(text)}): {_clip(text, width)}')
        for part_index, part in enumerate(message.parts):
            tag = owner.get((index, part_index), '?')
            prefix = f'    {tag:>4} '
            lines.append(prefix + _render_part(part, width, call_name))
    return '\n'.join(lines) + '\n'


def _block(text: str) -> str:
    return ''.join('\n' + ' ' * 10 + '| ' + line for line in text.splitlines())


def _id_order(exchange_id: str) -> int:
    return int(exchange_id[1:]) if exchange_id[1:].isdigit() else -1


def _render_part(part: Any, width: int, call_name: Any) -> str:
    if isinstance(part, SystemPromptPart):
        return f'system ({len(part.content)}): {_clip(part.content, width)}'
    if isinstance(part, UserPromptPart):
        text = user_text(part)
        if is_restatement(part):
            return f'restatement ({len(text)}):' + _block(text)
        return f'user ({len(text)}): {_clip(text, width)}' + _media(part.content)
    if isinstance(part, ToolReturnPart):
        text = return_text(cast(ToolReturnPart, part))  # a structured result holding a lone surrogate, too
        return (
            f'return {call_name(part.tool_call_id)} {part.tool_name} {part.outcome} ({len(text)}): {_clip(text, width)}'
            + _media(part.content)
        )
    if isinstance(part, RetryFeedbackPart):
        text = part.model_response()
        return f'retry-feedback ({len(text)}): {_clip(text, width)}'
    if isinstance(part, ToolCallPart):
        args = args_text(part.args)
        return f'call {call_name(part.tool_call_id)} {part.tool_name} {_clip(args, width)}'
    if isinstance(part, TextPart):
        return f'text ({len(part.content)}): {_clip(part.content, width)}'
    if isinstance(part, ThinkingPart):
        # A signature stands for the text it signs: a changed one is a thinking block the provider refuses.
        signed = f' signed #{_digest(part.signature)}' if part.signature else ''
        return f'thinking{signed} ({len(part.content)}): {_clip(part.content, width)}'
    if isinstance(part, FilePart):
        return f'file{_media(part.content)}'
    if isinstance(part, CompactionPart):
        # What a compaction wrote is the point of a snapshot, so it is shown whole.
        content = part.content or ''
        line = f'compaction ({len(content)}):' + (_block(content) if content else ' (opaque provider data)')
        record = our_record(part)
        if record is not None:
            line += '\n' + ' ' * 10 + _render_record(record)
        return line
    return f'{getattr(part, "part_kind", type(part).__name__)}'


def _media(content: object) -> str:
    """The files in a prompt's or a tool result's *content*, each by its kind, its media type and its size and digest
    (binary), its URL or its file id: an image swapped for another, or for a PDF, is a change the text alone does not
    show."""
    items = cast('list[object]', content) if isinstance(content, list) else [content]
    return ''.join(f' [{shown}]' for item in items if (shown := _file(item)))


def _file(item: object) -> str:
    """One file of `_media`, or `''` for anything else."""
    if isinstance(item, BinaryContent):
        return f'{item.kind} {item.media_type} {len(item.data):,} bytes #{_digest(item.data)}'
    if isinstance(item, FileUrl):
        return f'{getattr(item, "kind", type(item).__name__)} {_clip(item.url, 80)}'
    if isinstance(item, UploadedFile):
        return f'{item.kind} {_clip(item.file_id, 80)}'
    return ''


def _digest(data: str | bytes) -> str:
    """The first 8 hex digits of *data*'s SHA-256: what tells two payloads apart in a snapshot, in a few characters."""
    return hashlib.sha256(data.encode('utf-8', 'surrogatepass') if isinstance(data, str) else data).hexdigest()[:8]


def _render_record(record: dict[str, Any]) -> str:
    fields = [
        f'strategy={record.get("strategy")}',
        f'variant={record.get("variant")}',
        f'kept={",".join(record.get("kept") or []) or "-"}',
        f'dropped={",".join(record.get("dropped") or []) or "-"}',
        f'rejected={",".join(record.get("rejected") or []) or "-"}',
        f'fallback={record.get("fallback_reason")}',
    ]
    if record.get('restated'):
        fields.append(f'restated={len(record["restated"])}')
    return 'record: ' + ' '.join(fields)
