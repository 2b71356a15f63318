"""A compactor model given by name is built once per run, not at every compaction call."""

from __future__ import annotations

import asyncio
import threading

import pytest
from pydantic_ai import RunContext
from pydantic_ai.exceptions import UserError
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage

from pydantic_ai_compaction import Fork, StatelessSummary, Trigger
from pydantic_ai_compaction.runtime import compactor
from pydantic_ai_compaction.runtime.context import CompactionContext

from .support import ScriptedAgentModel, audit_agent, fork_json


class Builder:
    """Stands in for `infer_model`: counts the names built, each into a new model scripted as *script*."""

    def __init__(self, script: ScriptedAgentModel, *, fail_first: int = 0) -> None:
        self.script = script
        self.built: list[str] = []
        self.fail_first = fail_first

    def __call__(self, name: str) -> Model:
        self.built.append(name)
        if len(self.built) <= self.fail_first:
            raise UserError('Set the `OPENAI_API_KEY` environment variable')
        return FunctionModel(self.script)


def test_a_summary_model_name_is_built_once_for_a_run_s_compactions(monkeypatch: pytest.MonkeyPatch) -> None:
    script = ScriptedAgentModel(logs=10)
    builder = Builder(script)
    monkeypatch.setattr(compactor, 'infer_model', builder)
    agent = audit_agent(script, [StatelessSummary(model='openai:gpt-4o-mini', trigger=Trigger(tokens=3_000))])
    assert agent.run_sync('Audit.').output == 'report: done'
    summaries = script.calls.count('summary')
    assert summaries >= 2  # several compactions, each reading the model twice (its window, then the request)
    assert builder.built == ['openai:gpt-4o-mini']
    # The next run builds it again: a key or base URL set between runs is used.
    script.step = 0
    assert agent.run_sync('Audit again.').output == 'report: done'
    assert script.calls.count('summary') > summaries
    assert builder.built == ['openai:gpt-4o-mini'] * 2


def test_a_name_that_cannot_be_built_is_tried_again_at_the_next_compaction(monkeypatch: pytest.MonkeyPatch) -> None:
    script = ScriptedAgentModel(logs=10, compactor=lambda messages, kind: fork_json(['g1']))
    builder = Builder(script, fail_first=1)
    monkeypatch.setattr(compactor, 'infer_model', builder)
    agent = audit_agent(script, [Fork(model='openai:gpt-4o-mini', trigger=Trigger(tokens=3_000))])
    with pytest.warns(RuntimeWarning, match='OPENAI_API_KEY'):
        assert agent.run_sync('Audit.').output == 'report: done'
    # The first compaction fell back; the next built the model and forked with it, and later ones reused it.
    assert builder.built == ['openai:gpt-4o-mini'] * 2
    assert script.calls.count('fork') >= 2


async def test_names_are_built_per_run_and_loop_and_the_kept_ones_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    builder = Builder(ScriptedAgentModel())
    monkeypatch.setattr(compactor, 'infer_model', builder)
    monkeypatch.setattr(compactor, '_BUILT', type(compactor._BUILT)())  # pyright: ignore[reportPrivateUsage]

    def context(run_id: str | None, usage: RunUsage) -> CompactionContext:
        run = RunContext[None](deps=None, model=TestModel(), usage=usage, run_id=run_id)
        return CompactionContext(run=run, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())

    usage = RunUsage()
    first = compactor.resolve_model('a:x', context('run-1', usage))
    assert compactor.resolve_model('a:x', context('run-1', RunUsage())) is first  # the run's id tells it
    assert compactor.resolve_model('a:y', context('run-1', usage)) is not first
    assert compactor.resolve_model('a:x', context('run-2', usage)) is not first
    # Without a run id, the run context object tells the run (not its usage, which replays may share).
    bare_ctx = context(None, usage)
    bare = compactor.resolve_model('a:x', bare_ctx)
    assert compactor.resolve_model('a:x', bare_ctx) is bare
    assert compactor.resolve_model('a:x', context(None, usage)) is not bare
    # Another thread's loop gets its own model (a client's connections belong to their loop).
    other: list[Model] = []
    thread = threading.Thread(target=lambda: other.append(asyncio.run(_resolve('a:x', context('run-1', usage)))))
    thread.start()
    thread.join()
    assert other[0] is not first
    assert compactor.resolve_model('a:x', context('run-1', usage)) is first
    built = len(builder.built)
    for number in range(40):
        compactor.resolve_model('a:x', context(f'many-{number}', usage))
    assert len(builder.built) == built + 40
    assert len(compactor._BUILT) == compactor._BUILT_KEPT  # pyright: ignore[reportPrivateUsage]
    # A model given as a model, or none (the request's own), is never built.
    given = TestModel()
    assert compactor.resolve_model(given, context('run-1', usage)) is given
    ctx = context('run-1', usage)
    assert compactor.resolve_model(None, ctx) is ctx.model
    assert len(builder.built) == built + 40


async def _resolve(name: str, ctx: CompactionContext) -> Model:
    return compactor.resolve_model(name, ctx)


def test_the_real_builder_gives_a_name_s_model_and_reuses_it_within_a_run() -> None:
    async def twice() -> tuple[Model, Model]:
        run = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), run_id='real')
        ctx = CompactionContext(run=run, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())
        return compactor.resolve_model('test', ctx), compactor.resolve_model('test', ctx)

    first, second = asyncio.run(twice())
    assert isinstance(first, TestModel)
    assert first is second


async def test_each_replay_is_a_run_of_its_own_even_with_a_shared_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    """`replay(usage=...)` totals several replays' usage: each still builds the model from its name again, so an
    environment changed between them (a key, a base URL) is used."""
    from pydantic_ai_compaction.testing import replay

    from .support import recorded_history

    builder = Builder(ScriptedAgentModel())
    monkeypatch.setattr(compactor, 'infer_model', builder)
    usage = RunUsage()
    summary = StatelessSummary(model='openai:gpt-4o-mini')
    for _ in range(3):
        await replay(summary, recorded_history(), model=TestModel(), usage=usage)
    assert builder.built == ['openai:gpt-4o-mini'] * 3  # once per replay: its window, then its request
    assert usage.requests == 3
