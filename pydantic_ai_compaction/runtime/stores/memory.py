"""An in-memory store: for tests and single-process use. Same behaviour as the SQL stores."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pydantic_ai_compaction.protocols.archive import ArchivedResult, ArchiveError, Hit, LogLine, Note
from pydantic_ai_compaction.runtime.stores._query import (
    SEARCH_CANDIDATES,
    has_word,
    index_text,
    line_context,
    query_words,
    rank_any_word,
    words,
)


@dataclass
class InMemoryArchiveStore:
    """Dictionaries behind a lock; a batch is checked whole before anything is written."""

    # Private state, out of the constructor and of `repr` (which would otherwise print archived content).
    _counters: dict[tuple[str, str], int] = field(init=False, repr=False, default_factory=dict[tuple[str, str], int])
    _archived: dict[tuple[str, str], ArchivedResult] = field(
        init=False, repr=False, default_factory=dict[tuple[str, str], ArchivedResult]
    )
    _notes: dict[str, list[Note]] = field(init=False, repr=False, default_factory=lambda: defaultdict(list))
    _lines: dict[str, list[LogLine]] = field(init=False, repr=False, default_factory=lambda: defaultdict(list))
    _parts: dict[str, set[str]] = field(init=False, repr=False, default_factory=lambda: defaultdict(set))
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def next_numbers(self, conversation_id: str, counter: str, count: int) -> list[int]:
        """Reserve consecutive numbers."""
        with self._lock:
            start = self._counters.get((conversation_id, counter), 0)
            self._counters[(conversation_id, counter)] = start + count
            return list(range(start + 1, start + count + 1))

    def put_archived(self, entries: Sequence[ArchivedResult]) -> None:
        """All or nothing."""
        with self._lock:
            keys = [(entry.conversation_id, entry.ref) for entry in entries]
            if len(set(keys)) != len(keys) or any(key in self._archived for key in keys):
                raise ArchiveError(
                    'in-memory archive: put_archived failed: archive reference already used; nothing was stored',
                    operation='put_archived',
                    target='memory',
                )
            for key, entry in zip(keys, entries, strict=True):
                self._archived[key] = entry

    def get_archived(self, conversation_id: str, ref: str) -> ArchivedResult | None:
        """This conversation's entry only."""
        with self._lock:
            return self._archived.get((conversation_id, ref))

    def add_note(self, conversation_id: str, note: Note) -> None:
        """Append."""
        with self._lock:
            self._notes[conversation_id].append(note)

    def notes(self, conversation_id: str) -> list[Note]:
        """Oldest first."""
        with self._lock:
            return list(self._notes.get(conversation_id, []))

    def indexed(self, conversation_id: str, fingerprints: Sequence[str]) -> set[str]:
        """Known fingerprints."""
        with self._lock:
            known = self._parts.get(conversation_id, set())
            return {fingerprint for fingerprint in fingerprints if fingerprint in known}

    def index_lines(self, lines: Sequence[LogLine]) -> int:
        """Skip parts already indexed."""
        added = 0
        with self._lock:
            fresh: dict[tuple[str, str], bool] = {}
            for line in lines:
                key = (line.conversation_id, line.fingerprint)
                if key not in fresh:
                    fresh[key] = line.fingerprint not in self._parts[line.conversation_id]
                if fresh[key]:
                    # What the SQL stores keep of a line: its index form (no NUL, no lone surrogate).
                    self._lines[line.conversation_id].append(
                        replace(
                            line,
                            text=index_text(line.text),
                            tool_name=index_text(line.tool_name),
                            args=index_text(line.args),
                            result_id=index_text(line.result_id),
                        )
                    )
                    added += 1
            for conversation_id, fingerprint in fresh:
                self._parts[conversation_id].add(fingerprint)
        return added

    def search(self, conversation_id: str, query: str, limit: int = 8) -> list[Hit]:
        """Every word in the line or its call, else any word; whole words before prefixes, as the SQL stores.

        When no line holds every word, each word's newest `SEARCH_CANDIDATES` matches are ranked together by
        `rank_any_word`, as the SQL stores do.
        """
        wanted = query_words(query)
        if not wanted:
            return []
        with self._lock:
            lines = list(self._lines.get(conversation_id, []))
        tokens = [(words(line.text), words(line.text) + words(line_context(line))) for line in lines]
        for whole in (True, False):
            pool = [
                (order, _hit(line, sum(has_word(context, w, whole) + has_word(own, w, whole) for w in wanted)))
                for order, (line, (own, context)) in enumerate(zip(lines, tokens, strict=True))
                if all(has_word(context, w, whole) for w in wanted)
            ]
            if pool:
                pool.sort(key=lambda e: (e[1].source != 'tool', -e[1].score, -e[0]))
                return [hit for _, hit in pool[:limit]]
        if len(wanted) == 1:
            return []  # "any word" of one word is "every word": nothing more to find
        for whole in (True, False):
            per_word = [
                [
                    (order, _hit(line, 1 + has_word(own, word, whole)))
                    for order, (line, (own, context)) in reversed(list(enumerate(zip(lines, tokens, strict=True))))
                    if has_word(context, word, whole)
                ][:SEARCH_CANDIDATES]
                for word in wanted
            ]
            if any(per_word):
                return rank_any_word(per_word, limit)
        return []


def _hit(line: LogLine, score: float) -> Hit:
    return Hit(line.text, line.source, line.tool_name, line.args, line.result_id, line.line_no, float(score))
