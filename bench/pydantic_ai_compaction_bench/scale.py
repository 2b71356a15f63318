"""Scale of memory: recall and `context_recover` latency over a 10M-token log, with 8 conversations writing.

The log is built through the public store API in bulk (`index_lines` and `put_archived` batches, one
batch per tool result), by 8 conversations at once, each with its own store object (as 8 worker
processes would have). Then, while the 8 conversations keep writing (one 8 KB tool result every 50 ms
each: indexed line by line and archived), one conversation's recall queries and `context_recover`
calls are timed. Bounds (issue 16, target 4): p95 under 20 ms for both, on SQLite and on PostgreSQL.

PostgreSQL runs against a database of its own (`pac_bench_scale`, created and dropped on the server
of `PAC_POSTGRES_DSN`), so the tables the tests use are never touched.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ToolReturnPart
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage

from pydantic_ai_compaction import Archive
from pydantic_ai_compaction.processors.memory.results import serialize_part
from pydantic_ai_compaction.protocols.archive import ArchivedResult, ArchiveStore, LogLine
from pydantic_ai_compaction.runtime.stores import PostgresArchiveStore, SQLiteArchiveStore

TOTAL_TOKENS = 10_000_000
"""The log's size in estimated tokens (4 characters each), all conversations together."""

CONVERSATIONS = 8
"""Conversations writing at once."""

RESULT_CHARS = 8_000
"""Characters per tool result (about 2,000 tokens, 80 lines)."""

WRITE_EVERY = float(os.environ.get('PAC_SCALE_WRITE_EVERY', '0.05'))
"""Seconds between two results of one conversation while queries are timed (a real agent step takes seconds;
`PAC_SCALE_WRITE_EVERY` sets another)."""

SCHEDULE = os.environ.get('PAC_SCALE_SCHEDULE', 'after')
"""When a conversation writes its next result while queries are timed: `after` (the default, the published
figures) `WRITE_EVERY` after the previous one was written, so a store that writes faster is sent more results in
the same time; or `fixed` (`PAC_SCALE_SCHEDULE=fixed`) one every `WRITE_EVERY` (at once when behind), the same
load whatever the store, to compare two versions of a store at one rate of writing."""

WRITERS = os.environ.get('PAC_SCALE_WRITERS', 'threads')
"""How the 8 conversations write while queries are timed: `threads` of the timing process (the default, the
published figures), or `processes` (`PAC_SCALE_WRITERS=processes`, forked: as 8 worker processes would, without
a share of the reader's interpreter lock), to tell the store's latency from the lock's."""

QUERIES_TIMED = int(os.environ.get('PAC_SCALE_QUERIES', '120'))
"""Recall queries timed (each followed by a `context_recover`): 120 by default, the published figures; more
(`PAC_SCALE_QUERIES`) narrow the p95 when two versions are compared (each query's p95 is of a 1/8 share)."""

BOUND_MS = 20.0
"""p95 bound of both queries."""

_SERVICES = ('payments', 'media', 'search', 'auth', 'billing', 'gateway', 'mailer', 'reports', 'legacy', 'cache')
_LEVELS = ('INFO', 'INFO', 'INFO', 'INFO', 'DEBUG', 'WARN', 'ERROR')
_VERBS = ('GET', 'POST', 'PUT', 'DELETE')


