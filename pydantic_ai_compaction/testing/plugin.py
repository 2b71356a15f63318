"""pytest plugin (registered through the `pytest11` entry point): the `compaction_snapshot` fixture."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def compaction_snapshot(snapshot: Any) -> Any:
    """syrupy's `snapshot`, storing message lists as readable `.txt` files.

    Example:
        ```python
        def test_fork(compaction_snapshot):
            assert replay_sync(Fork(), history, model=model) == compaction_snapshot
        ```
    """
    from pydantic_ai_compaction.testing.extension import CompactionSnapshotExtension

    return snapshot.use_extension(CompactionSnapshotExtension)
