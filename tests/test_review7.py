"""Review findings on state shared between runs, conversations and threads (readings, facts, segmentation)."""

from __future__ import annotations

import asyncio
import os
import threading

from pydantic_ai.messages import ModelMessage, ToolCallPart

from pydantic_ai_compaction import InstructionSources, ResetToCheckpoint, Trigger
from pydantic_ai_compaction.processors.strategies.reset import FactExtractor, rare_lines
from pydantic_ai_compaction.runtime.engine import run_compaction

from .test_reset_scale import _context, _copy, _fingerprint, _loop
from .test_review6 import _call

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '15'))

_SOURCES = InstructionSources(markers=('INCIDENT',))


def _reset(extractor: FactExtractor | None = None) -> ResetToCheckpoint[None]:
    return ResetToCheckpoint[None](trigger=Trigger(tokens=1), max_chars=16_000, sources=_SOURCES, extract=extractor)


def _plain(call: ToolCallPart, text: str) -> list[str]:
    return rare_lines(call, text, limit=20)


def test_an_extractor_waiting_for_another_reset_in_another_thread_is_not_blocked_by_its_own_reading() -> None:
    """`extract` is the user's: it runs without the lock the reset readings share (a small model reading a result
    through another agent, in another thread, waited for ever)."""
    cctx = _context()
    other_history = [*_loop(['read']), *_call(1, 1), *_call(2, 2), *_call(3, 3)]
    finished = threading.Event()

    def helper() -> None:
        # Another agent with its own reset instance: nothing is shared with the run calling the extractor.
        asyncio.run(run_compaction(_reset(), _copy(other_history), cctx, min_saving=0.0))
        finished.set()

    def extract(call: ToolCallPart, text: str) -> list[str]:
        if 'INCIDENT 777 ' in text:
            worker = threading.Thread(target=helper, daemon=True)
            worker.start()
            worker.join(3)  # an extractor would wait for ever; bounded here so the test ends
        return _plain(call, text)

    history = [*_loop(['read']), *_call(1, 1), *_call(2, 777), *_call(3, 3)]
    asyncio.run(run_compaction(_reset(extract), history, cctx, min_saving=0.0))
    assert finished.is_set()
