"""What the stores share: recall's query words, the archived row, and how any text goes into a column.

Query words are lowercase letters and digits of any script, so `timeout_ms` matches `timeout`.
"""

from __future__ import annotations

import base64
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai_compaction.protocols.archive import ArchivedResult, Hit, LogLine
from pydantic_ai_compaction.runtime.encoding import clean_text, from_bytes, has_surrogates, strip_nul, to_bytes
from pydantic_ai_compaction.runtime.scripts import PAIRED_CHARACTER, PAIRED_RUNS

_ESCAPED = '\x1b'
"""Leads a column value holding, in base64, the bytes of a text no database can hold as it is."""


def db_text(text: str) -> str:
    """*text* as any text column can hold it (no NUL, no lone surrogate), reversibly.

    Text that needs it (a NUL, a lone surrogate, or the escape mark itself in front) is stored as the
    escape mark followed by the base64 of its lossless bytes (`to_bytes`); everything else as it is, so
    keys stay readable and equal text always gives equal column values (lookups by key keep working).
    Not JSON: JSON spells a high surrogate followed by a low one exactly as the character the pair
    encodes, so it cannot give such text back as it was.
    """
    if '\x00' in text or text.startswith(_ESCAPED) or has_surrogates(text):
        return _ESCAPED + base64.b64encode(to_bytes(text)).decode('ascii')
    return text


def py_text(value: str) -> str:
    """The inverse of `db_text`."""
    if value.startswith(_ESCAPED):
        try:
            return from_bytes(base64.b64decode(value[len(_ESCAPED) :], validate=True))
        except ValueError:
            return value  # not written by `db_text`: keep what is there
    return value


def index_text(text: str) -> str:
    """Text for a full-text index and for hits (lossy: no NUL, lone surrogates as U+FFFD, composed as Unicode NFC).

    Composed as query words are (`folded`), so every store indexes what it is asked for: SQLite's tokenizer reads
    a decomposed letter and its marks as they come, and a composed query word never met them.
    """
    cleaned = clean_text(strip_nul(text))
    return cleaned if cleaned.isascii() else unicodedata.normalize('NFC', cleaned)


MAX_BUSY_TIMEOUT_MS = 2**31 - 1
"""The longest `busy_timeout_ms` of the SQL stores: what SQLite's busy handler and PostgreSQL's `lock_timeout`
hold: SQLite read a larger one as 0 (no waiting at all), and PostgreSQL refused every connection (`invalid
value for parameter`)."""

SEARCH_CANDIDATES = 500
"""Matches a store's search ranks, the newest first, per query word when no line holds them all: ranking every
match of a word that half of a 10M-token log holds took seconds. Taken per word, a rare word's few matches are all
ranked however many newer lines hold a common word of the same query."""

_WORD = re.compile(r'[^\W_]+')

_ASCII_WORDS = str.maketrans({code: chr(code).lower() if chr(code).isalnum() else ' ' for code in range(128)})
"""For ASCII text: each letter lowercased, each character but a letter or a digit a space (what `_WORD` keeps of
ASCII text is its runs of `[A-Za-z0-9]`)."""


def words(text: str) -> list[str]:
    """The searchable words of *text*, in order, without repeats.

    ASCII text (a log line, most queries) is split by `str.translate` and `str.split`, about 1.5 times faster than
    the pattern (every writer splits every line it indexes); any other text by the pattern (tested equal).
    A script written without spaces (`unspaced`) gives the pairs of its characters instead of its runs: in
    `服务器超时设置为30秒` the run of letters is one sentence, which a query of `超时` would never find.
    """
    if text.isascii():
        return list(dict.fromkeys(text.translate(_ASCII_WORDS).split()))
    found = _WORD.findall(folded(text))
    if PAIRED_CHARACTER.search(text) is None:
        return list(dict.fromkeys(found))
    return list(dict.fromkeys(piece for word in found for piece in unspaced(word)))


def unspaced(word: str) -> list[str]:
    """*word* (a run of letters and digits) as the words a query can name inside it, where it holds a script
    written without spaces: each run of such characters as its overlapping pairs (a character alone as itself),
    and the letters and digits between them as words of their own (`高さは333メートル`: `高さ`, `さは`, `333`,
    `メー`, `ート`, `トル`).

    A query word of such a script is split the same way, and a line holds it when it holds every pair: the usual
    way full-text search reads these scripts, without a dictionary of their words.
    """
    if PAIRED_CHARACTER.search(word) is None:
        return [word]
    pieces: list[str] = []
    for run in PAIRED_RUNS.findall(word):
        if len(run) > 1 and PAIRED_CHARACTER.match(run) is not None:
            pieces.extend(run[at : at + 2] for at in range(len(run) - 1))
        else:
            pieces.append(run)
    return pieces


