"""Pinned user content: never dropped by any strategy, read and written in pydantic-ai-harness's format.

harness's `pin()` marks a `UserPromptPart` with model-invisible `TextContent.metadata`; this module reads
that same marker without importing harness, so a history pinned with harness is honoured here and one
pinned with `pin` below is honoured by harness's strategies.
"""

from __future__ import annotations

from pydantic_ai.messages import TextContent, UserPromptPart

PIN_METADATA = 'pydantic-ai-harness.compaction.pin.v1'
"""The `TextContent.metadata` value harness's `pin()` writes (`pydantic_ai_harness.compaction._pinning`)."""


def pin(content: str) -> UserPromptPart:
    """A user prompt part every strategy keeps verbatim (harness's `pin()`, without harness).

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest

        from pydantic_ai_compaction.runtime.pins import pin

        request = ModelRequest(parts=[pin('The audit covers March only.')])
        ```
    """
    return UserPromptPart(content=[TextContent(content, metadata=PIN_METADATA)])


def is_pinned(part: object) -> bool:
    """Whether *part* is a user prompt part holding pinned text."""
    return (
        isinstance(part, UserPromptPart)
        and not isinstance(part.content, str)
        and any(isinstance(item, TextContent) and item.metadata == PIN_METADATA for item in part.content)
    )
