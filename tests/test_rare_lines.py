"""`rare_lines` with shapes read in one loop and words' kinds told once finds what it found before, line for line.

Checked against the reading it replaced (`_word_counted_*` in `test_reset_reading`): timestamps of every form
`line_body` strips and look-alikes it does not, lines opening with a digit of any script or a digit-like character
`\\d` rejects, `[` that opens no timestamp, long lines with blanks reaching past the first 256 characters,
`key=` at odd places, combining and case-changing characters, long words, the process-wide store of kinds
before and after it is emptied and while threads fill and empty it, and texts of a `str` subclass.
"""

from __future__ import annotations

import os
import sys
import threading
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ToolCallPart

from pydantic_ai_compaction.processors.strategies import reset as reset_module
from pydantic_ai_compaction.processors.strategies.reset import rare_lines

from .test_reset_reading import (
    _word_counted_rare_lines,  # pyright: ignore[reportPrivateUsage]
    _word_counted_shape,  # pyright: ignore[reportPrivateUsage]
)

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '15'))
CALL = ToolCallPart('read_log', {})

STAMPS = [
    '[12:00:01]',
    '[2026-03-15 08:01:05]',
    '[x]',
    '[]',
    '[ ]',
    '[a]b]',
    '[' + 'x' * 40 + ']',
    '[' + 'x' * 41 + ']',
    '[\n]',
    '2026-03-15',
    '2026-03-15T08:01',
    '2026-03-15 08:01:05',
    '2026-03-15T08:01:05.123Z',
    '2026-03-15T08:01:05,5+02:00',
    '2026-03-15-0200',
    '2026-03-15Z',
    '08:01',
    '08:01:05',
    '08:01:05.9',
    '08:01:05,',
    '12:3',
    '1234-56-78Z',
    '٢٠٢٦-٠٣-١٥',
    '٠٨:٠١',
    '０８:０１',
    '²²:²²',
    '①②:③④',
    '𝟘𝟙:𝟚𝟛',
]
DIGITS = ['0', '7', '٣', '۵', '०', '೭', '０', '９', '𝟘', '²', '³', '¹', '①', 'Ⅻ', 'ⅻ', '፩', '߀', '᠐', '꘠', '𑁦', '½']
WORDS = [
    'INFO',
    'ERROR',
    'CHANGE:',
    'a=b',
    '=x',
    'x=',
    '==',
    'a=b=c',
    'ab٣=',
    'K=١',
    'ß',
    'SS',
    'ẞ',
    'İ',
    'i̇',
    'ǅ',
    'ǈ',
    'Ǆ',
    'ǅX',
    'ÉTÉ',
    'é',
    'é',
    'a\u0301',
    'A\u0301',
    '\u0301',
    'ᾼ',
    'ᾈ',
    'ﬀ',
    'ΣΑ',
    'x²',
    '²',
    '٣',
    'x٣',
    'A1',
    'abc',
    '\ud800',
    'x' * 64,
    'X' * 64,
    'Y' * 65,
    'Z' * 65 + '=',
    '7' * 70,
]
BLANKS = [' ', '\t', '  ', '\xa0', '\u3000', '\u2003', '\x1f', '\x0b']


@st.composite
def words(draw: st.DrawFn) -> str:
    return draw(
        st.sampled_from(WORDS)
        | st.builds(lambda d, w: d + w, st.sampled_from(DIGITS), st.sampled_from(WORDS))
        | st.lists(
            st.sampled_from([*DIGITS, *WORDS, '=', '[', ']', ':', '-', 'T', 'Z', '.', ',']), min_size=1, max_size=5
        ).map(''.join)
        | st.text(min_size=1, max_size=8)
    )


@st.composite
def log_lines(draw: st.DrawFn) -> str:
    """A line opening with a timestamp or a look-alike or a digit of any script, sometimes long, with far blanks."""
    pieces: list[str] = []
    if draw(st.booleans()):
        pieces.append(draw(st.sampled_from(['', *BLANKS])))
    if draw(st.booleans()):
        pieces.append(draw(st.sampled_from(STAMPS)))
        # The blanks after a timestamp may reach past the first 256 characters.
        pieces.append(draw(st.sampled_from([' ', '\t', ' \t', ' ' * 250, ' ' * 300, '\t' * 260, '\xa0', ''])))
    if draw(st.booleans()):
        pieces.append(draw(st.sampled_from(DIGITS)))
    for _ in range(draw(st.integers(0, 14))):
        pieces.append(draw(words()))
        pieces.append(draw(st.sampled_from([' ', ' ', ' ', *BLANKS, ' ' * 260])))
    if draw(st.integers(0, 3)) == 0:
        pieces.append('z' * draw(st.integers(180, 300)))
        pieces.extend(f' {draw(words())}' for _ in range(draw(st.integers(0, 10))))
    return ''.join(pieces)


