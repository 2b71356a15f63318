"""Fault injection: a store that fails never fails a run, and the store resumes when the fault clears.

SQLite: a full disk (`PRAGMA max_page_count`), a read-only file (a `mode=ro` URI: the tests run as root,
which file permissions do not stop), a file locked by another connection, a missing directory, a corrupt
file. PostgreSQL: the server terminating the store's connections (`pg_terminate_backend`), an unreachable
server (the DSN's password never shows), and a line too long for a `tsvector`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import socket
import sqlite3
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import Archive, Notes, Recall
from pydantic_ai_compaction.processors.memory.results import deserialize_part, original_part, result_id_of
from pydantic_ai_compaction.protocols.archive import ArchivedResult, ArchiveError, Note
from pydantic_ai_compaction.runtime.checks import ConfigurationError
from pydantic_ai_compaction.runtime.degraded import SetupWarning, is_setup_error
from pydantic_ai_compaction.runtime.stores import InMemoryArchiveStore, PostgresArchiveStore, SQLiteArchiveStore
from pydantic_ai_compaction.runtime.stores.access import call_store

from .stores import POSTGRES_DSN, postgres_store
from .support import Unprintable

REPORT = 'timeout_ms = 1050\nregion = eu-west-2\n'

# One of each memory tool, then the answer: what a store failure must never turn into a failed run.
EVERY_TOOL: list[list[ModelResponsePart]] = [
    [ToolCallPart('read', {'name': 'media'})],
    [ToolCallPart('note', {'kind': 'fact', 'text': 'media timeout is 1050'})],
    [ToolCallPart('context_apply', {'items': [{'result_id': 'r1', 'note': 'media report'}]})],
    [ToolCallPart('context_recover', {'archive_ref': 'a1'})],
    [ToolCallPart('recall', {'query': 'media timeout'})],
    [TextPart('done')],
]


def memory_agent(
    store: Any, key: str, steps: list[list[ModelResponsePart]], tools: dict[str, Callable[..., str]] | None = None
) -> tuple[Agent[None, str], list[list[ModelMessage]]]:
    """An agent with Archive, Recall and Notes on *store* under *key*, replaying *steps*."""
    seen: list[list[ModelMessage]] = []
    queue: Iterator[list[ModelResponsePart]] = iter(steps)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=next(queue))

    agent = Agent(
        FunctionModel(respond),
        capabilities=[
            Archive(store=store, conversation=key),
            Recall(store=store, conversation=key),
            Notes(store=store, conversation=key),
        ],
    )

    @agent.tool_plain
    def read(name: str) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'== report {name} ==\n' + REPORT

    for name, function in (tools or {}).items():
        agent.tool_plain(name=name)(function)
    return agent, seen


def answers(seen: list[list[ModelMessage]]) -> dict[str, str]:
    """Each tool's answer, by tool name (the last one wins)."""
    return {
        p.tool_name: original_part(p).model_response_str()  # without Archive's `[result rN]` line
        for m in seen[-1]
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }


def run_every_tool(store: Any, key: str) -> tuple[str, dict[str, str], list[str]]:
    """Run EVERY_TOOL; the output, each tool's answer and the warnings raised."""
    agent, seen = memory_agent(store, key, EVERY_TOOL)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        output = agent.run_sync('What is the media timeout?').output
    return output, answers(seen), [str(w.message) for w in caught]


def assert_degraded(output: str, said: dict[str, str], caught: list[str], cause: str) -> None:
    """The run finished; every tool answered with a short error naming the cause; indexing warned."""
    assert output == 'done'
    assert 'nothing was archived' in said['context_apply'] and cause in said['context_apply']
    assert 'could not be stored' in said['note'] and cause in said['note']
    assert 'Recall is unavailable' in said['recall'] and cause in said['recall']
    assert '\n' not in said['note'] and 'Traceback' not in said['note']
    assert any('Recall could not index' in message and cause in message for message in caught)


def assert_healthy(store: Any, key: str, said: dict[str, str]) -> None:
    assert said['context_apply'].endswith('Archived r1 as a1.')
    assert said['note'].endswith('Noted.')
    assert said['context_recover'].endswith('== report media ==\n' + REPORT)
    assert 'timeout_ms = 1050' in said['recall']
    assert store.notes(key) == [Note('fact', 'media timeout is 1050')]


def key() -> str:
    return f'faults-{uuid.uuid4().hex}'


# SQLite ---------------------------------------------------------------------------------------------------


def test_sqlite_disk_full_degrades_every_tool_and_resumes_when_space_returns(tmp_path: Path) -> None:
    store = SQLiteArchiveStore(tmp_path / 'full.sqlite3')
    connection: sqlite3.Connection = store._db  # pyright: ignore[reportPrivateUsage,reportAssignmentType]
    pages = connection.execute('PRAGMA page_count').fetchone()[0]
    connection.execute(f'PRAGMA max_page_count = {pages}')  # the disk is full: no page can be added
    conversation = key()
    # A big first result: archiving it needs new pages.
    steps = [[ToolCallPart('big', {})], *EVERY_TOOL[1:]]
    steps[2] = [ToolCallPart('context_apply', {'items': [{'result_id': 'r1', 'note': 'big output'}]})]
    agent, seen = memory_agent(store, conversation, steps, {'big': lambda: 'timeout_ms = 1050\n' + 'y' * 200_000})
    with warnings.catch_warnings(record=True):
        warnings.simplefilter('always')
        assert agent.run_sync('go').output == 'done'
    said = answers(seen)
    assert 'The archive store failed and nothing was archived' in said['context_apply']
    assert 'database or disk is full' in said['context_apply'] and str(tmp_path) in said['context_apply']
    # Nothing changed: the result is still there verbatim.
    big = next(p for m in seen[-1] for p in m.parts if isinstance(p, ToolReturnPart) and p.tool_name == 'big')
    assert 'archived as' not in big.model_response_str() and big.model_response_str().endswith('y' * 100)
    # Space comes back: the same store works again, in a new run and without reopening anything by hand.
    connection.execute('PRAGMA max_page_count = 1073741823')
    output, said, _ = run_every_tool(store, key())
    assert output == 'done'
    assert said['context_apply'].endswith('Archived r1 as a1.')


def test_sqlite_read_only_file_keeps_reads_and_answers_writes_with_an_error(tmp_path: Path) -> None:
    path = tmp_path / 'ro.sqlite3'
    conversation = key()
    writable = SQLiteArchiveStore(path)
    output, said, _ = run_every_tool(writable, conversation)
    assert_healthy(writable, conversation, said)
    writable.close()
    read_only = SQLiteArchiveStore(f'file:{path}?mode=ro')
    output, said, caught = run_every_tool(read_only, key())
    assert output == 'done'
    for tool in ('context_apply', 'note'):
        assert 'attempt to write a readonly database' in said[tool] and f'{path}?mode=ro' in said[tool]
    assert any('Recall could not index' in message for message in caught)
    assert said['recall'].startswith('No match')  # searching still works; nothing new could be indexed
    # What was stored before is still readable through the read-only store.
    assert read_only.notes(conversation) == [Note('fact', 'media timeout is 1050')]
    assert read_only.get_archived(conversation, 'a1') is not None


def test_sqlite_locked_file_degrades_then_resumes_when_the_lock_is_released(tmp_path: Path) -> None:
    path = tmp_path / 'locked.sqlite3'
    store = SQLiteArchiveStore(path, busy_timeout_ms=20)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute('BEGIN EXCLUSIVE')
    holder.execute("INSERT INTO notes (conversation_id, kind, text) VALUES ('other', 'fact', 'x')")
    output, said, caught = run_every_tool(store, key())
    assert output == 'done'
    assert 'database is locked' in said['context_apply'] and 'database is locked' in said['note']
    assert any('database is locked' in message for message in caught)
    holder.execute('COMMIT')
    conversation = key()
    output, said, _ = run_every_tool(store, conversation)
    assert_healthy(store, conversation, said)