def unspaced_words(text: str) -> str:
    """The words `words` finds in *text* that a tokenizer reading runs of letters does not (`unspaced`), joined
    by spaces: what SQLite indexes beside a line for its unicode61 tokenizer to find them (empty for most text)."""
    if text.isascii() or PAIRED_CHARACTER.search(text) is None:
        return ''
    found = _WORD.findall(folded(text))
    return ' '.join(dict.fromkeys(piece for word in found if PAIRED_CHARACTER.search(word) for piece in unspaced(word)))


def folded(text: str) -> str:
    """*text* as words are read from it: lowercased, and composed (Unicode NFC) when it is not ASCII.

    A letter and its accent may come as one character or as two (macOS writes file names decomposed, NFD); the
    combining accent is no letter, so decomposed `Zoë` split into `zoe` and was not found by the `zoë` a model
    types. Composed after lowercasing, which may itself decompose: `İ` lowercases to `i` and a combining dot that
    composes with nothing, which split `İstanbul` into `i` and `stanbul`; the dot is dropped, so it is `istanbul`, as
    a model types it and as SQLite's tokenizer reads it.
    """
    lowered = text.lower()
    if lowered.isascii():
        return lowered
    if '\u0307' in lowered:
        lowered = lowered.replace('i\u0307', 'i')
    return unicodedata.normalize('NFC', lowered)


QUERY_WORDS = 64
"""Distinct words of a recall query a store searches for, the first ones: a query is a few words, and one pasted
from a log (thousands of them) took seconds on PostgreSQL and was refused by SQLite (2,000 columns at most)."""


def query_words(query: str) -> list[str]:
    """The words of *query* a store searches for: its first `QUERY_WORDS` distinct ones (`words`)."""
    return words(query)[:QUERY_WORDS]


def has_word(tokens: Sequence[str], word: str, whole: bool) -> bool:
    """Whether *word* is one of *tokens* (*whole*) or starts one of them."""
    return word in tokens if whole else any(token.startswith(word) for token in tokens)


@dataclass(frozen=True)
class WordPattern:
    """Finds a query word in lowercased text where `has_word(words(text), word, whole)` holds: at the start of a
    run of letters and digits (`str.isalnum`, the `[^\\W_]` class of `words`), and (*whole*) at its end.

    Searched with `str.find` and a look at the characters around each hit: a regular expression with a
    look-behind tries every position of the text, about a millisecond per 10 KB line that does not hold the
    word, and ranking reads hundreds of such lines per query.
    """

    word: str
    """The lowercased query word."""

    whole: bool
    """Whether the word must end where the run of letters and digits does (else it may be a prefix)."""

    def search(self, text: str) -> bool:
        """Whether *text* (`folded`) holds the word."""
        return self.find(text) >= 0

    def find(self, text: str) -> int:
        """Where the word first starts in *text* (`folded`) as `words` reads the text, or -1.

        A script written without spaces is read as pairs of its characters (`unspaced`): a pair is found
        anywhere in a run of it, a character alone where it starts a pair or stands alone, and a run of any
        other letters or digits begins and ends where such a script does.
        """
        word, size = self.word, len(self.word)
        if not word:
            return -1
        if PAIRED_CHARACTER.match(word) is not None:
            return self._find_unspaced(text)
        at = text.find(word)
        while at >= 0:
            end = at + size
            if (at == 0 or _breaks(text[at - 1])) and (not self.whole or end == len(text) or _breaks(text[end])):
                return at
            at = text.find(word, at + 1)
        return -1

    def _find_unspaced(self, text: str) -> int:
        """`find` for a word of a script written without spaces: a pair (its only words but a character alone)."""
        word, size = self.word, len(self.word)
        if size > 2 or PAIRED_CHARACTER.fullmatch(word[-1]) is None:
            return -1  # no word `words` gives is longer than a pair of these characters
        at = text.find(word)
        while at >= 0:
            if size == 2:
                return at
            before = at > 0 and PAIRED_CHARACTER.match(text[at - 1]) is not None
            after = at + 1 < len(text) and PAIRED_CHARACTER.match(text[at + 1]) is not None
            # Alone, the character is a word; followed by another it starts a pair (a prefix); ending a run, it is
            # only the end of the pair before it.
            if (not before and not after) or (after and not self.whole):
                return at
            at = text.find(word, at + 1)
        return -1