def _result_text(rng: random.Random, conversation: int, step: int) -> str:
    """One log-like tool result: routine request lines, a few events, ids unique to it."""
    lines: list[str] = [f'=== log {step} of conversation {conversation} ===']
    size = len(lines[0])
    second = step * 100
    while size < RESULT_CHARS:
        second += 1
        stamp = datetime.fromtimestamp(1_700_000_000 + second, tz=UTC).strftime('%Y-%m-%dT%H:%M:%SZ')
        service = rng.choice(_SERVICES)
        roll = rng.random()
        if roll < 0.01:
            line = (
                f'{stamp} INCIDENT inc-{conversation}{step:05d}{rng.randrange(100)} service={service} '
                f'severity={rng.randrange(1, 5)} owner=user{rng.randrange(500)}'
            )
        elif roll < 0.03:
            line = f'{stamp} {service} timeout_ms={rng.randrange(100, 5000)} port={rng.randrange(1024, 65535)}'
        else:
            line = (
                f'{stamp} {service} {rng.choice(_LEVELS)} {rng.choice(_VERBS)} /api/{service}/{rng.randrange(999)} '
                f'request_id={rng.getrandbits(48):012x} status={rng.choice((200, 200, 200, 201, 404, 500))} '
                f'latency_ms={rng.randrange(1, 900)}'
            )
        lines.append(line)
        size += len(line) + 1
    return '\n'.join(lines)


def _step(
    conversation_id: str, rng: random.Random, conversation: int, step: int
) -> tuple[list[LogLine], ArchivedResult]:
    """What one tool result adds to the store: its lines for recall and its archived original."""
    text = _result_text(rng, conversation, step)
    call_id = f'call-{conversation}-{step}'
    result_id = f'r{step + 1}'
    args = f'{{"index": {step}}}'
    lines = [
        LogLine(conversation_id, f'part-{call_id}', number, line, 'tool', 'read_log', args, result_id)
        for number, line in enumerate(text.splitlines(), start=1)
    ]
    part = ToolReturnPart('read_log', text, tool_call_id=call_id)
    entry = ArchivedResult(
        conversation_id=conversation_id,
        ref=f'a{step + 1}',
        result_id=result_id,
        tool_name='read_log',
        tool_call_id=call_id,
        args_json=args,
        payload=serialize_part(part),
        note=f'log {step}: routine traffic',
        created_at='2026-11-29T00:00:00+00:00',
    )
    return lines, entry


def _write(store: ArchiveStore, conversation_id: str, rng: random.Random, conversation: int, step: int) -> None:
    lines, entry = _step(conversation_id, rng, conversation, step)
    store.index_lines(lines)
    store.put_archived([entry])


def next_write(due: float, now: float, schedule: str) -> tuple[float, float]:
    """When a writer that just wrote the result due at *due* (`time.perf_counter()` seconds) writes the next one,
    at *now*: that result's due time and the seconds to wait for it, on *schedule* (`SCHEDULE`)."""
    if schedule == 'fixed':
        due = max(due + WRITE_EVERY, now)  # behind schedule: at once, without a burst to catch up
        return due, due - now
    return now + WRITE_EVERY, WRITE_EVERY


def build_log(open_store: Callable[[], Any], total_tokens: int = TOTAL_TOKENS) -> float:
    """Write the log with 8 conversations at once, each through a store of its own; the seconds it took."""
    per_conversation = total_tokens * 4 // RESULT_CHARS // CONVERSATIONS
    errors: list[BaseException] = []
    stop = threading.Event()

    def build(conversation: int) -> None:
        store = open_store()
        rng = random.Random(conversation)
        try:
            for step in range(per_conversation):
                if stop.is_set():
                    break
                _write(store, f'conv-{conversation}', rng, conversation, step)
        except BaseException as error:  # reported below: a failed build must not time an empty store
            errors.append(error)
        finally:
            store.close()

    started = time.perf_counter()
    builders = [threading.Thread(target=build, args=(c,)) for c in range(CONVERSATIONS)]
    for thread in builders:
        thread.start()
    try:
        for thread in builders:
            thread.join()
    except BaseException:
        stop.set()  # Ctrl-C: the builders stop before the store they write into is removed
        for thread in builders:
            thread.join()
        raise
    if errors:
        raise errors[0]
    return time.perf_counter() - started


