"""Query words for recall: lowercase letters and digits of any script, so `timeout_ms` matches `timeout`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic_ai_compaction.protocols.archive import ArchivedResult, LogLine

_WORD = re.compile(r'[^\W_]+')


def words(text: str) -> list[str]:
    """The searchable words of *text*, in order, without repeats."""
    return list(dict.fromkeys(_WORD.findall(text.lower())))


ARCHIVED_COLUMNS = 'conversation_id, ref, result_id, tool_name, tool_call_id, args_json, payload, note, created_at'
"""Column order of the archived table, shared by the SQL stores."""


def archived_from_row(row: Sequence[Any] | None) -> ArchivedResult | None:
    """An entry from a row selected with `ARCHIVED_COLUMNS`."""
    if row is None:
        return None
    return ArchivedResult(
        conversation_id=row[0], ref=row[1], result_id=row[2], tool_name=row[3], tool_call_id=row[4],
        args_json=row[5], payload=bytes(row[6]), note=row[7], created_at=row[8],
    )  # fmt: skip


def archived_row(entry: ArchivedResult) -> tuple[Any, ...]:
    """The row of an entry, in `ARCHIVED_COLUMNS` order."""
    return (
        entry.conversation_id, entry.ref, entry.result_id, entry.tool_name, entry.tool_call_id, entry.args_json,
        entry.payload, entry.note, entry.created_at,
    )  # fmt: skip


def line_context(line: LogLine) -> str:
    """What a line is matched against besides its own text: the call it came from."""
    return f'{line.tool_name} {line.args} {line.result_id}'