def _breaks(character: str) -> bool:
    """Whether *character* ends a run of letters and digits for `words`: not one, or one of a script written
    without spaces (which `unspaced` reads apart from the letters and digits beside it)."""
    return not character.isalnum() or (not character.isascii() and PAIRED_CHARACTER.match(character) is not None)


def word_pattern(word: str, whole: bool) -> WordPattern:
    """The `WordPattern` of *word* (*whole*: as a whole word, else as a prefix)."""
    return WordPattern(word, whole)


def line_score(text: str, context: str, patterns: Sequence[WordPattern]) -> int:
    """A line's score for the query words of *patterns* (`word_pattern`): each word counts once if the line or
    its call holds it (*context*, `line_context`), once more if the line itself does.

    The in-memory store's score (which splits every line into words), computed by searching for each word
    instead: SQLite ranks its candidates with it, since FTS5's `bm25` counts each query word's matches over
    the whole log to weigh it (tens of milliseconds for a word every line holds in a 10M-token log).
    """
    own, around = folded(text), folded(context)
    score = 0
    for pattern in patterns:
        if pattern.search(own):
            score += 2
        elif pattern.search(around):
            score += 1
    return score


def rank_any_word(per_word: Sequence[Sequence[tuple[int, Hit]]], limit: int) -> list[Hit]:
    """The best *limit* of the union of each query word's newest matches, when no line holds every word.

    Args:
        per_word: For each query word, its newest matches (at most `SEARCH_CANDIDATES`) as `(position, hit)`,
            where a larger position is a newer line and `hit.score` (larger is better) is the store's own score
            of the line for that word alone.
        limit: Most hits returned.

    Returns:
        Tool output first, then the lines whose matched words are the rarest (each word weighs more the fewer
        matches it has, as an inverse document frequency), then the store's summed score, then the newest.
        Each hit's score is its summed store score.
    """
    union: dict[int, tuple[Hit, float, float]] = {}
    for matches in per_word:
        if not matches:
            continue
        # Per conversation, from the candidates: the one value of a query (`inc42`) outweighs a word
        # every other line holds (`timeout`), so it is not buried under their number.
        weight = math.log(1 + SEARCH_CANDIDATES / len(matches))
        for position, hit in matches:
            known = union.get(position)
            if known is None:
                union[position] = (hit, weight, hit.score)
            else:
                union[position] = (known[0], known[1] + weight, known[2] + hit.score)
    ranked = sorted(union.items(), key=lambda item: (item[1][0].source != 'tool', -item[1][1], -item[1][2], -item[0]))
    return [replace(hit, score=score) for _, (hit, _, score) in ranked[:limit]]


ARCHIVED_COLUMNS = 'conversation_id, ref, result_id, tool_name, tool_call_id, args_json, payload, note, created_at'
"""Column order of the archived table, shared by the SQL stores."""


def archived_from_row(row: Sequence[Any] | None) -> ArchivedResult | None:
    """An entry from a row selected with `ARCHIVED_COLUMNS`."""
    if row is None:
        return None
    return ArchivedResult(
        conversation_id=py_text(row[0]),
        ref=py_text(row[1]),
        result_id=py_text(row[2]),
        tool_name=py_text(row[3]),
        tool_call_id=py_text(row[4]),
        args_json=py_text(row[5]),
        payload=bytes(row[6]),
        note=py_text(row[7]),
        created_at=py_text(row[8]),
    )


def archived_row(entry: ArchivedResult) -> tuple[Any, ...]:
    """The row of an entry, in `ARCHIVED_COLUMNS` order."""
    return (
        db_text(entry.conversation_id),
        db_text(entry.ref),
        db_text(entry.result_id),
        db_text(entry.tool_name),
        db_text(entry.tool_call_id),
        db_text(entry.args_json),
        bytes(entry.payload),
        db_text(entry.note),
        db_text(entry.created_at),
    )


def line_context(line: LogLine) -> str:
    """What a line is matched against besides its own text: the call it came from."""
    return index_text(f'{line.tool_name} {line.args} {line.result_id}')