@st.composite
def logs(draw: st.DrawFn) -> str:
    chosen = draw(st.lists(log_lines(), min_size=1, max_size=10))
    repeated = chosen * draw(st.integers(1, 5)) + draw(st.lists(st.sampled_from(chosen), max_size=25))
    repeated = draw(st.permutations(repeated))
    return draw(st.sampled_from(['\n', '\r\n', '\u2028', '\n\n'])).join(repeated)


@contextmanager
def kinds_kept(count: int) -> Iterator[None]:
    """The process-wide store of kinds holding at most *count* words, emptied before and after."""
    kept = reset_module._KINDS_KEPT  # pyright: ignore[reportPrivateUsage]
    reset_module._KINDS.clear()  # pyright: ignore[reportPrivateUsage]
    reset_module._KINDS_KEPT = count  # pyright: ignore[reportPrivateUsage]
    try:
        yield
    finally:
        reset_module._KINDS_KEPT = kept  # pyright: ignore[reportPrivateUsage]
        reset_module._KINDS.clear()  # pyright: ignore[reportPrivateUsage]


@settings(max_examples=EXAMPLES * 20, deadline=None)
@given(logs(), st.integers(1, 25), st.sampled_from([3, 64, 16_384]))
def test_rare_lines_on_timestamped_logs_of_any_digits_equals_the_word_counted_reading(
    text: str, limit: int, kept: int
) -> None:
    with kinds_kept(kept):
        expected = _word_counted_rare_lines(CALL, text, limit=limit)
        assert rare_lines(CALL, text, limit=limit) == expected
        assert rare_lines(CALL, text, limit=limit) == expected  # every word now looked up, or told after a clear


@settings(max_examples=EXAMPLES * 20, deadline=None)
@given(st.lists(log_lines(), min_size=1, max_size=6))
def test_each_line_s_shape_equals_the_word_counted_shape(lines: list[str]) -> None:
    stripped = [line for piece in lines if (line := piece.strip())]
    if stripped:
        shapes = reset_module._shapes(stripped)  # pyright: ignore[reportPrivateUsage]
        assert shapes == [_word_counted_shape(line) for line in stripped]


def test_a_line_opening_with_any_numeric_character_or_a_bracket_is_shaped_as_before() -> None:
    """Every code point that is numeric in some sense (`isnumeric`, `isdigit`, `isdecimal`) or a bracket, opening
    short and long lines shaped like timestamps."""
    heads = [c for c in map(chr, range(sys.maxunicode + 1)) if c.isnumeric() or c in '[]']
    assert len(heads) > 1_500
    lines: list[str] = []
    for c in heads:
        lines += [
            f'{c}{c}:{c}{c} INFO k=v',
            f'{c}{c}{c}{c}-{c}{c}-{c}{c}T{c}{c}:{c}{c}Z ERROR x',
            f'{c}x] WARN',
            f'{c} ' + ' ' * 300 + 'INFO a b c d e f g h i',
            f'{c}{c}:{c}{c}' + ' ' * 260 + 'INFO a',
            f'{c}{c}:{c}{c} ' + 'w ' * 200,
        ]
    assert reset_module._shapes(lines) == [_word_counted_shape(line) for line in lines]  # pyright: ignore[reportPrivateUsage]


def test_a_word_s_kind_is_the_same_before_and_after_the_store_is_emptied() -> None:
    kinds = reset_module._KINDS  # pyright: ignore[reportPrivateUsage]
    probe = ['INFO', 'ß', 'SS', 'ǅ', 'İ', 'a=b', 'x²', '٣', 'é', 'e\u0301', 'A\u0301', 'ﬀ']
    with kinds_kept(8):
        before = [kinds[word] for word in probe]  # the store fills and is emptied on the way
        for n in range(20):
            kinds[f'filler{n}']
        after = [kinds[word] for word in probe]
        again = [kinds[word] for word in probe]
    assert before == after == again == [_word_counted_shape(word)[0] for word in probe]


def test_a_word_longer_than_64_characters_is_told_and_not_kept() -> None:
    with kinds_kept(16_384):
        kinds = reset_module._KINDS  # pyright: ignore[reportPrivateUsage]
        for word in ['Q' * 65, 'q' * 65, '7' * 65, 'k' * 64 + '=v', 'Q' * 64]:
            assert kinds[word] == _word_counted_shape(word)[0]
        assert list(kinds) == ['Q' * 64]


def test_threads_reading_logs_while_the_store_fills_and_empties_find_the_same_lines() -> None:
    """Six threads, a store of 32 words emptied over and over, a thread switch every microsecond."""
    errors: list[str] = []
    texts = [
        '\n'.join(
            f'2026-03-15 08:01:{n % 60:02d} w{k}_{n} K{n % 3}=v {"ERR" if n % 97 == 0 else "INFO"} x{n}'
            for n in range(600)
        )
        for k in range(6)
    ]
    expected = [_word_counted_rare_lines(CALL, text, limit=50) for text in texts]

    def work(k: int) -> None:
        try:
            for _ in range(5):
                if rare_lines(CALL, texts[k], limit=50) != expected[k]:
                    errors.append(f'thread {k}: other lines')
        except Exception as error:
            errors.append(f'thread {k}: {error!r}')

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with kinds_kept(32):
            threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


