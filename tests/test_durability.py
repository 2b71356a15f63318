"""Durability and concurrency of the archive stores, with real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pydantic_ai_compaction.runtime.stores import SQLiteArchiveStore

from .durability_worker import payload
from .stores import POSTGRES_DSN, postgres_store

ROOT = Path(__file__).parent.parent


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, '-m', 'tests.durability_worker', *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def count(store: SQLiteArchiveStore, conversation: str, n: int) -> int:
    return sum(store.get_archived(conversation, f'a{i}') is not None for i in range(n))


def test_a_process_killed_mid_batch_leaves_all_or_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / 'archive.sqlite3')
    SQLiteArchiveStore(path).close()
    killed = spawn('slow', path, 'killed', '400', 'hold')
    assert killed.stdout is not None
    assert killed.stdout.readline().strip() == 'writing'  # inside the batch's transaction
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)
    assert killed.returncode == -signal.SIGKILL
    store = SQLiteArchiveStore(path)
    assert count(store, 'killed', 400) == 0  # nothing of the interrupted batch
    # The database is healthy: a complete batch afterwards is all there.
    finished = spawn('slow', path, 'finished', '40')
    _, err = finished.communicate(timeout=120)
    assert finished.returncode == 0, err
    assert count(store, 'finished', 40) == 40
    entry = store.get_archived('finished', 'a7')
    assert entry is not None and entry.payload == payload('a7') * 20


@pytest.mark.parametrize('kind', ['sqlite', 'postgres'])
def test_concurrent_processes_lose_nothing_and_never_reuse_an_id(kind: str, tmp_path: Path) -> None:
    if kind == 'postgres':
        postgres_store().close()  # skips (or fails in CI) without a server
        target = POSTGRES_DSN
    else:
        target = str(tmp_path / 'shared.sqlite3')
        SQLiteArchiveStore(target).close()
    conversation = f'shared-{uuid.uuid4().hex}'
    workers = [spawn(kind, target, conversation, '25', '4') for _ in range(4)]
    refs: list[str] = []
    for process in workers:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        refs.extend(out.split())
    assert len(refs) == 4 * 25 * 4 and len(set(refs)) == len(refs)  # no duplicated id
    store = SQLiteArchiveStore(target) if kind == 'sqlite' else postgres_store()
    for ref in refs:  # no lost entry; every recovery byte-exact
        entry = store.get_archived(conversation, ref)
        assert entry is not None and entry.payload == payload(ref)
    results = {store.get_archived(conversation, ref).result_id for ref in refs}  # type: ignore[union-attr]
    assert len(results) == len(refs)