def test_sqlite_missing_directory_degrades_then_resumes_once_it_exists(tmp_path: Path) -> None:
    store = SQLiteArchiveStore(tmp_path / 'not-yet' / 'archive.sqlite3')  # building it never raises
    output, said, caught = run_every_tool(store, key())
    assert_degraded(output, said, caught, 'unable to open database file')
    assert str(tmp_path / 'not-yet') in said['note']
    (tmp_path / 'not-yet').mkdir()
    conversation = key()
    output, said, _ = run_every_tool(store, conversation)
    assert_healthy(store, conversation, said)


def sqlite_notes(path: Path) -> list[Note]:
    """The notes a new store on *path* reads (as another process would), closed after."""
    store = SQLiteArchiveStore(path)
    try:
        return store.notes('c')
    finally:
        store.close()


def remove_sqlite_files(path: Path) -> None:
    for suffix in ('', '-wal', '-shm'):
        Path(f'{path}{suffix}').unlink(missing_ok=True)


@pytest.mark.parametrize('uri', [False, True], ids=['path', 'uri'])
def test_sqlite_file_removed_or_replaced_while_open_is_opened_again_and_nothing_written_after_is_lost(
    tmp_path: Path, uri: bool
) -> None:
    # The open connection went on writing to the unlinked file, reporting success: a new process found nothing.
    path = tmp_path / 'removed.sqlite3'
    store = SQLiteArchiveStore(f'file:{path}' if uri else path)
    store.add_note('c', Note('fact', 'before'))
    remove_sqlite_files(path)
    with pytest.warns(RuntimeWarning, match='removed or replaced while open; it is opened again'):
        store.add_note('c', Note('fact', 'after'))
    assert sqlite_notes(path) == [Note('fact', 'after')]
    # Replaced by another database (an operator restoring a backup): what the store reads is the new file's.
    other = tmp_path / 'backup.sqlite3'
    backup = SQLiteArchiveStore(other)
    backup.add_note('c', Note('fact', 'restored'))
    backup.close()  # its last connection: its log is written into the file, which is then whole on its own
    remove_sqlite_files(path)
    other.replace(path)
    with pytest.warns(RuntimeWarning, match='removed or replaced while open'):
        assert store.notes('c') == [Note('fact', 'restored')]
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # the same file again: no warning, nothing opened again
        store.add_note('c', Note('fact', 'then'))
    store.close()
    assert sqlite_notes(path) == [Note('fact', 'restored'), Note('fact', 'then')]


@pytest.mark.parametrize('given', ['archive.sqlite3', 'file:archive.sqlite3?cache=private'])
def test_sqlite_relative_path_stays_on_its_file_when_the_process_changes_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    # A relative path looked up again after `chdir` named another file: the store moved to a new, empty one.
    (tmp_path / 'a').mkdir()
    (tmp_path / 'b').mkdir()
    monkeypatch.chdir(tmp_path / 'a')
    store = SQLiteArchiveStore(given)
    store.add_note('c', Note('fact', 'written in a'))
    monkeypatch.chdir(tmp_path / 'b')
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        store.add_note('c', Note('fact', 'written after chdir'))
        assert store.notes('c') == [Note('fact', 'written in a'), Note('fact', 'written after chdir')]
    store.close()
    assert not list((tmp_path / 'b').iterdir())
    assert sqlite_notes(tmp_path / 'a' / 'archive.sqlite3') == store.notes('c')
    store.close()


def test_sqlite_relative_path_through_a_link_opens_the_file_the_system_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `link/../a.sqlite3` is `real/a.sqlite3` to the system (the link is followed before `..`); made absolute as
    # text it was `./a.sqlite3`, a new, empty file.
    (tmp_path / 'real' / 'inner').mkdir(parents=True)
    (tmp_path / 'link').symlink_to(tmp_path / 'real' / 'inner')
    existing = SQLiteArchiveStore(tmp_path / 'real' / 'a.sqlite3')
    existing.add_note('c', Note('fact', 'there'))
    existing.close()
    monkeypatch.chdir(tmp_path)
    store = SQLiteArchiveStore('link/../a.sqlite3')
    assert store.notes('c') == [Note('fact', 'there')]
    store.close()
    assert not (tmp_path / 'a.sqlite3').exists()


def test_sqlite_relative_path_in_a_removed_directory_is_built_and_its_operations_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tmp_path / 'gone'
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    store = SQLiteArchiveStore('archive.sqlite3')  # building it never raises
    with pytest.raises(ArchiveError, match='unable to open database file'):
        store.add_note('c', Note('fact', 'x'))
    # Once in a directory again, the path is resolved there, and stays with that file whatever `chdir` follows.
    (tmp_path / 'first').mkdir()
    (tmp_path / 'second').mkdir()
    monkeypatch.chdir(tmp_path / 'first')
    store.add_note('c', Note('fact', 'in first'))
    monkeypatch.chdir(tmp_path / 'second')
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert store.notes('c') == [Note('fact', 'in first')]
    store.close()
    assert not list((tmp_path / 'second').iterdir())


def test_sqlite_corrupt_file_degrades_then_resumes_once_replaced(tmp_path: Path) -> None:
    path = tmp_path / 'corrupt.sqlite3'
    path.write_bytes(b'this is not a database\x00' * 512)
    store = SQLiteArchiveStore(path)
    output, said, caught = run_every_tool(store, key())
    assert_degraded(output, said, caught, 'file is not a database')
    with pytest.raises(ArchiveError) as raised:
        store.get_archived('c', 'a1')
    assert (raised.value.operation, raised.value.target) == ('get_archived', str(path))
    path.unlink()  # the operator restores (here: recreates) the file
    conversation = key()
    output, said, _ = run_every_tool(store, conversation)
    assert_healthy(store, conversation, said)


