"""pytest plugin (registered through the `pytest11` entry point): the `compaction_snapshot` fixture.

It sits at the top of the package, outside `testing`, and imports nothing of the library until the fixture is
used, so it costs nearly nothing in the test runs of every project that has this package installed.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def compaction_snapshot(request: pytest.FixtureRequest) -> Any:
    """syrupy's `snapshot`, storing message lists as readable `.txt` files.

    Example:
        ```python
        from pydantic_ai_compaction import Fork
        from pydantic_ai_compaction.testing import load_history, replay


        async def test_fork(compaction_snapshot):  # with pytest-asyncio or anyio's pytest plugin
            history = load_history('tests/histories/audit.json')
            assert await replay(Fork(), history, model=model) == compaction_snapshot
        ```
    """
    import importlib.util

    if importlib.util.find_spec('syrupy') is None:
        pytest.fail('compaction_snapshot needs syrupy: pip install "pydantic-ai-compaction[testing]"', pytrace=False)
    from pydantic_ai_compaction.testing.extension import CompactionSnapshotExtension

    return request.getfixturevalue('snapshot').use_extension(CompactionSnapshotExtension)
