"""Scripts written without spaces between words, as search and the summary checks read them.

A run of Chinese, Japanese or Korean is a phrase or a sentence, not a word: the stores read it as the pairs of its
characters (`stores._query.unspaced`). Thai and its kin are written without spaces too; the stores read their runs
whole, and neither they nor the first have a word edge a summary check could see.
"""

from __future__ import annotations

import re

PAIRED = (
    '\u1100-\u11ff\u3040-\u30ff\u3100-\u318f\u31a0-\u31bf\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff'
    '\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f'
)
"""Character ranges read in pairs: Han (Chinese, Japanese kanji), hiragana, katakana, bopomofo, and hangul (Korean
spaces its phrases, not the words of a compound)."""

PAIRED_CHARACTER = re.compile(f'[{PAIRED}]')
"""One character of `PAIRED`."""

PAIRED_RUNS = re.compile(f'[{PAIRED}]+|[^{PAIRED}]+')
"""A word's runs of `PAIRED` characters and of any other, in turn."""

_RUNS = re.compile('[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u1980-\u19df\u1a20-\u1aaf\uaa60-\uaa7f]')
"""Thai, Lao, Myanmar, Khmer, New Tai Lue, Tai Tham: written without spaces, read by the stores as runs."""


def paired(character: str) -> bool:
    """Whether *character* is of a script the stores read in pairs (`PAIRED`)."""
    return PAIRED_CHARACTER.match(character) is not None


def without_spaces(character: str) -> bool:
    """Whether *character* is of any script written without spaces between words (no word edge to see)."""
    return not character.isascii() and (paired(character) or _RUNS.match(character) is not None)
