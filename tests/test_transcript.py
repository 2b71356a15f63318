"""`clip` reads only the start of a long text and still gives the line the whole text gives."""

from __future__ import annotations

import os

from hypothesis import example, given, settings
from hypothesis import strategies as st

from pydantic_ai_compaction.runtime.transcript import clip

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '80'))


def clipped_whole(text: str, limit: int) -> str:
    """The fresh computation: the whole text on one line, then cut."""
    flat = ' '.join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)] + '…'


words = st.lists(
    st.one_of(
        st.text(st.sampled_from('ab€'), min_size=1, max_size=30),
        st.text(st.sampled_from(' \t\n\r\x0b\x0c\x1c\x85\xa0\u2028\u3000'), min_size=1, max_size=90),
    ),
    max_size=40,
).map(''.join)


@settings(max_examples=EXAMPLES, deadline=None)
@given(text=st.one_of(words, st.text()), limit=st.integers(min_value=-2, max_value=40))
@example(text='a' * 500, limit=60)
@example(text='a' * 239 + ' ' * 400 + 'b', limit=60)
@example(text=' ' * 300 + 'word ' * 50, limit=60)
@example(text='x' * 61 + ' ' * 300, limit=60)
@example(text='a ' * 30 + ' ' * 300, limit=60)
@example(text='a ' * 30 + 'b' + ' ' * 300, limit=60)
def test_clip_is_the_whole_text_on_one_line_cut(text: str, limit: int) -> None:
    assert clip(text, limit) == clipped_whole(text, limit)