def test_numbering_falls_back_to_the_history_with_a_warning_and_resumes_in_the_same_run(tmp_path: Path) -> None:
    path = tmp_path / 'numbers.sqlite3'
    store = SQLiteArchiveStore(path, busy_timeout_ms=20)
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute('BEGIN EXCLUSIVE')
    holder.execute("INSERT INTO notes (conversation_id, kind, text) VALUES ('other', 'fact', 'x')")

    def release() -> str:
        holder.execute('COMMIT')
        return 'released'

    steps: list[list[ModelResponsePart]] = [
        [ToolCallPart('read', {'name': 'a'})],
        [ToolCallPart('release', {})],
        [ToolCallPart('read', {'name': 'b'})],
        [TextPart('done')],
    ]
    conversation = key()
    agent, seen = memory_agent(store, conversation, steps, {'release': release})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        assert agent.run_sync('go').output == 'done'
    messages = [str(w.message) for w in caught]
    assert any('numbered new results from the history alone' in m and 'database is locked' in m for m in messages)
    # While the file was locked the first result got the id that follows the history's; once the lock is
    # gone the store numbers again, past the ids the history holds, and its counter is where it should be.
    returned = [p for m in seen[-1] for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [result_id_of(p) for p in returned] == ['r1', 'r2', 'r3']
    assert [result_id_of(p) for p in seen[1][-1].parts if isinstance(p, ToolReturnPart)] == ['r1']
    assert store.next_numbers(conversation, 'result', 1) == [4]


def test_a_blocked_store_call_does_not_stall_the_event_loop(tmp_path: Path) -> None:
    """A locked file makes the store wait; a ticker task on the same loop releases the lock.

    Were the store call made on the event loop, the ticker could not run, the lock would stay, and the
    write would fail after its busy timeout: the archive succeeding shows the loop kept running.
    """
    path = tmp_path / 'blocking.sqlite3'
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    waiting = threading.Event()
    ticks: list[int] = []

    class Locked(SQLiteArchiveStore):
        def put_archived(self, entries: Any) -> None:
            # Another connection takes the write lock just before this write, which then waits on it.
            holder.execute('BEGIN EXCLUSIVE')
            waiting.set()
            super().put_archived(entries)

    store = Locked(path, busy_timeout_ms=30_000)
    steps = [EVERY_TOOL[0], EVERY_TOOL[2], [TextPart('done')]]
    agent, seen = memory_agent(store, key(), steps)

    async def ticker() -> None:
        while not waiting.is_set():
            await asyncio.sleep(0.001)
        for tick in range(20):  # twenty turns of the loop while the store call is blocked
            ticks.append(tick)
            await asyncio.sleep(0.001)
        holder.execute('COMMIT')

    async def main() -> str:
        task = asyncio.create_task(ticker())
        result = await agent.run('go')
        await task
        return result.output

    assert asyncio.run(main()) == 'done'
    assert ticks == list(range(20))
    assert answers(seen)['context_apply'].endswith('Archived r1 as a1.')


def test_a_store_of_your_own_that_raises_anything_never_fails_the_run() -> None:
    class Broken(InMemoryArchiveStore):
        def add_note(self, conversation_id: str, note: Note) -> None:
            raise OSError('quota exceeded')

        def search(self, conversation_id: str, query: str, limit: int = 8) -> Any:
            raise KeyError('index')

        def get_archived(self, conversation_id: str, ref: str) -> ArchivedResult | None:
            raise RuntimeError('backend down')

    output, said, texts = run_every_tool(Broken(), key())
    assert output == 'done'
    # The model is told what failed and its kind; the user is warned with the store's own text.
    assert 'archive store: add_note failed (OSError)' in said['note'] and 'quota' not in said['note']
    assert 'archive store: search failed (KeyError)' in said['recall']
    assert 'could not be recovered now: archive store: get_archived failed (RuntimeError)' in said['context_recover']
    assert 'backend down' not in said['context_recover']
    assert any(text.startswith('Notes could not store a note') and 'OSError: quota exceeded' in text for text in texts)
    assert any(text.startswith('Recall could not search') and "KeyError: 'index'" in text for text in texts)
    assert any(text.startswith("Archive could not recover 'a1'") and 'backend down' in text for text in texts)


def test_a_store_error_or_a_key_that_cannot_be_written_is_reported_by_its_type_and_fails_no_run() -> None:
    class Broken(InMemoryArchiveStore):
        def add_note(self, conversation_id: str, note: Note) -> None:
            raise Unprintable

        def search(self, conversation_id: str, query: str, limit: int = 8) -> Any:
            raise Unprintable

        def index_lines(self, lines: Any) -> int:
            raise Unprintable

    output, said, texts = run_every_tool(Broken(), key())
    assert output == 'done'
    assert 'archive store: add_note failed (Unprintable)' in said['note']
    assert 'archive store: search failed (Unprintable)' in said['recall']
    shown = 'Unprintable: <Unprintable: str() failed>'
    assert any(text.startswith('Notes could not store a note') and text.endswith(shown) for text in texts)
    assert any(text.startswith('Recall could not index this request') and text.endswith(shown) for text in texts)

    # A key function that raises such an error, or returns a key that is no `str` and refuses `repr`.
    def raising(ctx: Any) -> str:
        raise Unprintable

    class Key:
        def __repr__(self) -> str:
            raise ValueError('repr refused')

    seen: list[list[ModelMessage]] = []
    steps = iter([EVERY_TOOL[1], EVERY_TOOL[4], EVERY_TOOL[-1]])  # note, recall, the answer

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=next(steps))

    capabilities = [Notes(conversation=raising), Recall(conversation=lambda ctx: Key())]  # pyright: ignore[reportArgumentType]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        agent = Agent(FunctionModel(respond), capabilities=capabilities)
        assert agent.run_sync('What is the timeout?').output == 'done'
    said = answers(seen)
    texts = [str(w.message) for w in caught]
    assert 'the conversation key function failed (Unprintable)' in said['note']
    assert 'the conversation key function returned Key, not a non-empty string' in said['recall']
    assert any(text.endswith('it returned <Key: repr() failed>') for text in texts), texts


def test_a_store_archive_error_that_cannot_be_written_is_reported_by_its_type_and_fails_no_run() -> None:
    class Unwritable(ArchiveError):
        def __str__(self) -> str:
            raise ValueError('str refused')

    class Broken(InMemoryArchiveStore):
        def add_note(self, conversation_id: str, note: Note) -> None:
            raise Unwritable('quota', operation='add_note')

        def search(self, conversation_id: str, query: str, limit: int = 8) -> Any:
            raise ArchiveError(Unprintable())  # a message that cannot be written

    output, said, texts = run_every_tool(Broken(), key())
    assert output == 'done'
    assert 'archive store: add_note failed (Unwritable)' in said['note']
    assert 'archive store: search failed (ArchiveError)' in said['recall']
    assert any(text.endswith('Unwritable: <Unwritable: str() failed>') for text in texts)


def test_an_archive_error_that_skipped_its_init_or_cannot_be_written_keeps_what_it_says_of_itself() -> None:
    class Bare(ArchiveError):
        def __init__(self, message: str) -> None:  # never calls ArchiveError.__init__: no `reported`, no `setup`
            self.message = message

    class Reported(ArchiveError):
        def __str__(self) -> str:
            raise ValueError('str refused')

    class Broken(InMemoryArchiveStore):
        def add_note(self, conversation_id: str, note: Note) -> None:
            raise Bare('quota')

        def index_lines(self, lines: Any) -> int:
            # Reported by the store already (once): not said again at every request.
            raise Reported('down', operation='index_lines', reported=True)

    output, said, texts = run_every_tool(Broken(), key())
    assert output == 'done'
    assert 'archive store: add_note failed (Bare)' in said['note']
    # Not reported by the store: the user is told; reported by it: not told again at every request.
    assert any(text.startswith('Notes could not store a note') and text.endswith('Bare: quota') for text in texts)
    assert not any(text.startswith('Recall could not index') for text in texts)


async def test_an_archive_error_that_cannot_be_written_is_re_raised_with_its_setup_and_target() -> None:
    class Refused(ArchiveError):
        def __str__(self) -> str:
            raise ValueError('str refused')

    def login() -> None:
        raise Refused('login refused', operation='open', target='db.example', setup=True)

    with pytest.raises(ArchiveError) as raised:
        await call_store('open', login)
    error = raised.value
    assert type(error) is ArchiveError and isinstance(error.__cause__, Refused)
    assert (error.operation, error.target, error.setup, error.reported) == ('open', 'db.example', True, True)
    assert str(error) == 'archive store: open failed (Refused)\nRefused: <Refused: str() failed>'