@dataclass(frozen=True)
class ScaleResult:
    """One backend's figures."""

    backend: str
    tokens: int
    build_seconds: float
    recall_p50: float
    recall_p95: float
    recover_p50: float
    recover_p95: float
    bytes_per_million: float
    writes_during: int
    """Results the 8 conversations wrote while the queries were timed."""
    timed_seconds: float
    """How long the queries were timed: with `writes_during`, the rate the writers kept (each waits `WRITE_EVERY`
    after a result, so a store that writes faster takes more results in the same time)."""
    recall_by_query: dict[str, tuple[float, float]] = field(default_factory=dict[str, tuple[float, float]])
    """Each query's recall p50 and p95 (ms)."""
    store_read: tuple[float, float] = (0.0, 0.0)
    """p50 and p95 (ms) of the store's `get_archived` alone, called from the timing loop: `context_recover`
    less the tool's worker thread and the decoding."""
    anchor: tuple[float, float] = (0.0, 0.0)
    """p50 and p95 (ms) of a fixed piece of Python work (`_anchor_work`) timed in the same loop: how much the
    machine's load and the writer threads stretch anything the reader does, store or not."""
    round_trip: tuple[float, float] | None = None
    """p50 and p95 (ms) of a query that does no work (`SELECT 1` on a connection of its own) timed in the same
    loop, for a server store: the floor any of its queries waits (the network, the server's process being
    scheduled on a loaded machine) before its own work; `None` for an in-process store."""


def _anchor_work() -> int:
    """A fixed piece of pure Python work (under a millisecond on an idle core): its p95 against its p50 in the timed
    loop shows what the load of the machine and of the writer threads adds to any of the reader's steps."""
    return sum(i * i for i in range(10_000))


