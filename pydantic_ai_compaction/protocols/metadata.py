"""The metadata schema: every value this library keeps under `METADATA_KEY`, with its reader and writer.

Metadata is never sent to a model, so exchange ids, marks and boundary records ride along with the
history. It also comes back from storage written by any version of this library (or edited by hand),
so every reader here is defensive: a value of the wrong type reads as absent, never as an error, and
an odd old history never stops compaction for good.

Where our dict sits, and what it holds:

- a message's `metadata` ([`MessageMarks`][pydantic_ai_compaction.protocols.metadata.MessageMarks]):
  `exchange` (its exchange id), `reasoning`, `thinking_chars`, `output_tokens` (`ForgetReasoning`'s decision);
- a `ToolReturnPart`'s `metadata` ([`ResultMarks`][pydantic_ai_compaction.protocols.metadata.ResultMarks]):
  `result_id`, `id_prefix` (`Archive`'s numbering), `archived` (its archive reference), `cleared` (`Tiered`),
  `recall_answer` (`Recall`'s own answers);
- a `CompactionPart`'s `metadata`: the boundary record (`CompactionRecord.to_metadata()`, read back by
  `record_from_metadata`), plus `handoff` on a `Tiered` handoff boundary;
- a `TextContent`'s `metadata`: the string `RESTATEMENT_MARK` on a `Reassert` restatement;
- a `ModelResponse`'s `metadata`, under `VIEW_RECORD`: the projection a view (`ClearThenSummarize`) sent with the
  request this response answers, so the next run sends it again (`runtime.carry`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cache
from typing import Any, TypeVar, cast

from pydantic_ai_compaction.protocols.types import METADATA_KEY

RESTATEMENT_MARK = 'restatement'
"""Value under `METADATA_KEY` in the `TextContent.metadata` of a `Reassert` restatement."""

VIEW_RECORD = 'view'
"""Key, under `METADATA_KEY` in a response's metadata (a streamed step's request's), of the projection record a
view wrote (`runtime.carry`)."""

MAX_EXCHANGE_NUMBER = 10**12
"""Counters read back from records (`next_id`, `sequence`) above this are ignored as forged or corrupt."""

RECORD_STRING_LISTS = ('kept', 'dropped', 'rejected', 'restated', 'view_reduced')
"""Record fields holding lists of strings."""

RECORD_INTEGERS = ('sequence', 'next_id', 'tokens_before', 'tokens_after')
"""Record fields holding integers."""

RECORD_STRINGS = ('strategy', 'variant', 'boundary_id', 'fallback_reason', 'detail')
"""Record fields holding strings (or `None`)."""

RECORD_EXTRA_KEYS = (
    'notes',
    'structured_summary',
    'reply_tolerated',
    'instructions',
    'checkpoint',
    'omitted',
    'checkpoint_entries',
)
"""Keys the library's strategies write into a record's `extra` (a strategy may add its own)."""

_COUNTERS = ('sequence', 'next_id')


def str_dict(value: object) -> dict[str, Any]:
    """*value* if it is a dict (metadata read back from storage), else an empty dict."""
    return cast('dict[str, Any]', value) if isinstance(value, dict) else {}


def ours(metadata: object) -> dict[str, Any]:
    """The dict this library keeps under `METADATA_KEY` in *metadata*, or an empty dict."""
    return str_dict(str_dict(metadata).get(METADATA_KEY))


def with_ours(metadata: object, values: dict[str, Any]) -> dict[str, Any]:
    """A copy of *metadata* whose `METADATA_KEY` dict also holds *values* (other keys, ours or not, kept)."""
    current = str_dict(metadata)
    return {**current, METADATA_KEY: {**str_dict(current.get(METADATA_KEY)), **values}}


def _string(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _flag(value: object) -> bool:
    return value is True


_READERS: dict[str, Callable[[object], object]] = {'str | None': _string, 'int | None': _integer, 'bool': _flag}
"""How a mark of each declared type is read back: anything else reads as absent."""

M = TypeVar('M', bound='Marks')


@cache
def _fields_of(cls: type[Marks]) -> tuple[tuple[str, Callable[[object], object]], ...]:
    """Each field of a marks class and the reader of its type (`dataclasses.fields` reflects at every call)."""
    return tuple((field.name, _READERS[str(field.type)]) for field in fields(cast('Any', cls)))


@cache
def _unmarked(cls: type[Marks]) -> Marks:
    """A marks class's instance with no mark set (every field's default)."""
    return cls()


class Marks:
    """Base of the typed marks: each field is one key under `METADATA_KEY`, read and written by its type."""

    @classmethod
    def from_metadata(cls: type[M], metadata: object) -> M:
        """The marks in *metadata*; a value of the wrong type (forged, or from another version) reads as absent."""
        values = ours(metadata)
        if not values:
            # Most parts carry none of ours (a tool's result, a prompt): the marks are the defaults, one instance
            # per class (they are frozen), not read field by field (clearing reads every result's marks).
            return cast('M', _unmarked(cls))
        read = {name: reader(values.get(name)) for name, reader in _fields_of(cls)}
        return cls(**read)

    def to_metadata(self, metadata: object = None) -> dict[str, Any]:
        """A copy of *metadata* carrying these marks (the ones that are set); everything else is kept."""
        # `False` and `None` are how an unset mark reads, so neither is written; `0` is a value.
        values = {name: getattr(self, name) for name, _ in _fields_of(type(self))}
        return with_ours(
            metadata, {name: value for name, value in values.items() if value is not None and value is not False}
        )


@dataclass(frozen=True)
class MessageMarks(Marks):
    """What this library keeps in a message's metadata."""

    exchange: str | None = None
    """The exchange id the message belongs to (`g7`), stamped when a compaction lays the history out."""

    reasoning: str | None = None
    """`ForgetReasoning`'s decision for a response's thinking: `kept`, `dropped` or `deferred`."""

    thinking_chars: int | None = None
    """Characters of thinking the decision was about."""

    output_tokens: int | None = None
    """The response's output tokens when the decision was made."""

    unsigned_thinking: bool = False
    """Whether the thinking `ForgetReasoning` dropped was unsigned (no provider asks for it back). A step dropped
    without this mark (or by a version before it) is taken as signed: a provider that signs thinking needs it back
    if the step becomes the running tool loop again."""