def test_numbering_falls_back_to_the_history_when_the_store_error_skipped_its_init() -> None:
    class Bare(ArchiveError):
        def __init__(self, message: str) -> None:
            self.message = message

    class Broken(InMemoryArchiveStore):
        def next_numbers(self, conversation_id: str, counter: str, count: int) -> list[int]:
            raise Bare('counter locked')

    agent, seen = memory_agent(Broken(), key(), [[ToolCallPart('read', {'name': 'a'})], [TextPart('done')]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        assert agent.run_sync('go').output == 'done'
    # Numbered from the history alone, and said so with the store's error by its type and text.
    returned = [p for m in seen[-1] for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [result_id_of(p) for p in returned] == ['r1']
    numbered = 'Archive numbered new results from the history alone, the store failed: archive store: next_numbers'
    assert any(str(w.message).startswith(numbered) and 'Bare: counter locked' in str(w.message) for w in caught)


@pytest.mark.parametrize('answer', [[-1], [0], [10**30], [3, 3], [5, 4], [1], ['1'], None, [True]])
def test_numbers_a_store_gives_that_are_no_result_ids_are_a_failed_call(answer: Any) -> None:
    # `r-1` and `r1000000000000000000000000000000` were written as result ids, and one id given to two results.
    class Odd(InMemoryArchiveStore):
        def next_numbers(self, conversation_id: str, counter: str, count: int) -> list[int]:
            return answer

    calls = [ToolCallPart('read', {'name': 'a'}), ToolCallPart('read', {'name': 'b'})]
    agent, seen = memory_agent(Odd(), key(), [calls, [TextPart('done')]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        assert agent.run_sync('go').output == 'done'
    returned = [p for m in seen[-1] for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [result_id_of(p) for p in returned] == ['r1', 'r2']
    numbered = 'Archive numbered new results from the history alone, the store failed: archive store: next_numbers'
    assert any(str(w.message).startswith(f'{numbered} returned {answer!r}, not 2 increasing numbers') for w in caught)


@pytest.mark.parametrize('kind', [ValueError, RuntimeError])
def test_an_entry_whose_payload_fails_as_it_is_read_is_a_store_failure_and_is_warned(kind: type[Exception]) -> None:
    class Lazy(InMemoryArchiveStore):
        def get_archived(self, conversation_id: str, ref: str) -> Any:
            class Entry:
                @property
                def payload(self) -> bytes:
                    raise kind('connection closed')

            return Entry()

    output, said, texts = run_every_tool(Lazy(), key())
    assert output == 'done'
    assert said['context_recover'].startswith(
        "The archive store failed, 'a1' could not be recovered now: archive store: get_archived returned what "
        f'cannot be read ({kind.__name__}).'
    )
    assert any(text.startswith("Archive could not recover 'a1'") and 'connection closed' in text for text in texts)


def test_a_store_answer_of_another_type_is_a_failed_call_not_a_failed_run() -> None:
    class Odd(InMemoryArchiveStore):
        def get_archived(self, conversation_id: str, ref: str) -> Any:
            return {'payload': b''}  # not an `ArchivedResult`

        def search(self, conversation_id: str, query: str, limit: int = 8) -> Any:
            return [object()]

    output, said, texts = run_every_tool(Odd(), key())
    assert output == 'done'
    assert said['context_recover'].startswith(
        "The archive store failed, 'a1' could not be recovered now: archive store: get_archived returned what "
        'cannot be read (AttributeError).'
    )
    assert said['recall'].startswith(
        'Recall is unavailable right now (archive store: search returned what cannot be read (AttributeError))'
    )
    assert any(text.startswith('Recall could not search: archive store: search returned') for text in texts)


def _as_text(payload: bytes) -> str:
    return payload.decode('utf-8', 'surrogatepass')  # a store keeping the payload in a text column


@pytest.mark.parametrize('kind', [memoryview, bytearray, _as_text])
def test_a_payload_read_back_as_another_bytes_like_object_is_recovered_exactly(kind: Callable[[bytes], Any]) -> None:
    class Driver(InMemoryArchiveStore):
        """A store on a driver that gives `bytea` back as a `memoryview` (psycopg2) or a `bytearray`."""

        def get_archived(self, conversation_id: str, ref: str) -> ArchivedResult | None:
            entry = super().get_archived(conversation_id, ref)
            return None if entry is None else dataclasses.replace(entry, payload=kind(entry.payload))

    store = Driver()
    output, said, _ = run_every_tool(store, conversation := key())
    assert output == 'done'
    assert_healthy(store, conversation, said)


@pytest.mark.parametrize(
    ('payload', 'said'),
    [
        (b'[{"kind":"request","parts":[]}]', 'not a stored result: NoneType'),
        (None, 'not a stored result: a payload of NoneType, not bytes'),
    ],
)
def test_a_payload_that_holds_no_result_is_refused_with_a_value_error(payload: Any, said: str) -> None:
    # A request with no part raised `IndexError`, and `None` an `AttributeError`: neither is what callers catch.
    with pytest.raises(ValueError, match=said):
        deserialize_part(payload)


def test_a_key_function_returning_a_str_subclass_is_read_as_its_plain_text() -> None:
    class Odd(str):
        def __len__(self) -> int:
            raise ValueError('len refused')

        def __hash__(self) -> int:
            raise ValueError('hash refused')

    store = InMemoryArchiveStore()
    output, said, _ = run_every_tool(store, lambda ctx: Odd('conversation-7'))  # pyright: ignore[reportArgumentType]
    assert output == 'done'
    assert_healthy(store, 'conversation-7', said)


# PostgreSQL -----------------------------------------------------------------------------------------------


def with_application_name(dsn: str, name: str) -> str:
    return f'{dsn}{"&" if "?" in dsn else "?"}application_name={name}'


def terminate(application_name: str) -> int:
    import psycopg

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
        rows = admin.execute(
            'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s',
            (application_name,),
        ).fetchall()
    return len(rows)


def test_postgres_connection_dropped_by_the_server_is_replaced_and_the_next_call_succeeds() -> None:
    postgres_store().close()  # skips (or fails in CI) without a server
    name = f'pac-drop-{uuid.uuid4().hex[:12]}'
    store = PostgresArchiveStore(with_application_name(POSTGRES_DSN, name))
    conversation = key()
    dropped: list[int] = []

    def drop() -> str:
        dropped.append(terminate(name))
        return 'dropped'

    steps: list[list[ModelResponsePart]] = [
        EVERY_TOOL[0],
        EVERY_TOOL[1],
        EVERY_TOOL[2],
        [ToolCallPart('drop', {})],  # the server ends every connection of the store's pool
        EVERY_TOOL[3],
        [ToolCallPart('drop', {})],
        EVERY_TOOL[4],
        [ToolCallPart('drop', {})],
        [ToolCallPart('note', {'kind': 'progress', 'text': 'after the drops'})],
        [TextPart('done')],
    ]
    agent, seen = memory_agent(store, conversation, steps, {'drop': drop})
    try:
        assert agent.run_sync('go').output == 'done'
        assert dropped and all(count >= 1 for count in dropped)  # there was a connection to drop each time
        said = answers(seen)
        assert said['context_recover'].endswith('== report media ==\n' + REPORT)
        assert 'timeout_ms = 1050' in said['recall']
        assert said['note'].endswith('Noted.')
        assert [n.text for n in store.notes(conversation)] == ['media timeout is 1050', 'after the drops']
    finally:
        store.close()


def test_postgres_unreachable_server_degrades_and_never_shows_the_password() -> None:
    store = PostgresArchiveStore('postgresql://agent:s3cr3t-pw@127.0.0.1:9/archive', connect_timeout=0.2)
    try:
        with pytest.raises(ArchiveError) as raised:
            store.get_archived('c', 'a1')
        assert raised.value.operation == 'get_archived'
        assert 's3cr3t' not in str(raised.value) and 's3cr3t' not in raised.value.target
        assert 'host=127.0.0.1' in raised.value.target and 'port=9' in raised.value.target
        output, said, caught = run_every_tool(store, key())
        assert output == 'done'
        assert 'nothing was archived' in said['context_apply'] and 'could not be stored' in said['note']
        assert not any('s3cr3t' in text for text in [*said.values(), *caught])
    finally:
        store.close()


def test_postgres_a_line_too_long_for_a_tsvector_does_not_stop_indexing() -> None:
    store = postgres_store()
    # One line of 150,000 distinct words (about 1.5 MB of terms): more than a tsvector holds.
    huge = ' '.join(f'w{n}x' for n in range(150_000)) + ' needle_early'
    steps: list[list[ModelResponsePart]] = [
        [ToolCallPart('huge', {})],
        EVERY_TOOL[0],
        [ToolCallPart('recall', {'query': 'w7x'})],
        EVERY_TOOL[4],
        [TextPart('done')],
    ]
    agent, seen = memory_agent(store, key(), steps, {'huge': lambda: huge})
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            assert agent.run_sync('go').output == 'done'
        assert not [str(w.message) for w in caught if 'Recall could not index' in str(w.message)]
        recalled = [
            p.model_response_str()
            for m in seen[-1]
            for p in m.parts
            if isinstance(p, ToolReturnPart) and p.tool_name == 'recall'
        ]
        assert 'w7x' in recalled[0]  # the long line itself is findable by its first words
        assert 'timeout_ms = 1050' in recalled[1]  # and the parts after it were indexed
    finally:
        store.close()


def test_postgres_dsn_psycopg_cannot_read_fails_at_construction_without_its_password() -> None:
    with pytest.raises(ConfigurationError) as raised:
        PostgresArchiveStore('not a dsn')
    assert "PostgresArchiveStore.dsn must be a libpq connection string or a postgresql:// URI, got 'not a dsn'" in str(
        raised.value
    )
    with pytest.raises(ConfigurationError, match=re.escape("got '\\ud800' (str), which psycopg cannot read")):
        PostgresArchiveStore('\ud800')  # a lone surrogate: libpq's text is UTF-8 (a bare `UnicodeEncodeError` before)
    for dsn in (
        'host=127.0.0.1 password=s3cr3t-pw junk',
        'postgresql://agent:s3 cr3t-pw@127.0.0.1/db x',
        'postgresql://agent:s3cr3t\ud800@127.0.0.1/db',
    ):
        with pytest.raises(ConfigurationError) as raised:
            PostgresArchiveStore(dsn)
        assert 'PostgresArchiveStore.dsn' in str(raised.value) and 's3' not in str(raised.value)
    for dsn in ('host=127.0.0.1 port=9 dbname=archive', 'postgresql://agent@127.0.0.1:9/archive', ''):
        PostgresArchiveStore(dsn, connect_timeout=0.2).close()  # what psycopg reads is accepted


def test_a_dsn_is_shown_without_any_of_its_secrets() -> None:
    """`sslpassword` unlocks the client's SSL key: it was shown in every store error, and so in tool replies."""
    from pydantic_ai_compaction.runtime.stores.postgres import redact_dsn

    for dsn in (
        'host=127.0.0.1 dbname=x password=Zs3cret sslpassword=Zs3cretssl',
        'postgresql://u:Zs3cret@127.0.0.1/x?sslpassword=Zs3cretssl',
    ):
        shown = redact_dsn(dsn)
        assert 'Zs3cret' not in shown and '127.0.0.1' in shown


NOLOGIN_ROLE = f'pac_nologin_{uuid.uuid4().hex[:12]}'
"""A role the server knows and refuses to log in (`CREATE ROLE ... NOLOGIN`). Roles belong to the whole server:
each run has its own, so runs sharing the server do not drop each other's."""


@pytest.fixture
def nologin_role() -> Iterator[str]:
    import psycopg

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f'DROP ROLE IF EXISTS {NOLOGIN_ROLE}')
        conn.execute(f"CREATE ROLE {NOLOGIN_ROLE} NOLOGIN PASSWORD 'nl-s3cr3t'")
    try:
        yield NOLOGIN_ROLE
    finally:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            conn.execute(f'DROP ROLE IF EXISTS {NOLOGIN_ROLE}')


def refused_dsn(**changed: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    return make_conninfo('', **{**conninfo_to_dict(POSTGRES_DSN), **changed})


@pytest.mark.parametrize(
    ('changed', 'cause'),
    [
        ({'password': 'wrong-s3cr3t'}, 'password authentication failed'),
        ({'dbname': 'pac_missing_database'}, 'database "pac_missing_database" does not exist'),
        # A role created `NOLOGIN` (the `nologin_role` fixture): a refusal for the setup, not an outage.
        ({'user': NOLOGIN_ROLE, 'password': 'nl-s3cr3t'}, f'role "{NOLOGIN_ROLE}" is not permitted to log in'),
        # The server answers these too: said as refused, with its words, never as a server that cannot be reached.
        ({'options': '-c statement_timeout=abc'}, 'invalid value for parameter'),
    ],
    ids=['password', 'database', 'nologin', 'options'],
)
def test_postgres_refused_login_is_one_setup_warning_and_no_call_waits(
    changed: dict[str, str], cause: str, request: pytest.FixtureRequest
) -> None:
    postgres_store().close()  # skips (or fails in CI) without a server
    if changed.get('user') == NOLOGIN_ROLE:
        request.getfixturevalue('nologin_role')
    store = PostgresArchiveStore(refused_dsn(**changed))  # the default connect_timeout: 10 s
    try:
        agent, seen = memory_agent(store, key(), EVERY_TOOL)
        started = time.monotonic()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            output = agent.run_sync('What is the media timeout?').output
        took = time.monotonic() - started
        said = answers(seen)
        assert output == 'done'
        assert took < 5, took  # every store call waited the 10 s connect_timeout: over a minute
        setup = [str(w.message) for w in caught if issubclass(w.category, SetupWarning)]
        assert len(setup) == 1 and cause in setup[0] and store.target in setup[0]
        assert 'the server refused the connection' in setup[0] and 'cannot be reached' not in setup[0]
        assert [str(w.message) for w in caught if 'PostgreSQL' in str(w.message)] == setup  # said once
        assert 'nothing was archived' in said['context_apply'] and cause in said['context_apply']
        assert 'could not be stored' in said['note'] and 'Recall is unavailable' in said['recall']
        assert not any('s3cr3t' in text for text in [*said.values(), *setup])
        with pytest.raises(ArchiveError) as raised:
            store.notes('c')
        assert raised.value.setup and is_setup_error(raised.value)
    finally:
        store.close()


def test_postgres_a_database_created_after_the_refusal_is_used_without_a_new_store() -> None:
    import psycopg

    postgres_store().close()
    name = f'pac_later_{uuid.uuid4().hex[:12]}'
    store = PostgresArchiveStore(refused_dsn(dbname=name))
    admin = psycopg.connect(POSTGRES_DSN, autocommit=True)
    try:
        with pytest.warns(SetupWarning, match='does not exist'), pytest.raises(ArchiveError):
            store.notes('c')
        admin.execute(f'CREATE DATABASE {name}')
        deadline = time.monotonic() + 20
        while True:  # the first call after the store's back-off (1 s) connects; the calls before fail at once
            try:
                assert store.notes('c') == []
                break
            except ArchiveError as error:
                assert time.monotonic() < deadline, error
                time.sleep(0.2)
        store.add_note('c', Note('fact', 'after the fix'))
        assert store.notes('c') == [Note('fact', 'after the fix')]
    finally:
        store.close()
        admin.execute(f'DROP DATABASE IF EXISTS {name} WITH (FORCE)')
        admin.close()


def test_postgres_an_unreachable_server_is_said_once_and_is_not_a_setup_mistake() -> None:
    # An outage (a restart, a server not up yet, a wrong port) is no refusal: a `RuntimeWarning`, not a
    # `SetupWarning`, and its errors are not `setup` ones; but it is said once, as a refusal is.
    store = PostgresArchiveStore('postgresql://agent:s3cr3t-pw@127.0.0.1:9/archive', connect_timeout=0.5)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            errors: list[ArchiveError] = []
            for operation in (lambda: store.notes('c'), lambda: store.get_archived('c', 'a1')):
                with pytest.raises(ArchiveError) as raised:
                    operation()
                errors.append(raised.value)
        assert [w.category for w in store_warnings(caught)] == [RuntimeWarning]
        message = str(store_warnings(caught)[0].message)
        assert 'the server cannot be reached (' in message and 'port=9' in message
        assert all(not error.setup and error.reported and not is_setup_error(error) for error in errors)
        assert 'get_archived failed on' in str(errors[1]) and 'Connection refused' in str(errors[1])
        assert not any('s3cr3t' in text for text in [*map(str, errors), message])
    finally:
        store.close()


def closed_port() -> int:
    """A local port nothing listens on (connections to it are refused)."""
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


class Proxy:
    """A TCP proxy on a local *port* to the test server, which the test starts and stops: a server that goes away
    (new connections refused, open ones cut) and comes back; with *limit*, one that closes the connections past
    the first *limit* at once, as a server's or a pooler's connection limit does."""

    def __init__(self, port: int, limit: int | None = None) -> None:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(POSTGRES_DSN)
        self.upstream = (str(params.get('host') or '127.0.0.1'), int(params.get('port') or 5432))
        self.port = port
        self.listener: socket.socket | None = None
        self.open: list[socket.socket] = []
        self.limit = limit
        self.passed = 0
        self.silent = False
        """Whether new connections are accepted and never answered (a host gone silent); open ones still work."""
        self.lock = threading.Lock()
        """Guards `listener` and `open`: a connection accepted as the proxy stops is either cut by `stop` or
        refused here, never left working."""

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(('127.0.0.1', self.port))
        listener.listen()
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        # The listener first: a connection cut while it still listened was replaced through it at once.
        with self.lock:
            sockets = [*([self.listener] if self.listener else []), *self.open]
            self.listener, self.open = None, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept() or recv()
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with self.lock:
                if self.listener is not listener:  # accepted as it stopped: a stopped server takes nothing
                    client.close()
                    return
                if self.limit is not None and self.passed >= self.limit:
                    client.close()
                    continue
                if self.silent:
                    self.open.append(client)  # held open, never answered: the attempt waits its own timeout
                    continue
                self.passed += 1
                upstream = socket.create_connection(self.upstream)
                self.open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_RDWR)


def store_warnings(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    """The warnings of *caught* but a `ResourceWarning`: an event loop an earlier test left is collected at any
    time, and warned about in whichever test is running."""
    return [w for w in caught if not issubclass(w.category, ResourceWarning)]


def watched_probes(store: PostgresArchiveStore) -> list[str]:
    """The operations that try the server themselves from now on (`_probe`, half-open), in order: a call that
    fails at once tries neither the pool nor the server, and `_probe` connects without the pool."""
    probes: list[str] = []
    probe = store._probe  # pyright: ignore[reportPrivateUsage]

    def watched(operation: str) -> None:
        probes.append(operation)
        probe(operation)

    store._probe = watched  # pyright: ignore[reportPrivateUsage]
    return probes


@contextlib.contextmanager
def held_open(store: PostgresArchiveStore) -> Iterator[None]:
    """The store's breaker, open, kept so while the block runs: the calls there must fail at once, and on a slow
    machine a stall past the back-off's end (1 s) made one of them try the server instead."""
    breaker = store._breaker  # pyright: ignore[reportPrivateUsage]
    with breaker.lock:
        assert breaker.failure is not None and breaker.retry_at > 0, 'the breaker never opened'
        saved, breaker.retry_at = breaker.retry_at, time.monotonic() + 3600
    try:
        yield
    finally:
        with breaker.lock:
            breaker.retry_at = saved


def pool_settled(store: PostgresArchiveStore) -> None:
    """Wait until every connection of the pool is made and idle in it (none still connecting)."""
    deadline = time.monotonic() + 10
    while True:
        stats = store._pool.get_stats()  # pyright: ignore[reportPrivateUsage]
        if stats['pool_size'] == stats.get('pool_available', 0):
            return
        assert time.monotonic() < deadline, stats
        time.sleep(0.01)


def pool_gave_up(store: PostgresArchiveStore) -> None:
    """Wait until the pool's own attempts are over (it tries a failed one once more, then gives up)."""
    deadline = time.monotonic() + 10
    while store._pool.get_stats()['pool_size']:  # pyright: ignore[reportPrivateUsage]
        assert time.monotonic() < deadline, store._pool.get_stats()  # pyright: ignore[reportPrivateUsage]
        time.sleep(0.01)


def test_postgres_a_run_on_a_wrong_port_tries_a_few_times_and_says_it_once(caplog: pytest.LogCaptureFixture) -> None:
    """Every store call of the run waited `connect_timeout` for the pool (a 6-step run took 150 s with the default
    10 s), polling it every 0.25 s (600 requests), and the pool logged each of its 16 attempts."""
    caplog.set_level(logging.WARNING, logger='psycopg.pool')
    port = closed_port()
    store = PostgresArchiveStore(f'postgresql://agent:s3cr3t-pw@127.0.0.1:{port}/archive', connect_timeout=3)
    try:
        agent, seen = memory_agent(store, key(), EVERY_TOOL)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            assert agent.run_sync('What is the media timeout?').output == 'done'
        said = answers(seen)
        for tool, text in (('note', 'could not be stored'), ('context_apply', 'nothing was archived')):
            assert text in said[tool] and f'port={port}: the server cannot be reached' in said[tool]
            assert 'Connection refused' in said[tool] and 's3cr3t' not in said[tool]
        assert 'Recall is unavailable' in said['recall'] and 'could not be recovered now' in said['context_recover']
        # Said once by the store; the capabilities do not say it again at every request.
        assert [(w.category, 'cannot be reached' in str(w.message)) for w in store_warnings(caught)] == [
            (RuntimeWarning, True)
        ]
        breaker = store._breaker  # pyright: ignore[reportPrivateUsage]
        stats = store._pool.get_stats()  # pyright: ignore[reportPrivateUsage]
        # 15 store calls: the first one waits for one of the pool's attempts (0.25 s pieces), the others fail at
        # once. Before, with this connect_timeout: 180 requests to the pool, 12 attempts, 12 records, in 45 s.
        # Bounds with room for a slow machine (usually 0 or 1 request, 3 or 4 attempts, 3 to 6 records).
        assert breaker.attempts <= 8 and stats.get('requests_num', 0) <= 8, (breaker.attempts, stats)
        assert len([r for r in caplog.records if r.name == 'psycopg.pool']) <= 9
        attempts = breaker.attempts
        with held_open(store), pytest.raises(ArchiveError) as raised:
            store.notes('c')
        assert raised.value.reported and breaker.attempts == attempts  # still at once, without trying
    finally:
        store.close()


def test_postgres_a_server_that_does_not_answer_is_waited_for_once() -> None:
    """A port that takes connections and never answers (a host that drops packets): the first call waits
    `connect_timeout`, the next ones fail at once without asking the pool."""
    silent = socket.socket()
    silent.bind(('127.0.0.1', 0))
    silent.listen()  # the kernel completes the handshake; nothing ever answers
    store = PostgresArchiveStore(f'postgresql://agent@127.0.0.1:{silent.getsockname()[1]}/archive', connect_timeout=1)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            with pytest.raises(ArchiveError) as raised:
                store.notes('c')
            assert 'the server cannot be reached (no connection within 1 s' in str(raised.value)
            requests = store._pool.get_stats()['requests_num']  # pyright: ignore[reportPrivateUsage]
            probes = watched_probes(store)
            with held_open(store):
                for _ in range(5):
                    with pytest.raises(ArchiveError) as raised:
                        store.get_archived('c', 'a1')
                    # The pool's own attempt, timing out meanwhile, may have become the failure they name.
                    assert 'the server cannot be reached' in str(raised.value) and raised.value.reported
        # At once: neither the pool nor a connection of their own (which would have waited 1 s each).
        assert store._pool.get_stats()['requests_num'] == requests and probes == []  # pyright: ignore[reportPrivateUsage]
        assert len(store_warnings(caught)) == 1
    finally:
        store.close()
        silent.close()


def test_postgres_a_server_that_comes_back_is_used_again_after_the_back_off() -> None:
    postgres_store().close()  # skips (or fails in CI) without a server
    proxy = Proxy(closed_port())
    store = PostgresArchiveStore(refused_dsn(host='127.0.0.1', port=str(proxy.port)))  # the default 10 s timeout
    breaker = store._breaker  # pyright: ignore[reportPrivateUsage]
    conversation = key()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            for outage in range(2):  # the server away from the start, then away again while in use
                with pytest.raises(ArchiveError) as raised:
                    store.add_note(conversation, Note('fact', f'lost {outage}'))
                assert 'Connection refused' in str(raised.value) and not raised.value.setup
                pool_gave_up(store)
                attempts = breaker.attempts
                with held_open(store):
                    for _ in range(5):  # within the back-off: at once, and without trying
                        with pytest.raises(ArchiveError):
                            store.notes(conversation)
                assert breaker.attempts == attempts
                time.sleep(max(0.0, breaker.retry_at - time.monotonic()))
                with pytest.raises(ArchiveError):
                    store.notes(conversation)  # the retry finds the server still away: a longer back-off
                assert breaker.attempts == attempts + 1 and breaker.interval == 4.0
                proxy.start()
                time.sleep(max(0.0, breaker.retry_at - time.monotonic()))
                store.add_note(conversation, Note('fact', f'back {outage}'))  # the first call after it connects
                assert breaker.interval == 1.0
                assert [note.text for note in store.notes(conversation)] == ['back 0', 'back 1'][: outage + 1]
                pool_settled(store)  # the server goes away with every connection made: the outage is the same
                proxy.stop()
        # Each outage said once, as an outage; every call between said nothing.
        assert [(w.category, 'cannot be reached' in str(w.message)) for w in store_warnings(caught)] == [
            (RuntimeWarning, True)
        ] * 2
    finally:
        proxy.stop()
        store.close()


def test_postgres_a_healthy_store_makes_no_round_trip_nor_attempt_of_its_own(tmp_path: Path) -> None:
    from psycopg import pq

    store = postgres_store(max_connections=1)  # has connected and made its tables
    pool: Any = store._pool  # pyright: ignore[reportPrivateUsage]
    conversation = key()
    trace = tmp_path / 'trace.txt'
    try:
        with trace.open('w') as out:
            conn = pool.getconn()  # the one connection every operation below uses
            conn.pgconn.trace(out.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            pool.putconn(conn)
            attempts, requests = store._breaker.attempts, pool.get_stats()['requests_num']  # pyright: ignore[reportPrivateUsage]
            for n in range(3):  # fewer than psycopg's 5 runs before it prepares a statement (one more round trip)
                assert store.notes(conversation) == []
                assert store.get_archived(conversation, f'a{n}') is None
            conn.pgconn.untrace()
        # One round trip each (the server's `ReadyForQuery` ends one); the pool asked once each, nothing more.
        assert trace.read_text().count('ReadyForQuery') == 6
        assert (store._breaker.attempts, pool.get_stats()['requests_num']) == (attempts, requests + 6)  # pyright: ignore[reportPrivateUsage]
    finally:
        store.close()


def test_postgres_a_host_gone_silent_while_a_pooled_connection_still_works_is_an_outage() -> None:
    """New connections go unanswered while the pool's open one still works until it expires: the pool's
    replacement attempts fail without an answer while a connection is counted as working. Taken for a busy
    pool, the first operation that waited `connect_timeout` failed without saying why, and the next one waited
    `connect_timeout` again; now the first wait in vain is an outage, and the operations after it fail at once."""
    postgres_store().close()  # skips (or fails in CI) without a server
    proxy = Proxy(closed_port())
    proxy.start()
    store = PostgresArchiveStore(
        refused_dsn(host='127.0.0.1', port=str(proxy.port)), max_connections=2, connect_timeout=2
    )
    conversation = key()
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter('always')
            assert store.notes(conversation) == []
            # The pool grew to two connections for that call: the second one, still connecting, would arrive
            # unexpired after the expiry below and keep working (no outage, and a test that failed on a slow
            # machine). Every connection in the pool first.
            pool_settled(store)
            proxy.silent = True
            for conn in list(store._pool._pool):  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType, reportUnknownVariableType, reportUnknownArgumentType, reportAttributeAccessIssue]
                conn._expire_at = 0  # pyright: ignore[reportUnknownMemberType, reportAttributeAccessIssue]
            errors: list[ArchiveError] = []
            for _ in range(4):
                try:
                    store.notes(conversation)
                except ArchiveError as error:
                    errors.append(error)
            requests = store._pool.get_stats()['requests_num']  # pyright: ignore[reportPrivateUsage]
            probes = watched_probes(store)
            with held_open(store), pytest.raises(ArchiveError, match='cannot be reached'):
                store.notes(conversation)
        assert errors, 'the expired connections were not replaced'
        assert 'cannot be reached' in str(errors[0]) and errors[0].reported
        assert all('cannot be reached' in str(error) for error in errors)
        # Failed at once: it neither asked the pool nor tried the server itself (the pool's own attempts, which
        # `breaker.attempts` counts too, may still run in the background).
        assert store._pool.get_stats()['requests_num'] == requests  # pyright: ignore[reportPrivateUsage]
        assert probes == []
    finally:
        store.close()
        proxy.stop()


def test_postgres_a_pool_that_cannot_grow_keeps_serving_from_its_working_connection() -> None:
    """A server's (or a pooler's) connection limit: the pool's one connection works, its attempts to grow are
    closed at once. That is no outage: every operation waits its turn on the working connection. Taken for one,
    4 of 8 operations failed at once with a warning, and so did the next call."""
    postgres_store().close()  # skips (or fails in CI) without a server
    proxy = Proxy(closed_port(), limit=1)
    proxy.start()
    store = PostgresArchiveStore(refused_dsn(host='127.0.0.1', port=str(proxy.port)), max_connections=4)
    breaker = store._breaker  # pyright: ignore[reportPrivateUsage]
    conversation = key()
    failures: list[ArchiveError] = []

    def sleepy() -> None:
        try:
            store._run('sleepy', lambda conn: conn.execute('SELECT pg_sleep(0.1)'))  # pyright: ignore[reportPrivateUsage]
        except ArchiveError as error:
            failures.append(error)

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            assert store.notes(conversation) == []
            threads = [threading.Thread(target=sleepy) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert store.notes(conversation) == []
        assert failures == [] and store_warnings(caught) == []
        # The pool did try to grow, and was refused: the case this is about, not a pool that never grew.
        assert breaker.attempts > 1 and proxy.passed == 1
        assert breaker.failure is None and breaker.failures == 0
    finally:
        store.close()
        proxy.stop()


def test_postgres_operations_queued_on_a_busy_pool_end_when_the_server_goes_away() -> None:
    """Operations waiting for the pool's one connection, in use, when the server goes away: the attempt to replace
    it fails, and that ends their wait. Queued while the connection worked, they waited in one piece, all of
    `connect_timeout` (30 s here)."""
    postgres_store().close()  # skips (or fails in CI) without a server
    proxy = Proxy(closed_port())
    proxy.start()
    store = PostgresArchiveStore(
        refused_dsn(host='127.0.0.1', port=str(proxy.port)), max_connections=1, connect_timeout=30
    )
    pool: Any = store._pool  # pyright: ignore[reportPrivateUsage]
    conversation = key()
    errors: list[str] = []

    def call(work: Callable[[], Any]) -> None:
        try:
            work()
        except ArchiveError as error:
            errors.append(str(error))

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            assert store.notes(conversation) == []
            holding = threading.Event()

            def hold(conn: Any) -> None:
                holding.set()
                conn.execute('SELECT pg_sleep(20)')

            holder = threading.Thread(target=call, args=(lambda: store._run('hold', hold),))  # pyright: ignore[reportPrivateUsage]
            holder.start()
            assert holding.wait(10)
            # Counted as they queue (the pool's `requests_waiting` also counts waits that ended).
            queued_before = pool.get_stats().get('requests_queued', 0)
            queued = [threading.Thread(target=call, args=(lambda: store.notes(conversation),)) for _ in range(4)]
            for thread in queued:
                thread.start()
            deadline = time.monotonic() + 10
            while pool.get_stats().get('requests_queued', 0) < queued_before + 4:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            proxy.stop()
            deadline = time.monotonic() + 10  # a third of connect_timeout: those still waiting would wait it all
            for thread in [holder, *queued]:
                thread.join(max(0.0, deadline - time.monotonic()))
            assert not any(thread.is_alive() for thread in [holder, *queued]), (
                [thread.is_alive() for thread in [holder, *queued]],
                vars(store._breaker),
                pool.get_stats(),
                errors,  # pyright: ignore[reportPrivateUsage]
            )
        # The holder's connection was cut; the queued ones met the failed attempt to replace it.
        assert len(errors) == 5 and all('the server cannot be reached' in error for error in errors), errors
        assert [w.category for w in store_warnings(caught)] == [RuntimeWarning]
    finally:
        proxy.stop()
        store.close()


def test_postgres_a_failure_the_server_answered_is_not_said_as_unreachable() -> None:
    """A server that answers (its connection limit, a start in progress) is running at the DSN's host and port:
    its refusal is said with its words, not as a server to look for; no answer is an outage."""
    from psycopg import OperationalError

    from pydantic_ai_compaction.runtime.stores.postgres import _Breaker  # pyright: ignore[reportPrivateUsage]

    said = {
        'connection failed: FATAL: sorry, too many clients already': 'refused',
        'connection failed: FATAL: the database system is starting up': 'refused',
        'connection failed: server does not support SSL, but SSL was required': 'setup',
        'connection failed: FATAL: password authentication failed for user "agent"': 'setup',
        'connection failed: Connection refused Is the server running on that host': 'outage',
        'connection failed: server closed the connection unexpectedly': 'outage',
    }
    for text, kind in said.items():
        breaker = _Breaker()
        breaker.pending += 1  # as an attempt starts
        breaker.failed(OperationalError(text))
        assert (breaker.kind, breaker.failure) == (kind, text)
    store = PostgresArchiveStore('postgresql://agent@127.0.0.1:9/archive', connect_timeout=0.5)
    try:
        with pytest.raises(ArchiveError):
            store.notes('c')  # the pool's attempt, refused: an outage
        pool_gave_up(store)  # its attempt once more, which would say the outage again
        breaker = store._breaker  # pyright: ignore[reportPrivateUsage]
        breaker.pending += 1  # an attempt the server answered
        breaker.failed(OperationalError('connection failed: FATAL: sorry, too many clients already'))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            # Within the back-off: the call says the failure known, and does not try the server (port 9) again.
            with held_open(store), pytest.raises(ArchiveError) as raised:
                store.notes('c')
        assert 'the server refused the connection (connection failed: FATAL: sorry, too many' in str(raised.value)
        assert not raised.value.setup and raised.value.reported
        assert [w.category for w in store_warnings(caught)] == [RuntimeWarning]
        message = str(store_warnings(caught)[0].message)
        assert (
            'refused the connection' in message
            and 'cannot be reached' not in message
            and 'host and port' not in message
        )
    finally:
        store.close()


def test_the_breaker_backs_off_for_one_second_then_twice_as_long_each_time_up_to_thirty() -> None:
    """The back-off itself, without a server or a clock to race: the tests of calls failing at once hold the
    breaker open (`held_open`), so a back-off too short or set wrong would pass them."""
    from pydantic_ai_compaction.runtime.stores.postgres import _Breaker  # pyright: ignore[reportPrivateUsage]

    breaker = _Breaker()
    for expected in (1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0):
        before = time.monotonic()
        with breaker.lock:
            breaker.trip('no connection')
        after = time.monotonic()
        # From the moment of the trip, which lies between the two clock readings.
        assert before + expected <= breaker.retry_at <= after + expected
        opened_until = breaker.retry_at
        with breaker.lock:
            breaker.trip('no connection')  # met again within the back-off: not extended
        assert breaker.retry_at == opened_until
        breaker.retry_at = before  # its end reached: the next failure (a failed probe) trips it again
    assert (breaker.failure, breaker.kind, breaker.working) == ('no connection', 'outage', False)
    breaker.pending += 1
    breaker.connected()  # a connection: closed, and the next episode starts from one second again
    assert (breaker.failure, breaker.retry_at, breaker.interval) == (None, 0.0, 1.0)


def test_postgres_a_closed_store_fails_at_once_and_never_connects_again() -> None:
    """Closed while the breaker was open: the back-off's end made a later call connect (from a closed store), and
    calls said the server cannot be reached rather than that the store is closed."""
    postgres_store().close()  # skips (or fails in CI) without a server
    proxy = Proxy(closed_port())
    store = PostgresArchiveStore(refused_dsn(host='127.0.0.1', port=str(proxy.port)), connect_timeout=2)
    breaker = store._breaker  # pyright: ignore[reportPrivateUsage]
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter('always')
            with pytest.raises(ArchiveError):
                store.notes('c')
        pool_gave_up(store)
        store.close()
        proxy.start()  # the server is back, and the back-off is over
        with breaker.lock:
            breaker.retry_at = 0.0
        attempts, requests = breaker.attempts, store._pool.get_stats()['requests_num']  # pyright: ignore[reportPrivateUsage]
        for _ in range(3):
            with pytest.raises(ArchiveError) as raised:
                store.notes('c')
            assert str(raised.value).endswith(': the store is closed') and not raised.value.setup
        assert (breaker.attempts, store._pool.get_stats()['requests_num']) == (attempts, requests)  # pyright: ignore[reportPrivateUsage]
    finally:
        proxy.stop()
        store.close()


def test_postgres_a_pool_left_without_connections_while_the_server_is_away_is_an_outage() -> None:
    """The pool replaced its connection (expired, here drained) while the server was away, with no operation on
    it: no connection broke under an operation, yet none works. The next call waits `connect_timeout` once and
    opens the breaker; taken for a pool that cannot grow, every call waited it and none was said."""
    postgres_store().close()  # skips (or fails in CI) without a server
    proxy = Proxy(closed_port())
    proxy.start()
    store = PostgresArchiveStore(refused_dsn(host='127.0.0.1', port=str(proxy.port)), connect_timeout=1)
    pool: Any = store._pool  # pyright: ignore[reportPrivateUsage]
    breaker = store._breaker  # pyright: ignore[reportPrivateUsage]
    try:
        assert store.notes(key()) == []
        # A connection still being made when the server goes away would reach the pool after the drain, cut
        # but never found so: the pool would keep it, and never be left without connections.
        pool_settled(store)
        proxy.stop()
        pool.drain()  # closes the idle connections; the pool's attempts to replace them fail
        pool_gave_up(store)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            with pytest.raises(ArchiveError) as raised:
                store.notes('c')
            assert raised.value.reported and 'the server cannot be reached' in str(raised.value)
            attempts, requests = breaker.attempts, pool.get_stats()['requests_num']
            with held_open(store):
                for _ in range(3):
                    with pytest.raises(ArchiveError):
                        store.notes('c')
        assert (breaker.attempts, pool.get_stats()['requests_num']) == (attempts, requests)  # at once
        assert [w.category for w in store_warnings(caught)] == [RuntimeWarning]
    finally:
        proxy.stop()
        store.close()


@pytest.mark.parametrize('answer', [None, {'hits': []}, 'no hits'])
def test_a_search_answering_no_list_is_a_failed_call_not_no_match(answer: object) -> None:
    # `None` is what a `search` that forgot its `return` gives: read as "no match", the model was told with certainty
    # that nothing was ever said.
    class Forgetful(InMemoryArchiveStore):
        def search(self, conversation_id: str, query: str, limit: int = 8) -> Any:
            super().search(conversation_id, query, limit)
            return answer

    output, said, texts = run_every_tool(Forgetful(), key())
    assert output == 'done'
    assert said['recall'].startswith(
        'Recall is unavailable right now (archive store: search returned what cannot be read (TypeError))'
    )
    assert 'No match' not in said['recall']
    assert any(text.startswith('Recall could not search: archive store: search returned') for text in texts)
    assert any(f'TypeError: search returned {answer!r}'[:40] in text for text in texts)
