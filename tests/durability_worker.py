"""Subprocess workers for the durability and concurrency tests (run with `python -m tests.durability_worker`)."""

from __future__ import annotations

import hashlib
import sys
import time

from pydantic_ai_compaction.protocols.archive import ArchivedResult
from pydantic_ai_compaction.runtime.stores import PostgresArchiveStore, SQLiteArchiveStore


def payload(ref: str) -> bytes:
    """Deterministic bytes per reference, so any process can check a recovery byte for byte."""
    return hashlib.sha256(ref.encode()).digest() * 64 + b'\x00\xff'


def slow_batch(path: str, conversation: str, count: int, *, hold: bool = False) -> None:
    """Write one big batch slowly, announcing when the transaction is under way (to be killed mid-batch); with
    *hold*, it then waits there to be killed: a slow parent killed it after the batch had committed."""
    store = SQLiteArchiveStore(path)
    state = {'calls': 0}

    def slow() -> int:
        state['calls'] += 1
        if state['calls'] == 50:
            print('writing', flush=True)
            while hold:
                time.sleep(1)
        time.sleep(0.0002)
        return 0

    store._db.set_progress_handler(slow, 200)  # pyright: ignore[reportPrivateUsage]
    entries = [
        ArchivedResult(conversation, f'a{i}', f'r{i}', 'read', f'c{i}', '{}', payload(f'a{i}') * 20, 'n', 't')
        for i in range(count)
    ]
    store.put_archived(entries)
    print('committed', flush=True)


def worker(kind: str, target: str, conversation: str, batches: int, size: int) -> None:
    """Reserve numbers and archive batches on a shared conversation; print what was written."""
    store = SQLiteArchiveStore(target) if kind == 'sqlite' else PostgresArchiveStore(target)
    written: list[str] = []
    for _ in range(batches):
        results = store.next_numbers(conversation, 'result', size)
        refs = store.next_numbers(conversation, 'archive', size)
        entries = [
            ArchivedResult(
                conversation, f'a{ref}', f'r{result}', 'read', f'c{result}', '{}', payload(f'a{ref}'), 'n', 't'
            )
            for ref, result in zip(refs, results, strict=True)
        ]
        store.put_archived(entries)
        written.extend(e.ref for e in entries)
        got = store.get_archived(conversation, entries[0].ref)
        assert got is not None and got.payload == payload(entries[0].ref)
    print(' '.join(written), flush=True)


if __name__ == '__main__':
    if sys.argv[1] == 'slow':
        slow_batch(sys.argv[2], sys.argv[3], int(sys.argv[4]), hold=sys.argv[5:] == ['hold'])
    else:
        worker(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
