"""Compaction under durable execution: a DBOS agent killed after a compaction resumes to the same history."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentedModel

from pydantic_ai_compaction.protocols.archive import ArchivedResult, ArchiveError
from pydantic_ai_compaction.runtime import durable
from pydantic_ai_compaction.runtime.durable import DurableStore, compactor_request, is_durable_model
from pydantic_ai_compaction.runtime.stores import InMemoryArchiveStore, SQLiteArchiveStore

ROOT = Path(__file__).parent.parent


def needs_dbos() -> None:
    if not os.environ.get('CI'):  # in CI dbos is installed with the dev dependencies, so this must run
        pytest.importorskip('dbos', reason='dbos is not installed (pip install -e ".[dev]" installs it)')


def spawn(directory: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, '-m', 'tests.durable_worker', str(directory), mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def archived(directory: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(directory / 'archive.sqlite3') as db:
        return db.execute('SELECT ref, result_id, note FROM archived ORDER BY ref').fetchall()


def finish(process: subprocess.Popen[str]) -> None:
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output[-4000:]


def test_a_killed_durable_run_resumes_to_the_same_history_without_calling_the_compactor_again(tmp_path: Path) -> None:
    needs_dbos()
    clean, killed = tmp_path / 'clean', tmp_path / 'killed'
    clean.mkdir()
    killed.mkdir()
    (killed / 'block').write_text('yes')
    uninterrupted = spawn(clean, 'run')  # the two first runs share the machine's cores, in parallel
    interrupted = spawn(killed, 'run')
    recovery = spawn(killed, 'resume')  # imports now, waits for `resume` before it launches DBOS
    try:
        deadline = time.monotonic() + 90
        while not (killed / 'blocked').exists():
            assert interrupted.poll() is None, interrupted.communicate()[0][-4000:]
            assert time.monotonic() < deadline, 'the worker never reached the second compaction'
            time.sleep(0.05)
        os.kill(interrupted.pid, signal.SIGKILL)
        interrupted.communicate(timeout=30)
        assert interrupted.returncode == -signal.SIGKILL
        assert not (killed / 'history.json').exists()
        calls_before_kill = (killed / 'compactor_calls').read_text().count('fork')
        assert calls_before_kill == 2  # killed after the second compaction, as the worker promises

        (killed / 'block').unlink()
        (killed / 'resume').write_text('go')
        finish(recovery)  # DBOS recovers workflow `wf` from its checkpoints
        finish(uninterrupted)
    finally:  # a failure above must not leave a worker waiting
        for process in (uninterrupted, interrupted, recovery):
            if process.poll() is None:
                process.kill()
                process.communicate()

    expected = (clean / 'history.json').read_bytes()
    resumed = (killed / 'history.json').read_bytes()
    assert expected.count(b'"part_kind":"compaction"') >= 4
    assert resumed == expected
    # Archive wrote to its store in both runs, the same entries once each (numbered by the store's counter).
    assert archived(clean) == archived(killed)
    assert len(archived(clean)) >= 2
    assert b'"content":"[result r' in expected
    # The recovery replayed the two recorded compactions: every compaction called its compactor once.
    calls = (clean / 'compactor_calls').read_text().count('fork')
    assert (killed / 'compactor_calls').read_text().count('fork') == calls
    assert calls > calls_before_kill  # the resumed process compacted again, after the two it replayed
    assert max(int(n) for n in re.findall(rb'"sequence":(\d+)', expected)) >= 4


def entry(ref: str, note: str = 'n') -> ArchivedResult:
    return ArchivedResult('c', ref, 'r1', 'read', 'call', '{}', ref.encode(), note, 't')


@pytest.mark.parametrize('make', [InMemoryArchiveStore, lambda: SQLiteArchiveStore(':memory:')])
def test_a_replayed_write_is_idempotent_by_key(make: object) -> None:
    inner = make()  # pyright: ignore[reportCallIssue]
    store = DurableStore(inner)
    store.put_archived([entry('a1'), entry('a2')])
    store.put_archived([entry('a1'), entry('a2')])  # the write re-run after a lost checkpoint
    store.put_archived([entry('a2'), entry('a3')])
    assert [store.get_archived('c', ref) is not None for ref in ('a1', 'a2', 'a3', 'a4')] == [True, True, True, False]
    assert store.next_numbers('c', 'archive', 2) == [1, 2]  # outside a workflow: straight to the store
    # The plain stores refuse a reused key: that is what the wrapper spares a recovery.
    with pytest.raises(ArchiveError):
        inner.put_archived([entry('a1')])


def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart('summary')])


def test_the_request_model_wrapped_by_a_durability_capability_is_recognised() -> None:
    from pydantic_ai.durable_exec import _utils  # pyright: ignore[reportPrivateUsage]

    async def never(*_: object) -> ModelResponse:
        raise AssertionError('not called')

    plain = FunctionModel(reply)
    wrapped = _utils.DurableModel(
        plain,
        request_segment=never,
        request_stream_segment=never,  # pyright: ignore[reportArgumentType]
        compact_messages_segment=never,
        cancel_suspended_response_segment=never,  # pyright: ignore[reportArgumentType]
    )
    assert not is_durable_model(plain)
    assert is_durable_model(wrapped)
    assert is_durable_model(InstrumentedModel(wrapped))


async def test_outside_a_workflow_a_compactor_call_runs_once_inline() -> None:
    calls: list[int] = []

    async def call() -> ModelResponse:
        calls.append(1)
        return ModelResponse(parts=[TextPart('summary')])

    assert not durable.in_durable_workflow()
    response = await compactor_request('request', FunctionModel(reply), call)
    assert response.parts == [TextPart('summary')] and calls == [1]


async def test_in_a_temporal_workflow_a_model_the_workflow_cannot_reach_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Workflow:
        @staticmethod
        def in_workflow() -> bool:
            return True

    monkeypatch.setitem(sys.modules, 'temporalio.workflow', Workflow)
    assert durable.in_durable_workflow()

    async def call() -> ModelResponse:
        raise AssertionError('workflow code must not do I/O')

    with pytest.raises(UserError, match='Temporal workflow cannot reach'):
        await compactor_request('request', FunctionModel(reply, model_name='cheap'), call)
