"""A degraded report never ends a run, even when the warnings filters make warnings errors.

A store that fails, an observer that raises: each is worked around and reported with a `RuntimeWarning`.
Under `-W error` (or pytest's `filterwarnings = error`) `warnings.warn` raises, which from a capability's hook
ended the agent's run; the report goes to the `pydantic_ai_compaction` logger instead. A mistake in the
user's own code or setup (a refused projection, an unknown model window, a compactor that cannot run) still
follows the filters: `tests/test_refusal_warnings.py` and the last two tests here show it raises.
"""

from __future__ import annotations

import logging
import sqlite3
import warnings
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import ForgetReasoning, Fork, Tiered, Trigger
from pydantic_ai_compaction.protocols.types import CompactionEvent
from pydantic_ai_compaction.runtime import engine
from pydantic_ai_compaction.runtime.degraded import SetupWarning, warn_degraded
from pydantic_ai_compaction.runtime.stores import SQLiteArchiveStore

from .support import ScriptedAgentModel, audit_agent, fork_json
from .test_store_faults import EVERY_TOOL, answers, key, memory_agent


def test_a_degraded_report_warns_from_its_callers_caller_and_is_logged_when_warnings_are_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def hook() -> None:
        warn_degraded('store down', stacklevel=2)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        hook()  # the line a user's code would see named
    assert [(str(w.message), w.category, w.filename) for w in caught] == [('store down', RuntimeWarning, __file__)]
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        with caplog.at_level(logging.WARNING, logger='pydantic_ai_compaction'):
            hook()
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ('pydantic_ai_compaction', 'WARNING', 'store down')
    ]


def test_a_failing_store_does_not_fail_the_run_when_warnings_are_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / 'corrupt.sqlite3'
    path.write_bytes(b'this is not a database\x00' * 512)
    agent, seen = memory_agent(SQLiteArchiveStore(path), key(), EVERY_TOOL)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        with caplog.at_level(logging.WARNING, logger='pydantic_ai_compaction'):
            output = agent.run_sync('What is the media timeout?').output
    assert output == 'done'
    assert 'Recall is unavailable' in answers(seen)['recall']
    logged = [r.getMessage() for r in caplog.records if r.name == 'pydantic_ai_compaction']
    assert any(m.startswith('Recall could not index this request') and 'not a database' in m for m in logged)
    numbered = 'Archive numbered new results from the history alone'
    assert any(m.startswith(numbered) and 'not a database' in m for m in logged)


def test_archive_numbering_from_the_history_does_not_fail_the_run_when_warnings_are_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / 'locked.sqlite3'
    store = SQLiteArchiveStore(path, busy_timeout_ms=20)
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute('BEGIN EXCLUSIVE')
    try:
        agent, _ = memory_agent(store, key(), EVERY_TOOL)
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            with caplog.at_level(logging.WARNING, logger='pydantic_ai_compaction'):
                assert agent.run_sync('go').output == 'done'
    finally:
        holder.execute('ROLLBACK')
        holder.close()
        store.close()
    logged = [r.getMessage() for r in caplog.records if r.name == 'pydantic_ai_compaction']
    assert any('numbered new results from the history alone' in m and 'database is locked' in m for m in logged)


def test_an_observer_that_raises_does_not_fail_the_run_when_warnings_are_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[CompactionEvent] = []

    def observer(event: CompactionEvent) -> None:
        seen.append(event)
        raise ValueError('observer bug')

    script = ScriptedAgentModel(logs=8, compactor=lambda messages, kind: fork_json(['g1']))
    agent = audit_agent(script, [Fork(trigger=Trigger(tokens=3_000), observer=observer)])
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        with caplog.at_level(logging.WARNING, logger='pydantic_ai_compaction'):
            assert agent.run_sync('Audit.').output == 'report: done'
    assert [e.kind for e in seen].count('compacted') >= 1
    logged = [r.getMessage() for r in caplog.records if r.name == 'pydantic_ai_compaction']
    assert logged == ["compaction observer raised ValueError('observer bug')"] * len(seen)


def test_a_compaction_that_fails_does_not_fail_the_run_when_warnings_are_errors(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object, **kwargs: object) -> object:
        raise KeyError('internal bug')

    monkeypatch.setattr(engine, '_build', broken)
    script = ScriptedAgentModel(logs=8, compactor=lambda messages, kind: fork_json(['g1']))
    agent = audit_agent(script, [Fork(trigger=Trigger(tokens=3_000))])
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        with caplog.at_level(logging.WARNING, logger='pydantic_ai_compaction'):
            result = agent.run_sync('Audit.')
    assert result.output == 'report: done'
    logged = [r.getMessage() for r in caplog.records if r.name == 'pydantic_ai_compaction']
    failed = "fork compaction failed and left the history unchanged: KeyError('internal bug')"
    assert logged and set(logged) == {failed}
    # Left unchanged: the prompt and every log the agent read are still in the history it ends with.
    assert sum(isinstance(m, ModelRequest) for m in result.all_messages()) == 1 + 8  # the prompt, 8 logs


def test_a_view_that_raises_does_not_fail_the_run_when_warnings_are_errors(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: ForgetReasoning[None], log: object) -> object:
        raise ValueError('scorer bug')

    monkeypatch.setattr(ForgetReasoning, 'decisions', broken)
    agent = audit_agent(ScriptedAgentModel(logs=3), [ForgetReasoning()])
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        with caplog.at_level(logging.WARNING, logger='pydantic_ai_compaction'):
            assert agent.run_sync('Audit.').output == 'report: done'
    logged = [r.getMessage() for r in caplog.records if r.name == 'pydantic_ai_compaction']
    assert logged == ["ForgetReasoning kept the history as it was: ValueError('scorer bug')"] * 4


