"""Invariants under generated histories and fuzzed compactor replies (quick profile; `make soak` runs more)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage

from pydantic_ai_compaction import Fork, Trigger
from pydantic_ai_compaction.runtime import segment
from pydantic_ai_compaction.testing import replay

from .reliability import STRATEGIES, compact_and_check, fuzzed_replies, histories, reply_model

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '40'))
"""Examples per strategy: a quick profile in CI; `make soak` raises it."""


@pytest.mark.parametrize('name', list(STRATEGIES))
@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(data=st.data())
def test_every_compaction_keeps_the_invariants(name: str, data: st.DataObject) -> None:
    history: list[ModelMessage] = data.draw(histories())
    reply = data.draw(fuzzed_replies(list(segment(history).ids)))
    compact_and_check(name, history, reply)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories())
def test_nothing_happens_below_the_trigger(history: list[ModelMessage]) -> None:
    import asyncio

    from pydantic_ai import Agent

    seen: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: object) -> object:
        from pydantic_ai.messages import ModelResponse, TextPart

        seen.append(list(messages))
        return ModelResponse(parts=[TextPart('ok')])

    from pydantic_ai.models.function import FunctionModel

    agent = Agent(FunctionModel(respond), capabilities=[Fork(trigger=Trigger(tokens=10**9))])  # pyright: ignore[reportArgumentType]
    asyncio.run(agent.run(None, message_history=history))
    # The request went out as pydantic-ai prepared it: no fork call, no boundary.
    assert len(seen) == 1
    assert not any(
        getattr(p, 'part_kind', '') == 'compaction' and p not in [q for m in history for q in m.parts]
        for m in seen[0]
        for p in m.parts
    )


def test_fuzzed_replies_never_raise_out_of_the_capability() -> None:
    import asyncio

    from .support import recorded_history

    for reply in [
        '[' * 5000 + ']' * 5000,
        '\ud800',
        '{"keep": ' + '[' * 3000,
        'x' * 3_000_000,
        '{"keep": ["g0", "g6", "g6"], "summary": {}}',
    ]:
        out = asyncio.run(replay(Fork(), recorded_history(), model=reply_model(reply)))
        assert out  # a fallback, never an exception


@settings(max_examples=EXAMPLES * 3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), data=st.data())
def test_curator_replies_are_checked_never_trusted(history: list[ModelMessage], data: st.DataObject) -> None:
    from pydantic_ai_compaction import CuratedSelection

    view = segment(history)
    reply = data.draw(fuzzed_replies(list(view.ids)))
    curation, failure = CuratedSelection().check(reply, view)
    # Either a checked curation whose ids all exist and fit the budgets, or a recorded reason to fall back.
    assert (curation is None) != (failure is None)
    if curation is not None:
        assert all(i in view.by_id for i in curation.focal)
        assert len(curation.orientation) // 4 <= 2_000


@settings(max_examples=EXAMPLES * 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), budget=st.integers(1, 3_000))
def test_selection_views_keep_pairing_and_every_protected_exchange(history: list[ModelMessage], budget: int) -> None:
    from pydantic_ai_compaction.processors.views.selection import current_request_text, project, select
    from pydantic_ai_compaction.runtime import pairing_problems

    view = segment(history)
    sent = project(view, select(view, current_request_text(history), budget))
    assert pairing_problems(sent) == []
    assert sent[-1] is history[-1] or sent[-1].parts == history[-1].parts
    sent_parts = {id(p) for m in sent for p in m.parts}
    for exchange in view.exchanges:
        if exchange.forced:
            assert all(id(p) in sent_parts for m in view.messages_of(exchange) for p in m.parts)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories())
def test_tiered_clearing_keeps_pairing_and_never_touches_the_saved_history(history: list[ModelMessage]) -> None:
    import copy

    from pydantic_ai_compaction import Tiered
    from pydantic_ai_compaction.runtime import pairing_problems

    before = copy.deepcopy(history)  # not JSON: generated text holds lone surrogates
    tiered = Tiered(context_window=200, summarize=False, keep_results=1, clear_min_saving=0.01)
    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage())
    cleared = tiered._clear(list(history), 200, ctx)  # pyright: ignore[reportPrivateUsage]
    assert history == before
    if cleared is not None:
        assert pairing_problems(cleared) == []
        assert len(cleared) == len(history)
