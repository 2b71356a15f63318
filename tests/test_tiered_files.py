"""`ClearThenSummarize` counts and clears results that hold files (a screenshot tool), not only text."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent, BinaryContent, ToolReturn
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import Archive, ClearThenSummarize, InMemoryArchiveStore
from pydantic_ai_compaction.processors.memory.results import deserialize_part
from pydantic_ai_compaction.processors.views.tiered import HANDOFF_MARKER
from pydantic_ai_compaction.protocols.metadata import ResultMarks
from pydantic_ai_compaction.runtime.checks import ConfigurationError

PNG = BinaryContent(b'\x89PNG\r\n\x1a\n' + bytes(range(256)) * 8, media_type='image/png')


def screenshots(
    view: ClearThenSummarize[Any],
    steps: int,
    *,
    caption: str = '',
    store: InMemoryArchiveStore | None = None,
    beside: bool = False,
) -> list[list[ModelMessage]]:
    """A run that takes *steps* screenshots (each a tool result holding one image); the requests it sent."""
    sent: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[0] if messages[-1].parts else None
        if isinstance(last, UserPromptPart) and HANDOFF_MARKER in str(last.content):
            return ModelResponse(parts=[TextPart('Done: pages checked so far.')])
        sent.append(list(messages))
        if len(sent) > steps:
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('screenshot', {'page': len(sent)}, tool_call_id=f's{len(sent)}')])

    store = store or InMemoryArchiveStore()
    agent = Agent(FunctionModel(respond), capabilities=[Archive(store=store, conversation='c'), view])

    @agent.tool_plain
    def screenshot(page: int) -> Any:  # pyright: ignore[reportUnusedFunction]
        if beside:  # the image goes beside the result, as content the model reads, where clearing cannot reach
            return ToolReturn(return_value=f'page {page} shown', content=[PNG])
        return [caption, PNG] if caption else [PNG]

    agent.run_sync('Check every page.')
    return sent


def stubs(request: list[ModelMessage]) -> list[str]:
    return [
        str(p.content)
        for m in request
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart) and ResultMarks.from_metadata(p.metadata).cleared
    ]


def test_older_screenshots_are_cleared_once_their_images_fill_half_the_window() -> None:
    sent = screenshots(ClearThenSummarize(context_window=10_000, summarize=False), steps=8)
    # 1,600 tokens an image: the third puts the request past 5,000 tokens, and clearing keeps only the newest
    # (three would hold it over the threshold), two images at a time (each batch must save 1,000 tokens).
    assert [len(stubs(request)) for request in sent] == [0, 0, 0, 2, 2, 4, 4, 6, 6]
    assert stubs(sent[-1])[0] == '[cleared: 1 file (image/png); run it again for details]'
    kept = [p for p in sent[-1][-1].parts if isinstance(p, ToolReturnPart)]
    assert kept[0].files == [PNG]


def test_a_stub_names_the_files_and_the_text_of_a_result_that_holds_both() -> None:
    sent = screenshots(ClearThenSummarize(context_window=10_000, summarize=False), steps=8, caption='Page header')
    assert stubs(sent[-1])[0] == (
        '[cleared: 1 file (image/png) and 11 chars, began "Page header"; run it again for details]'
    )


def test_a_cleared_screenshot_is_archived_whole_and_its_stub_names_the_reference() -> None:
    store = InMemoryArchiveStore()
    sent = screenshots(
        ClearThenSummarize(context_window=10_000, summarize=False, store=store, conversation='c'), 8, store=store
    )
    stub = stubs(sent[-1])[0]
    assert stub.startswith('[cleared: 1 file (image/png); context_recover("a')
    ref = stub.split('"')[1]
    archived = store.get_archived('c', ref)
    assert archived is not None
    (file,) = deserialize_part(archived.payload).files
    assert isinstance(file, BinaryContent) and (file.data, file.media_type) == (PNG.data, 'image/png')


def test_with_files_counted_as_nothing_screenshots_are_never_cleared() -> None:
    # What every version before `file_tokens` did: the text estimate counts an image by its reference alone.
    sent = screenshots(ClearThenSummarize(context_window=10_000, summarize=False, file_tokens=0), steps=8)
    assert not any(stubs(request) for request in sent)


def test_images_beside_results_which_clearing_cannot_reach_are_summarized_away() -> None:
    view = ClearThenSummarize(context_window=10_000)
    sent = screenshots(view, steps=12, beside=True)
    # Each step's image would add 1,600 tokens for good: the summary replaces the older steps, images and all.
    counted = [view._tokens(request) for request in sent]  # pyright: ignore[reportPrivateUsage]
    assert max(counted) < 10_000 < 12 * 1_600
    assert any(isinstance(p, CompactionPart) for m in sent[-1] for p in m.parts)


def test_file_tokens_must_be_a_non_negative_integer() -> None:
    with pytest.raises(ConfigurationError, match=r'ClearThenSummarize\.file_tokens .*-1'):
        ClearThenSummarize(file_tokens=-1)