def _percentiles(values: Sequence[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


QUERIES = (
    'inc-{c}0001',
    'payments timeout',
    'timeout_ms port media',
    'severity owner INCIDENT',
    'ERROR 500 gateway',
    'log 37',
    'request_id',
    'nothing matches this zebra',
)
"""What an agent asks recall: an id, a service and a setting, common words, a word nothing holds."""


def run_backend(
    backend: str,
    open_store: Callable[[], Any],
    size_of: Callable[[], int],
    *,
    total_tokens: int = TOTAL_TOKENS,
    queries: int = QUERIES_TIMED,
    built_in: float | None = None,
    round_trip: Callable[[], object] | None = None,
) -> ScaleResult:
    """Build the log with 8 conversations at once, then time queries while they keep writing.

    *built_in*: the store already holds the log (`build_log` built it, in that many seconds): only time.
    *round_trip*: a query of no work on the store's server, timed beside each recall (`ScaleResult.round_trip`).
    """
    if SCHEDULE not in ('after', 'fixed'):
        raise ValueError(f"PAC_SCALE_SCHEDULE must be 'after' or 'fixed', got {SCHEDULE!r}.")
    per_conversation = total_tokens * 4 // RESULT_CHARS // CONVERSATIONS
    errors: list[BaseException] = []
    build_seconds = build_log(open_store, total_tokens) if built_in is None else built_in
    size = size_of()

    processes = WRITERS == 'processes'
    fork = multiprocessing.get_context('fork')
    stop: Any = fork.Event() if processes else threading.Event()
    written: Any = fork.Array('i', CONVERSATIONS) if processes else [0] * CONVERSATIONS
    # What the writers add while queries are timed is made beforehand: the timed phase measures the stores,
    # not eight threads generating text against the reader for the interpreter lock.
    results = 40 * -(-queries // 120)  # each writer: 40 results for every 120 queries timed
    pending = [
        [_step(f'conv-{c}', random.Random(1_000 + c), c, per_conversation + step) for step in range(results)]
        for c in range(CONVERSATIONS)
    ]

    def keep_writing(conversation: int) -> None:
        store = open_store()
        try:
            due = time.perf_counter()
            for lines, entry in pending[conversation]:
                if stop.is_set():
                    break
                store.index_lines(lines)
                store.put_archived([entry])
                written[conversation] += 1
                due, pause = next_write(due, time.perf_counter(), SCHEDULE)
                stop.wait(pause)
        except BaseException as error:
            errors.append(error)
            if processes:
                raise  # the process's exit code says it
        finally:
            store.close()

    reader = open_store()
    archive = Archive(store=reader, conversation='conv-0')
    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage())
    rng = random.Random(99)
    recall: list[float] = []
    recover: list[float] = []
    by_query: dict[str, list[float]] = {}
    store_read: list[float] = []
    anchor: list[float] = []
    trips: list[float] = []

    async def timed() -> None:
        for index in range(queries):
            query = QUERIES[index % len(QUERIES)].format(c=0)
            began = time.perf_counter()
            hits = reader.search('conv-0', query, 8)
            recall.append((time.perf_counter() - began) * 1000)
            by_query.setdefault(query, []).append(recall[-1])
            if index == 0 and not hits:
                raise RuntimeError(f'{backend}: recall found nothing for {query!r} in a built log')
            ref = f'a{rng.randrange(1, per_conversation + 1)}'
            began = time.perf_counter()
            content = await archive._recover(ctx, ref)  # pyright: ignore[reportPrivateUsage]
            recover.append((time.perf_counter() - began) * 1000)
            began = time.perf_counter()
            reader.get_archived('conv-0', ref)
            store_read.append((time.perf_counter() - began) * 1000)
            began = time.perf_counter()
            _anchor_work()
            anchor.append((time.perf_counter() - began) * 1000)
            if round_trip is not None:
                began = time.perf_counter()
                round_trip()
                trips.append((time.perf_counter() - began) * 1000)
            if not isinstance(content, str) or not content.startswith('=== log'):
                raise RuntimeError(f'{backend}: context_recover({ref!r}) returned {str(content)[:80]!r}')

    reader.search('conv-0', 'warm', 1)  # the first query opens the connection; not a query's latency
    writers: list[Any] = [
        (fork.Process if processes else threading.Thread)(target=keep_writing, args=(c,)) for c in range(CONVERSATIONS)
    ]
    for thread in writers:
        thread.start()
    started = time.perf_counter()
    try:
        asyncio.run(timed())
    finally:
        timed_seconds = time.perf_counter() - started
        stop.set()
        for thread in writers:
            thread.join()
        reader.close()
    if errors:
        raise errors[0]
    if processes and any(process.exitcode for process in writers):
        raise RuntimeError(f'{backend}: a writing process failed (exit codes {[p.exitcode for p in writers]})')
    recall_p50, recall_p95 = _percentiles(recall)
    recover_p50, recover_p95 = _percentiles(recover)
    tokens = per_conversation * CONVERSATIONS * RESULT_CHARS // 4
    return ScaleResult(
        backend,
        tokens,
        build_seconds,
        recall_p50,
        recall_p95,
        recover_p50,
        recover_p95,
        size / (tokens / 1_000_000),
        sum(written),
        timed_seconds,
        {query: _percentiles(times) for query, times in by_query.items()},
        _percentiles(store_read),
        _percentiles(anchor),
        _percentiles(trips) if trips else None,
    )


def sqlite_result(total_tokens: int = TOTAL_TOKENS) -> ScaleResult:
    """The SQLite figures, in a temporary file."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / 'scale.sqlite3'

        def size() -> int:
            store = SQLiteArchiveStore(path)
            try:
                # Fold the write-ahead log into the file so the size is the database's own.
                store._connection('size').execute('PRAGMA wal_checkpoint(TRUNCATE)')  # pyright: ignore[reportPrivateUsage]
            finally:
                store.close()
            return sum(p.stat().st_size for p in Path(folder).iterdir())

        return run_backend('SQLite', lambda: SQLiteArchiveStore(path), size, total_tokens=total_tokens)


SCALE_DATABASE = os.environ.get('PAC_SCALE_DATABASE', 'pac_bench_scale')
"""The database the PostgreSQL figures are measured in (created, then dropped): `PAC_SCALE_DATABASE` names
another, so two runs on one server do not drop each other's."""

SCALE_TEMPLATE = os.environ.get('PAC_SCALE_TEMPLATE', '')
"""A database kept between runs that holds the built log (`PAC_SCALE_TEMPLATE`; none by default): built there
once, then each run measures in a fresh copy of it (`CREATE DATABASE ... TEMPLATE`), so runs start from the
same log without the minute its build takes. Delete it after a change of the tables or of the log."""

_BUILT = 'scale_built'
"""The table that marks a template as built: its log's size in tokens and the seconds the build took."""


def postgres_result(dsn: str, total_tokens: int = TOTAL_TOKENS) -> ScaleResult:
    """The PostgreSQL figures, in a database of their own on *dsn*'s server."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    database = sql.Identifier(SCALE_DATABASE)
    params = conninfo_to_dict(dsn)
    admin = make_conninfo('', **{**params, 'dbname': params.get('dbname') or 'postgres'})
    target = make_conninfo('', **{**params, 'dbname': SCALE_DATABASE})
    built_in = _built_template(admin, params, total_tokens) if SCALE_TEMPLATE else None
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL('DROP DATABASE IF EXISTS {}').format(database))
        if SCALE_TEMPLATE:
            conn.execute(sql.SQL('CREATE DATABASE {} TEMPLATE {}').format(database, sql.Identifier(SCALE_TEMPLATE)))
        else:
            conn.execute(sql.SQL('CREATE DATABASE {}').format(database))
    try:

        def size() -> int:
            with psycopg.connect(target, autocommit=True) as conn:
                conn.execute('VACUUM ANALYZE')
                row = conn.execute(
                    'SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c '
                    'JOIN pg_namespace n ON n.oid = c.relnamespace '
                    "WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname LIKE 'pac_%'"
                ).fetchone()
            return int(row[0]) if row and row[0] is not None else 0

        with psycopg.connect(target, autocommit=True) as floor:
            return run_backend(
                'PostgreSQL',
                lambda: PostgresArchiveStore(target, max_connections=2),
                size,
                total_tokens=total_tokens,
                built_in=built_in,
                round_trip=lambda: floor.execute('SELECT 1').fetchone(),
            )
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL('DROP DATABASE IF EXISTS {} WITH (FORCE)').format(database))


def _built_template(admin: str, params: dict[str, Any], total_tokens: int) -> float:
    """The seconds `SCALE_TEMPLATE`'s log took to build, built first if the database is missing or holds
    another size of log."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    template = make_conninfo('', **{**params, 'dbname': SCALE_TEMPLATE})
    name = sql.Identifier(SCALE_TEMPLATE)
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute('SELECT 1 FROM pg_database WHERE datname = %s', (SCALE_TEMPLATE,)).fetchone()
    if exists:
        with psycopg.connect(template, autocommit=True) as conn:
            if conn.execute('SELECT to_regclass(%s)', (_BUILT,)).fetchone() == (_BUILT,):
                row = conn.execute(sql.SQL('SELECT seconds FROM {} WHERE tokens = %s').format(
                    sql.Identifier(_BUILT)), (total_tokens,)).fetchone()  # fmt: skip
                if row is not None:
                    return float(row[0])
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL('DROP DATABASE IF EXISTS {} WITH (FORCE)').format(name))
        conn.execute(sql.SQL('CREATE DATABASE {}').format(name))
    seconds = build_log(lambda: PostgresArchiveStore(template, max_connections=2), total_tokens)
    with psycopg.connect(template, autocommit=True) as conn:
        conn.execute('VACUUM ANALYZE')
        conn.execute(sql.SQL('CREATE TABLE {} (tokens BIGINT NOT NULL, seconds DOUBLE PRECISION NOT NULL)').format(
            sql.Identifier(_BUILT)))  # fmt: skip
        conn.execute(sql.SQL('INSERT INTO {} VALUES (%s, %s)').format(sql.Identifier(_BUILT)), (total_tokens, seconds))
    return seconds


def verdict(p95: float) -> str:
    """`met` under the bound."""
    return 'met' if p95 < BOUND_MS else 'not met'


def table(results: Sequence[ScaleResult]) -> str:
    """Markdown: latency percentiles with their ratio to the bound, build time, size per 1M tokens."""
    lines = [
        '| store | log tokens | build s | recall p50 ms | recall p95 ms | p95 / 20 ms | context_recover p50 ms | '
        'context_recover p95 ms | p95 / 20 ms | results written while timed | MB per 1M tokens |',
        '|---|---|---|---|---|---|---|---|---|---|---|',
    ]
    for r in results:
        lines.append(
            f'| {r.backend} | {r.tokens:,} | {r.build_seconds:.0f} | {r.recall_p50:.2f} | {r.recall_p95:.2f} | '
            f'{r.recall_p95 / BOUND_MS:.2f}× ({verdict(r.recall_p95)}) | {r.recover_p50:.2f} | {r.recover_p95:.2f} | '
            f'{r.recover_p95 / BOUND_MS:.2f}× ({verdict(r.recover_p95)}) | '
            f'{r.writes_during:,} in {r.timed_seconds:.1f} s | '
            f'{r.bytes_per_million / 2**20:.1f} |'
        )
    return '\n'.join(lines)


def detail_table(results: Sequence[ScaleResult]) -> str:
    """Markdown: each recall query's p50 / p95, and the store's own read beside `context_recover`."""
    lines = [
        '| recall query | ' + ' | '.join(f'{r.backend} p50 / p95 ms' for r in results) + ' |',
        '|---|' + '---|' * len(results),
    ]
    for query in results[0].recall_by_query if results else ():
        cells = [f'{r.recall_by_query[query][0]:.2f} / {r.recall_by_query[query][1]:.2f}' for r in results]
        lines.append(f'| `{query}` | ' + ' | '.join(cells) + ' |')
    cells = [f'{r.store_read[0]:.2f} / {r.store_read[1]:.2f}' for r in results]
    lines.append('| (`get_archived` alone, no worker thread) | ' + ' | '.join(cells) + ' |')
    cells = [f'{r.anchor[0]:.2f} / {r.anchor[1]:.2f}' for r in results]
    lines.append('| (anchor: fixed Python work, no store) | ' + ' | '.join(cells) + ' |')
    if any(r.round_trip is not None for r in results):
        cells = [f'{r.round_trip[0]:.2f} / {r.round_trip[1]:.2f}' if r.round_trip else '–' for r in results]
        lines.append('| (round trip: `SELECT 1`, no work, own connection) | ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def main(total_tokens: int = TOTAL_TOKENS, backends: Sequence[str] = ('sqlite', 'postgres')) -> None:
    """Print the scale table of *backends* (PostgreSQL skipped, with the reason, when `PAC_POSTGRES_DSN` is unset)."""
    print(
        f'## Scale of memory: a {total_tokens / 1e6:g}M-token log, {CONVERSATIONS} conversations writing '
        f'(one {RESULT_CHARS // 1000} KB result every {WRITE_EVERY * 1000:.0f} ms each'
        f'{", on a fixed schedule" if SCHEDULE == "fixed" else ""}) while queries are timed\n'
    )
    results = [sqlite_result(total_tokens)] if 'sqlite' in backends else []
    dsn = os.environ.get('PAC_POSTGRES_DSN')
    skipped = None
    if 'postgres' not in backends:
        pass
    elif dsn:
        results.append(postgres_result(dsn, total_tokens))
    else:
        skipped = 'PostgreSQL: skipped, PAC_POSTGRES_DSN is not set (a server to measure on).'
    print(table(results))
    print()
    print(detail_table(results))
    if skipped:
        print(f'\n{skipped}')
    print()


if __name__ == '__main__':
    import sys

    # `python -m pydantic_ai_compaction_bench.scale [millions of tokens] [sqlite|postgres ...]`
    tokens = int(float(sys.argv[1]) * 1_000_000) if len(sys.argv) > 1 else TOTAL_TOKENS
    main(tokens, sys.argv[2:] or ('sqlite', 'postgres'))
