"""What the stores share: recall's query words, the archived row, and how any text goes into a column.

Query words are lowercase letters and digits of any script, so `timeout_ms` matches `timeout`.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from typing import Any

from pydantic_ai_compaction.protocols.archive import ArchivedResult, LogLine
from pydantic_ai_compaction.runtime.encoding import clean_text, from_bytes, has_surrogates, strip_nul, to_bytes

_ESCAPED = '\x1b'
"""Leads a column value holding, in base64, the bytes of a text no database can hold as it is."""


def db_text(text: str) -> str:
    """*text* as any text column can hold it (no NUL, no lone surrogate), reversibly.

    Text that needs it (a NUL, a lone surrogate, or the escape mark itself in front) is stored as the
    escape mark followed by the base64 of its lossless bytes (`to_bytes`); everything else as it is, so
    keys stay readable and equal text always gives equal column values (lookups by key keep working).
    Not JSON: JSON spells a high surrogate followed by a low one exactly as the character the pair
    encodes, so it cannot give such text back as it was.
    """
    if '\x00' in text or text.startswith(_ESCAPED) or has_surrogates(text):
        return _ESCAPED + base64.b64encode(to_bytes(text)).decode('ascii')
    return text


def py_text(value: str) -> str:
    """The inverse of `db_text`."""
    if value.startswith(_ESCAPED):
        try:
            return from_bytes(base64.b64decode(value[len(_ESCAPED) :], validate=True))
        except ValueError:
            return value  # not written by `db_text`: keep what is there
    return value


def index_text(text: str) -> str:
    """Text for a full-text index and for hits (lossy: no NUL, lone surrogates as U+FFFD)."""
    return clean_text(strip_nul(text))


SEARCH_CANDIDATES = 500
"""Matches a SQL store's search ranks, the newest first: ranking every match of a word that half of a
10M-token log holds took seconds, and a recall query looks for a specific value, not for the commonest words."""

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
        conversation_id=py_text(row[0]),
        ref=py_text(row[1]),
        result_id=py_text(row[2]),
        tool_name=py_text(row[3]),
        tool_call_id=py_text(row[4]),
        args_json=py_text(row[5]),
        payload=bytes(row[6]),
        note=py_text(row[7]),
        created_at=py_text(row[8]),
    )


def archived_row(entry: ArchivedResult) -> tuple[Any, ...]:
    """The row of an entry, in `ARCHIVED_COLUMNS` order."""
    return (
        db_text(entry.conversation_id),
        db_text(entry.ref),
        db_text(entry.result_id),
        db_text(entry.tool_name),
        db_text(entry.tool_call_id),
        db_text(entry.args_json),
        bytes(entry.payload),
        db_text(entry.note),
        db_text(entry.created_at),
    )


def line_context(line: LogLine) -> str:
    """What a line is matched against besides its own text: the call it came from."""
    return index_text(f'{line.tool_name} {line.args} {line.result_id}')
