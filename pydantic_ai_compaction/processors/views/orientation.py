"""Orientation (seed 003, condition G): the full history plus the curator's orientation."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic_ai.tools import AgentDepsT

from pydantic_ai_compaction.processors.views.curation import CuratedSelection


@dataclass
class Orientation(CuratedSelection[AgentDepsT]):
    """Everything is sent, plus the orientation a curator wrote for the request being answered.

    `CuratedSelection` with the full history in place of the focal bundles: the same curator, checks,
    fallback and settings, which are all this class takes.

    Example:
        ```python
        agent = Agent(model, capabilities=[Orientation(model='openai:gpt-5.2')])
        ```
    """

    full_history: bool = field(default=True, init=False)
    """Always `True`: the full history is sent with the orientation."""