def _ends_the_run_unlogged(agent: Agent[None, str], match: str, caplog: pytest.LogCaptureFixture) -> None:
    """*agent*'s run under warnings made errors raises the warning matching *match*, and nothing is logged."""
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        with (
            caplog.at_level(logging.WARNING, logger='pydantic_ai_compaction'),
            pytest.raises(RuntimeWarning, match=match),
        ):
            agent.run_sync('Audit.')
    assert [r for r in caplog.records if r.name == 'pydantic_ai_compaction'] == []


def test_a_setup_mistake_fails_the_run_when_warnings_are_errors(caplog: pytest.LogCaptureFixture) -> None:
    # Not a degraded report: a model whose window is unknown is the user's to fix. Swallowed and logged, the
    # compaction would be skipped on every request while the history grew, and the suite would pass without it.
    script = ScriptedAgentModel(logs=4, compactor=lambda messages, kind: fork_json(['g1']))
    agent = audit_agent(script, [Fork(trigger=Trigger(fraction=0.5))])
    _ends_the_run_unlogged(agent, r'context window of function:.* is not known', caplog)


def test_a_compactor_that_cannot_run_fails_the_run_when_warnings_are_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = audit_agent(ScriptedAgentModel(logs=8), [Fork(model='nosuch:model', trigger=Trigger(tokens=3_000))])
    _ends_the_run_unlogged(agent, r'fork: the compactor cannot run \(UserError: Unknown model', caplog)
    # Under the default filters the same run goes on: the mistake is shown, and compaction falls back.
    with pytest.warns(RuntimeWarning, match='the compactor cannot run'):
        assert (
            audit_agent(ScriptedAgentModel(logs=8), [Fork(model='nosuch:model', trigger=Trigger(tokens=3_000))])
            .run_sync('Audit.')
            .output
            == 'report: done'
        )


def test_a_warning_from_the_user_s_own_callback_fails_that_compaction_only(caplog: pytest.LogCaptureFixture) -> None:
    # Only the library's setup mistakes (`SetupWarning`) end the run: a `protect` predicate that warns under `-W error`
    # is a failing callback, handled as one that raises (`test_a_compaction_that_fails_...` above).
    def protect(exchange: object, messages: object) -> bool:
        warnings.warn('helper() is deprecated', DeprecationWarning, stacklevel=2)
        return False

    script = ScriptedAgentModel(logs=8, compactor=lambda messages, kind: fork_json(['g1']))
    agent = audit_agent(script, [Fork(trigger=Trigger(tokens=3_000), protect=protect)])
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        with caplog.at_level(logging.WARNING, logger='pydantic_ai_compaction'):
            result = agent.run_sync('Audit.')
    assert result.output == 'report: done'
    logged = {r.getMessage() for r in caplog.records if r.name == 'pydantic_ai_compaction'}
    assert logged == {
        "fork compaction failed and left the history unchanged: DeprecationWarning('helper() is deprecated')"
    }
    assert issubclass(SetupWarning, RuntimeWarning)  # a filter on RuntimeWarning still matches the setup mistakes


def _tiered_run(model: str) -> tuple[Agent[None, str], list[list[ModelMessage]]]:
    """An agent reading 8 long logs under `Tiered` with *model* for its handoff note; and the requests it sends."""
    sent: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(messages)
        if len(sent) <= 8:
            return ModelResponse(parts=[ToolCallPart('read_log', {'i': len(sent)}, tool_call_id=f'c{len(sent)}')])
        return ModelResponse(parts=[TextPart('done')])

    agent = Agent(FunctionModel(respond), capabilities=[Tiered(context_window=4_000, model=model)])

    @agent.tool_plain
    def read_log(i: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'log {i}: ' + 'line of output ' * 400

    return agent, sent


def test_a_tiered_note_model_that_cannot_run_is_shown_once_and_ends_the_run_when_warnings_are_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent, sent = _tiered_run('nosuch:model')
    said = r'ClearThenSummarize: the handoff note cannot be written \(UserError: Unknown model'
    with pytest.warns(SetupWarning, match=said):
        assert agent.run_sync('Audit the logs.').output == 'done'
    # The view goes on with the copied parts; the failure is said once in the note, not once more per summary.
    failed = '[handoff note could not be updated: UserError]'
    # Counted in what the model reads (a response's metadata, never sent, also holds the note: `runtime.carry`).
    counts = [sum(str(part).count(failed) for m in request for part in m.parts) for request in sent]
    assert max(counts) == 1 and counts.count(1) >= 2
    agent, _ = _tiered_run('nosuch:model')
    _ends_the_run_unlogged(agent, r'ClearThenSummarize: the handoff note cannot be written', caplog)


def test_a_setup_warning_quotes_an_error_s_text_up_to_500_characters_and_says_where_it_cut() -> None:
    from pydantic_ai.exceptions import UserError

    from pydantic_ai_compaction.runtime.degraded import warn_if_setup_error

    with pytest.warns(SetupWarning) as caught:
        assert warn_if_setup_error(UserError('x' * 600), 'fork', 'the compactor cannot run', 'the strategy')
    message = str(caught[0].message)
    assert f"(UserError: {'x' * 499}…); check the strategy's model=" in message
    assert not warn_if_setup_error(TimeoutError('slow'), 'fork', 'the compactor cannot run', 'the strategy')