@dataclass(frozen=True)
class ResultMarks(Marks):
    """What this library keeps in a `ToolReturnPart`'s metadata."""

    result_id: str | None = None
    """The id `Archive` gave the result (`r7`)."""

    id_prefix: str | None = None
    """The text `Archive` put before the result's content to show its id (removed to get the original back)."""

    archived: str | None = None
    """The archive reference (`a3`) of a result replaced by a stub."""

    cleared: bool = False
    """Whether `Tiered` replaced the result's content by a stub."""

    recall_answer: bool = False
    """Whether `Recall` answered this result: lines it quotes, found already (a reset's checkpoint leaves them out)."""


def exchange_stamp(metadata: object) -> str | None:
    """The exchange id in a message's metadata (`MessageMarks.exchange`, read without the other marks)."""
    return _string(ours(metadata).get('exchange'))


def is_restatement_mark(metadata: object) -> bool:
    """Whether a `TextContent`'s metadata marks it as a `Reassert` restatement."""
    return str_dict(metadata).get(METADATA_KEY) == RESTATEMENT_MARK


def is_handoff(metadata: object) -> bool:
    """Whether a `CompactionPart`'s metadata is a `ClearThenSummarize` handoff boundary (`extra['handoff']`)."""
    record = record_from_metadata(metadata)
    return record is not None and bool(record_extra(record).get('handoff'))


def record_from_metadata(metadata: object) -> dict[str, Any] | None:
    """The boundary record in a `CompactionPart`'s metadata, every field checked for its type, or `None`.

    A field of the wrong type is left out (`kept: 7` reads as no `kept`, a negative `next_id` as none).
    The record stays a dict: records written by other versions may hold fields this one does not know.
    """
    record = str_dict(metadata).get(METADATA_KEY)
    if not isinstance(record, dict):
        return None
    out = dict(cast('dict[str, Any]', record))
    for key in RECORD_STRING_LISTS:
        value = out.get(key)
        if value is not None:
            items = cast('list[object]', value) if isinstance(value, list | tuple) else []
            out[key] = [item for item in items if isinstance(item, str)]
    for key in RECORD_INTEGERS:
        value = out.get(key)
        if value is not None and _integer(value) is None:
            del out[key]
    for key in _COUNTERS:
        value = out.get(key)
        if isinstance(value, int) and not 0 <= value <= MAX_EXCHANGE_NUMBER:
            del out[key]
    for key in RECORD_STRINGS:
        if key in out and out[key] is not None and not isinstance(out[key], str):
            del out[key]
    if 'extra' in out:
        extra = str_dict(out['extra'])
        if 'notes' in extra:
            extra = {**extra, 'notes': record_strings(extra, 'notes')}
        out['extra'] = extra
    return out


def record_strings(values: dict[str, Any], key: str) -> list[str]:
    """The strings of the list under *key* (anything else in it, or a non-list, reads as nothing)."""
    value = values.get(key)
    items = cast('list[object]', value) if isinstance(value, list | tuple) else []
    return [item for item in items if isinstance(item, str)]


def record_extra(record: dict[str, Any]) -> dict[str, Any]:
    """A record's `extra` dict (empty when missing or not a dict)."""
    return str_dict(record.get('extra'))
