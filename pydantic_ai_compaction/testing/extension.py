"""A syrupy extension that stores message lists as readable `.txt` snapshots."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from pydantic_ai_compaction.testing.render import render


class CompactionSnapshotExtension(SingleFileSnapshotExtension):
    """Serialize a list of `ModelMessage` with `render`; strings are stored as they are."""

    file_extension = 'txt'
    _write_mode = WriteMode.TEXT

    def serialize(self, data: Any, **kwargs: Any) -> str:
        """The rendering of *data*."""
        del kwargs
        if isinstance(data, str):
            return data
        if isinstance(data, Sequence):
            return render(list(data))  # pyright: ignore[reportUnknownArgumentType]
        raise TypeError(f'compaction snapshots take a list of ModelMessage or a str, got {type(data).__name__}')


def as_messages(data: Sequence[ModelMessage]) -> list[ModelMessage]:
    """Typed helper for callers that build snapshots from tuples."""
    return list(data)
