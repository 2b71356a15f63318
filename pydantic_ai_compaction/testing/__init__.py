"""What users import in their own tests: rendering, the syrupy extension, replay of strategies and of views.

Names load on first use (PEP 562), so the pytest plugin in this package costs nearly nothing in a test run
that never touches compaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic_ai_compaction._lazy import lazy_names

if TYPE_CHECKING:
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

_LAZY: dict[str, str] = {
    'render': 'pydantic_ai_compaction.testing.render',
    'load_history': 'pydantic_ai_compaction.testing.replay',
    'replay': 'pydantic_ai_compaction.testing.replay',
    'BUDGET_PRESETS': 'pydantic_ai_compaction.testing.views',
    'MAX_TOTAL_TOKENS': 'pydantic_ai_compaction.testing.views',
    'MIN_PRIOR_TOKENS': 'pydantic_ai_compaction.testing.views',
    'Checkpoint': 'pydantic_ai_compaction.testing.views',
    'ViewReplay': 'pydantic_ai_compaction.testing.views',
    'checkpoints': 'pydantic_ai_compaction.testing.views',
    'replay_views': 'pydantic_ai_compaction.testing.views',
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())


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
