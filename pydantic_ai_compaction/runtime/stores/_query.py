"""Query words for recall: lowercase letters and digits, so `timeout_ms` matches `timeout`."""

from __future__ import annotations

import re

_WORD = re.compile(r'[a-z0-9]+')


def words(text: str) -> list[str]:
    """The searchable words of *text*, in order, without repeats."""
    return list(dict.fromkeys(_WORD.findall(text.lower())))
