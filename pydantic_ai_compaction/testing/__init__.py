"""What users import in their own tests: rendering, the syrupy extension, replay of strategies and of views.

The pytest plugin lives outside this package (`pydantic_ai_compaction.pytest_plugin`), so a test run that
never touches compaction does not import any of this.
"""

from pydantic_ai_compaction.testing.render import render
from pydantic_ai_compaction.testing.replay import load_history, replay
from pydantic_ai_compaction.testing.views import (
    BUDGET_PRESETS,
    MAX_TOTAL_TOKENS,
    MIN_PRIOR_TOKENS,
    Checkpoint,
    ViewReplay,
    checkpoints,
    replay_views,
)

__all__ = [
    'BUDGET_PRESETS',
    'MAX_TOTAL_TOKENS',
    'MIN_PRIOR_TOKENS',
    'Checkpoint',
    'ViewReplay',
    'checkpoints',
    'load_history',
    'render',
    'replay',
    'replay_views',
]
