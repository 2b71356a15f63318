"""The tags this library wraps text in when it sends it to a model, and how wrapped text is made inert.

Text inside a wrapper (a transcript, a curator's orientation, a previous note) can come from a tool,
a user or another model call. If it contained `</derived-orientation>` it would close our wrapper
early and whatever followed would read as ours. Every wrapper we emit goes through `wrap`, which
neutralizes anything in the body that could open or close one of our tags.
"""

from __future__ import annotations

import re

WRAPPER_TAGS = (
    'derived-orientation',
    'transcript',
    'bundles',
    'current-request',
    'previous-note',
    'exchanges',
    'messages',
    'checkpoint',
)
"""Tag names of the wrappers this library emits (and of those a later change may add)."""

_OPEN_OR_CLOSE = re.compile(r'<(\s*/?\s*)(' + '|'.join(re.escape(tag) for tag in WRAPPER_TAGS) + r')(?![\w-])', re.I)


def neutralize(text: str) -> str:
    """*text* with every opening or closing of one of our tags made inert (`<` becomes `‹`).

    Case and whitespace variants (`< /Transcript`) are caught too; other angle brackets are untouched,
    so code and markup in tool output stay readable.
    """
    return _OPEN_OR_CLOSE.sub(lambda match: '‹' + match.group(1) + match.group(2), text)


def wrap(tag: str, body: str, *, attributes: str = '') -> str:
    """*body* between `<tag attributes>` and `</tag>`, neutralized so it cannot close the wrapper or open another."""
    if tag not in WRAPPER_TAGS:
        raise ValueError(f'wrap: {tag!r} is not one of WRAPPER_TAGS.')
    opening = f'<{tag} {attributes.strip()}>' if attributes.strip() else f'<{tag}>'
    return f'{opening}\n{neutralize(body)}\n</{tag}>'
