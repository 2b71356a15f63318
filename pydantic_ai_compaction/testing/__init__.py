"""What users import in their own tests: rendering, the syrupy extension, replay."""

from pydantic_ai_compaction.testing.render import render
from pydantic_ai_compaction.testing.replay import load_history, replay

__all__ = ['load_history', 'render', 'replay']
