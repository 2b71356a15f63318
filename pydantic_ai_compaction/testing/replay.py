"""`replay`: compact a recorded history offline with any strategy, as the agent would have."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, Protocol, cast

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, ModelResponse
from pydantic_ai.models import Model, infer_model
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage

from pydantic_ai_compaction.runtime.compactor import close_models
from pydantic_ai_compaction.runtime.degraded import described
from pydantic_ai_compaction.runtime.transcript import clip


class Compacts(Protocol):
    """Anything with `compact(messages, ctx)`: our strategies, and every pydantic-ai-harness `CompactionStrategy`."""

    async def compact(self, messages: list[ModelMessage], ctx: RunContext[Any]) -> list[ModelMessage]:
        """Compact *messages* unconditionally."""
        ...


def load_history(source: Sequence[ModelMessage] | str | bytes | Path) -> list[ModelMessage]:
    """Messages from a list, JSON text or bytes (`ModelMessagesTypeAdapter` format), or a JSON file.

    A string is JSON when it starts with `[` (a message list always does), otherwise the path of a file.

    Raises:
        ValueError: *source* is a blank string or bytes (neither a message list nor a path), or the JSON of
            something else than a list (an object).
        TypeError: *source* is of another type, or a list holding something else than messages.
    """
    if isinstance(source, str | bytes) and not source.strip():
        raise ValueError(f'load_history.source must be a message list, its JSON or a file path, got {source!r}.')
    if isinstance(source, str | bytes) and source.lstrip()[:1] in ('{', b'{') and not _is_file(source):
        shown = clip(repr(source), 80)
        raise ValueError(f'load_history.source must be the JSON of a message list, got the JSON of an object: {shown}.')
    if isinstance(source, str) and not source.lstrip().startswith('['):
        source = Path(source)
    if isinstance(source, Path):
        return ModelMessagesTypeAdapter.validate_json(source.read_bytes())
    if isinstance(source, str | bytes):
        return ModelMessagesTypeAdapter.validate_json(source)
    if not isinstance(source, Sequence):  # pyright: ignore[reportUnnecessaryIsInstance]  # typed, but any value comes
        shown = clip(described(source), 80)
        raise TypeError(f'load_history.source must be a message list, its JSON or a file path, got {shown}.')
    messages = list(source)
    for index, message in enumerate(messages):
        if not isinstance(message, ModelRequest | ModelResponse):  # pyright: ignore[reportUnnecessaryIsInstance]
            shown = clip(described(message), 80)
            raise TypeError(f'load_history.source[{index}] must be a ModelRequest or a ModelResponse, got {shown}.')
    return messages


def _is_file(source: str | bytes) -> bool:
    """Whether *source* names a file that exists (`{run-42}.json` is a path, not the JSON of an object)."""
    try:
        return isinstance(source, str) and Path(source).is_file()
    except (OSError, ValueError):  # a name too long, a NUL in it: no file
        return False


async def replay(
    strategy: Compacts,
    messages: Sequence[ModelMessage] | str | bytes | Path,
    *,
    model: Model | str,
    deps: Any = None,
    usage: RunUsage | None = None,
) -> list[ModelMessage]:
    """Compact *messages* once with *strategy*, whatever its trigger says, outside an agent run.

    The same as pydantic-ai-harness's `compact_now` (without its span), and needs no harness.

    Args:
        strategy: Any of our strategies, or any harness `CompactionStrategy`.
        messages: The recorded history (messages, JSON, or a path to a JSON file).
        model: The model compaction calls go to (a `FunctionModel` or `TestModel` offline).
        deps: Dependencies for strategies that read them (a custom checkpoint).
        usage: Usage to add the compaction's model calls to.
    """
    history = load_history(messages)
    built = infer_model(model) if isinstance(model, str) else None
    ctx = RunContext[Any](
        deps=deps,
        model=built or cast(Model, model),
        usage=usage if usage is not None else RunUsage(),
    )
    try:
        return await strategy.compact(history, ctx)
    finally:
        # A replay is a run: what it built from names (its model, a compactor's) is closed as a run's is.
        await close_models(ctx)
        if built is not None:
            with suppress(Exception):
                async with built:
                    pass
