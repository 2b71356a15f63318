"""Instruction gathering reads a result only where a marker can start, and finds what the previous reading found.

The previous `_gather` is kept below as the reference; it searched every plain result with `lines_in`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import replace

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart

from pydantic_ai_compaction import InstructionSources
from pydantic_ai_compaction.protocols.types import Exchange
from pydantic_ai_compaction.runtime import instructions
from pydantic_ai_compaction.runtime.instructions import gather_instructions, tool_provided
from pydantic_ai_compaction.runtime.pins import is_pinned
from pydantic_ai_compaction.runtime.segment import ConversationView, is_restatement, segment
from pydantic_ai_compaction.runtime.transcript import return_text, user_text

from .reliability import histories
from .test_segment_cold import tool_loops

EXAMPLES = settings(
    max_examples=int(os.environ.get('PAC_EXAMPLES', '40')), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

MARKERS = st.sampled_from(
    [
        (),
        ('CHANGE:',),
        ('CHANGE:', 'CAUTION'),  # a shared first character
        ('CHANGE:', 'NOTE'),  # none shared: every result is searched
        ('log',),  # found inside words and at line starts
        ('CHANGE:', re.compile(r'POLICY\b')),  # a pattern: every line is matched
    ]
)


def reference_gather(view: ConversationView, sources: InstructionSources, exchanges: Sequence[Exchange]) -> list[str]:
    """`_gather` before it tested a result for the markers' first character itself."""
    found: list[str] = []
    owner_map: list[dict[int, ModelMessage]] = []
    messages = view.messages
    for exchange in exchanges:
        if exchange.kind in ('opening', 'boundary', 'restatement'):
            continue
        for index, chosen in exchange.refs:
            message = messages[index]
            if not isinstance(message, ModelRequest):
                continue
            parts = message.parts if chosen is None else [message.parts[p] for p in chosen]
            for part in parts:
                if isinstance(part, ToolReturnPart):
                    content = part.content
                    if type(part) is ToolReturnPart and type(content) is str and part.outcome == 'success':
                        lines = sources.lines_in(content)
                    else:
                        lines = sources.marked_lines(part, lambda part=part: return_text(part))
                    found.extend(lines)
                    continue
                if not isinstance(part, UserPromptPart) or is_restatement(part):
                    continue
                in_progress = exchange.unfinished
                if not owner_map:
                    owner_map.append(
                        {id(item): r for r in view.messages if isinstance(r, ModelRequest) for item in r.parts}
                    )
                fragment = message if chosen is None else replace(message, parts=[message.parts[p] for p in chosen])
                if tool_provided(owner_map[0].get(id(part), fragment), part):
                    found.extend(sources.marked_lines(part, lambda part=part: user_text(part)))
                elif sources.user_prompts and not in_progress and not is_pinned(part):
                    text = user_text(part).strip()
                    if text:
                        found.append(text)
    return found


def with_marked_results(history: list[ModelMessage], marked: Sequence[int]) -> list[ModelMessage]:
    """*history* with a marked line (after a timestamp, or inside a word) put into some of its plain results."""
    out = list(history)
    requests = [i for i, m in enumerate(out) if isinstance(m, ModelRequest)]
    for n, choice in enumerate(marked):
        index = requests[choice % len(requests)]
        request = out[index]
        assert isinstance(request, ModelRequest)
        parts = [
            replace(p, content=f'{p.content}\n[12:00] CHANGE: rule {n}\nxCHANGE: no\nPOLICY {n}\nlog {n}')
            if isinstance(p, ToolReturnPart) and isinstance(p.content, str)
            else p
            for p in request.parts
        ]
        out[index] = replace(request, parts=parts)
    return out


@EXAMPLES
@given(st.one_of(tool_loops(), histories()), MARKERS, st.lists(st.integers(0, 50), max_size=4), st.booleans())
def test_gathering_finds_what_the_previous_reading_found(
    history: list[ModelMessage], markers: tuple[object, ...], marked: list[int], user_prompts: bool
) -> None:
    # pydantic-ai renders an error return as JSON, which a lone surrogate cannot be written in (it raises, as sending
    # such a result would): not a history gathering can be asked about.
    assume(
        not any(
            isinstance(part, ToolReturnPart) and part.outcome != 'success' and '\ud800' in str(part.content)
            for message in history
            for part in message.parts
        )
    )
    history = with_marked_results(history, marked)
    view = segment(history)
    sources = InstructionSources(markers=markers, user_prompts=user_prompts)  # pyright: ignore[reportArgumentType]
    expected = reference_gather(view, InstructionSources(markers=markers, user_prompts=user_prompts), view.exchanges)  # pyright: ignore[reportArgumentType]
    found: list[str] = []
    instructions._gather(view, sources, view.exchanges, found, [])  # pyright: ignore[reportPrivateUsage]
    assert found == expected
    if not view.records():
        latest = tuple(reversed(dict.fromkeys(reversed(expected))))
        # The finished turn in progress sits before a restatement: its lines are listed only after a change said
        # before the turn.
        turn = [e for e in view.exchanges if e.protected == 'current_turn' and not e.unfinished]
        own = set(reference_gather(view, InstructionSources(markers=markers, user_prompts=user_prompts), turn))  # pyright: ignore[reportArgumentType]
        earlier = [text for text in latest[: next((i for i, t in enumerate(latest) if t in own), 0)] if text not in own]
        assert gather_instructions(view, sources) == (latest if earlier else tuple(t for t in latest if t not in own))


def test_a_marked_line_is_found_where_the_markers_share_a_first_character() -> None:
    from .test_segment_cold import plain_loop

    history = with_marked_results(plain_loop(6), [3])
    view = segment(history)
    for markers in (('CHANGE:',), ('CHANGE:', 'CAUTION')):
        assert gather_instructions(view, InstructionSources(markers=markers)) == ('[12:00] CHANGE: rule 0',)
    assert gather_instructions(view, InstructionSources(markers=('NOTE',))) == ()