class _Markup(str):
    """A `str` subclass whose methods return its own kind, as `markupsafe.Markup` does."""

    def strip(self, chars: str | None = None) -> _Markup:
        return _Markup(str.strip(self, chars))

    def split(self, sep: str | None = None, maxsplit: int = -1) -> list[str]:
        return [_Markup(piece) for piece in str.split(self, sep, maxsplit)]

    def __getitem__(self, key: int | slice) -> _Markup:  # pyright: ignore[reportIncompatibleMethodOverride]
        return _Markup(str.__getitem__(self, key))


class _Folded(_Markup):
    """A `str` subclass equal to any string of the same case-folded text (a case-insensitive key)."""

    def strip(self, chars: str | None = None) -> _Folded:
        return _Folded(str.strip(self, chars))

    def split(self, sep: str | None = None, maxsplit: int = -1) -> list[str]:
        return [_Folded(piece) for piece in str.split(self, sep, maxsplit)]

    def __getitem__(self, key: int | slice) -> _Folded:  # pyright: ignore[reportIncompatibleMethodOverride]
        return _Folded(str.__getitem__(self, key))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and str.casefold(self) == str.casefold(other)

    def __hash__(self) -> int:
        return hash(str.casefold(self))


def test_a_markup_like_text_is_read_as_before() -> None:
    text = _Markup('\n'.join(['INFO ok user=ann'] * 8 + ['08:01:05 INCIDENT disk', '[x] CHANGE: y', 'ß ǅ x²']))
    with kinds_kept(16_384):
        assert rare_lines(CALL, text) == _word_counted_rare_lines(CALL, text)
        assert rare_lines(CALL, text) == _word_counted_rare_lines(CALL, text)


def test_a_case_insensitive_str_subclass_leaves_no_word_whose_kind_a_later_text_reads() -> None:
    """A text of a `str` subclass equal across case must not teach the process-wide store a kind that a later
    plain text's word (equal to it under that subclass's `==`) is then told."""
    folded = _Folded('\n'.join(['INFO ok'] * 8 + ['info INCIDENT', 'x y']))
    plain = '\n'.join(['info ok'] * 8 + ['INFO INCIDENT', 'x y'])
    with kinds_kept(16_384):
        assert rare_lines(CALL, folded) == _word_counted_rare_lines(CALL, folded)
        assert rare_lines(CALL, plain) == _word_counted_rare_lines(CALL, plain)
        # And the other way: plain words first, the subclass's after.
        reset_module._KINDS.clear()  # pyright: ignore[reportPrivateUsage]
        assert rare_lines(CALL, plain) == _word_counted_rare_lines(CALL, plain)
        assert rare_lines(CALL, folded) == _word_counted_rare_lines(CALL, folded)


def test_the_kind_of_every_single_character_word_is_the_word_counted_kind() -> None:
    chars = [c for c in map(chr, range(sys.maxunicode + 1)) if not c.isspace() and unicodedata.category(c) != 'Cn']
    with kinds_kept(16_384):
        kinds = reset_module._KINDS  # pyright: ignore[reportPrivateUsage]
        assert [kinds[c] for c in chars] == [_word_counted_shape(c)[0] for c in chars]
        assert [kinds[c] for c in chars] == [_word_counted_shape(c)[0] for c in chars]


def test_no_word_of_a_result_is_held_after_a_reset_reads_it() -> None:
    """A result's words (a `token=` among them) are not held after the reset's reading: neither after a request's
    read-ahead nor after a compaction, for a later agent of the process to find in memory."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import CompactionPart, ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from pydantic_ai_compaction import ResetToCheckpoint, Trigger

    asked: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = len(asked)
        asked.append(step)
        if step >= 6:
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': step}, tool_call_id=f'c{step}')])

    held: list[list[str]] = []

    def read_log(index: int) -> str:
        # What the previous request's read-ahead (and any compaction) left behind.
        held.append([word for word in reset_module._KINDS if 'sk-live' in word])  # pyright: ignore[reportPrivateUsage]
        lines = [f'GET /a token=sk-live-{index}abcdef user=ann', *(f'INFO ok step {n}' for n in range(30))]
        return '\n'.join([f'log {index}', *lines])

    agent = Agent(FunctionModel(model), tools=[read_log], capabilities=[ResetToCheckpoint(trigger=Trigger(tokens=600))])
    result = agent.run_sync('read the logs')
    assert result.output == 'done'
    assert any(isinstance(p, CompactionPart) for m in result.all_messages() for p in m.parts)
    assert held == [[]] * 6
    assert [word for word in reset_module._KINDS if 'sk-live' in word] == []  # pyright: ignore[reportPrivateUsage]
