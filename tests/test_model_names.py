"""A compactor model given by name is built once per run, not at every compaction call."""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from pydantic_ai import RunContext, models
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UserError
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage

from pydantic_ai_compaction import ClearThenSummarize, CuratedSelection, Fork, StatelessSummary, Trigger
from pydantic_ai_compaction.runtime import compactor
from pydantic_ai_compaction.runtime.context import CompactionContext

from .support import ScriptedAgentModel, audit_agent, fork_json
from .wire.stub_server import Stub, answer


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


class _KeepAlive(ThreadingHTTPServer):
    """The OpenAI stub over HTTP/1.1 keep-alive, counting the connections clients leave open."""

    daemon_threads = True

    def __init__(self, stub: Stub) -> None:
        self.stub = stub
        self.open = 0
        self.opened = 0
        self.lock = threading.Lock()
        super().__init__(('127.0.0.1', 0), _KeepAliveHandler)


class _KeepAliveHandler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    server: _KeepAlive

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.open += 1
            self.server.opened += 1

    def finish(self) -> None:
        super().finish()
        with self.server.lock:
            self.server.open -= 1

    def do_POST(self) -> None:
        answer(self, self.server.stub)

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


def _open_after(server: _KeepAlive) -> int:
    """The connections still open once a client that closed its own has had time to be seen closing them."""
    deadline = time.monotonic() + 5
    while server.open and time.monotonic() < deadline:
        time.sleep(0.02)
    return server.open


@pytest.fixture
def keep_alive(monkeypatch: pytest.MonkeyPatch) -> Iterator[_KeepAlive]:
    """The stub serving `openai-chat:` names (through the environment, as a user's key and base URL are given)."""
    monkeypatch.setattr(models, 'ALLOW_MODEL_REQUESTS', True)  # to the local server only
    server = _KeepAlive(Stub())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv('OPENAI_BASE_URL', f'http://127.0.0.1:{server.server_address[1]}/v1')
    monkeypatch.setenv('OPENAI_API_KEY', 'test-key')
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.parametrize('capability', ['fork', 'curator', 'tiered'])
def test_a_model_built_from_a_name_is_closed_when_its_run_ends(keep_alive: _KeepAlive, capability: str) -> None:
    """Its provider's HTTP client is closed: no connection is left open to the provider after the run (one was
    left open, and the client collected unclosed, before)."""
    name = 'openai-chat:gpt-4o-mini'
    chosen: AbstractCapability[None] = {
        'fork': lambda: Fork(model=name, trigger=Trigger(tokens=200)),
        'curator': lambda: CuratedSelection(model=name),
        'tiered': lambda: ClearThenSummarize(
            model=name, context_window=1_500, clear_at=0.3, summarize_at=0.5, summarize_to=0.2
        ),
    }[capability]()
    script = ScriptedAgentModel(logs=6)
    agent = audit_agent(script, [chosen])
    for run in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter('error', RuntimeWarning)  # a compaction that fell back would warn
            script.step = 0
            assert agent.run_sync('Audit the logs.').output == 'report: done'
        assert keep_alive.stub.seen[{'tiered': 'handoff'}.get(capability, capability)] > run
        assert _open_after(keep_alive) == 0
    assert keep_alive.opened >= 2


async def test_a_replay_closes_the_models_it_built_from_names(keep_alive: _KeepAlive) -> None:
    from pydantic_ai_compaction.testing import replay

    from .support import recorded_history

    name = 'openai-chat:gpt-4o-mini'
    # The replay's own model, then a summary's model given by name beside a model given as a model.
    for summary, model in ((StatelessSummary(), name), (StatelessSummary(model=name), TestModel())):
        compacted = await replay(summary, recorded_history(), model=model)
        assert len(compacted) < len(recorded_history())
        assert await asyncio.to_thread(_open_after, keep_alive) == 0
    assert keep_alive.stub.seen['summary'] == 2
    assert keep_alive.opened == 2


async def test_closing_leaves_other_runs_and_given_models_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    exits: list[str] = []

    class Closing(TestModel):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.built_as = name

        async def __aexit__(self, *args: object) -> None:
            exits.append(self.built_as)

    monkeypatch.setattr(compactor, 'infer_model', Closing)
    monkeypatch.setattr(compactor, '_BUILT', type(compactor._BUILT)())  # pyright: ignore[reportPrivateUsage]

    def context(run_id: str | None) -> CompactionContext:
        run = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), run_id=run_id)
        return CompactionContext(run=run, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())

    one, two, bare = context('run-1'), context('run-2'), context(None)
    given = Closing('given')
    for ctx in (one, two, bare):
        compactor.resolve_model('a:x', ctx)
        compactor.resolve_model('a:y', ctx)
        assert compactor.resolve_model(given, ctx) is given
    await compactor.close_models(one.run)
    assert sorted(exits) == ['a:x', 'a:y']
    await compactor.close_models(one.run)  # twice (two of our capabilities in one run): nothing more
    assert sorted(exits) == ['a:x', 'a:y']
    # Run 2's models are still its own (not built again), until it ends; a run without an id is told by its object.
    assert compactor.resolve_model('a:x', two).built_as == 'a:x'  # pyright: ignore[reportAttributeAccessIssue]
    await compactor.close_models(context(None).run)
    assert len(exits) == 2
    await compactor.close_models(bare.run)
    await compactor.close_models(two.run)
    assert sorted(exits) == ['a:x', 'a:x', 'a:x', 'a:y', 'a:y', 'a:y']
    assert not compactor._BUILT  # pyright: ignore[reportPrivateUsage]
