"""Selection's ranking: terms found in C-level passes are the pattern's; each bundle's terms are read once."""

from __future__ import annotations

import math
import re
from collections import Counter
from itertools import pairwise
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from pydantic_ai_compaction import BoundedSelection
from pydantic_ai_compaction.processors.views import selection as selection_module
from pydantic_ai_compaction.processors.views.selection import STOP_WORDS, bundles, rank, terms
from pydantic_ai_compaction.runtime.segment import ConversationView, segment_fresh
from pydantic_ai_compaction.runtime.transcript import render_messages

from .reliability import histories

EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_PATTERN = re.compile(r'[a-z0-9_]+')


def pattern_terms(text: str) -> list[str]:
    """The terms as the pattern finds them in the lowercased text, stop words left out."""
    return [t for t in _PATTERN.findall(text.lower()) if t not in STOP_WORDS]


# Characters whose lowercase is ASCII or longer than one character, separators, digits, the underscore.
TRICKY = 'AZaz09_ -=\n\t\r\x0b\x0c\x1c\x85\xa0\u2028\u3000KİẞΣσςÅ\u212a\u0130\u0307ΩǅÉé,.;:!?\'"()[]{}<>/\\|@#$%^&*+~`'


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet=TRICKY), st.text(alphabet=st.characters(max_codepoint=0x24F))))
def test_terms_are_the_patterns_on_any_text(text: str) -> None:
    assert terms(text) == pattern_terms(text)


def test_terms_on_examples() -> None:
    assert terms('The KELVIN sign \u212a, İstanbul and log_7=ok; Ünïcode ß') == [
        'kelvin',
        'sign',
        'k',
        'stanbul',
        'log_7',
        'ok',
        'n',
        'code',
    ]  # fmt: skip  ('i' of the dotted capital is a stop word)


def reference_rank(view: ConversationView, candidates: Any, request: str) -> list[tuple[str, float]]:
    """The ranking as first written: each bundle's transcript tokenized with the pattern, its terms counted there."""
    wanted = pattern_terms(request)
    if not wanted:
        return []
    bags: dict[str, tuple[Counter[str], str]] = {}
    for bundle in candidates:
        words = pattern_terms(render_messages([m for e in bundle.exchanges for m in view.messages_of(e)]))
        bags[bundle.id] = (Counter(words), ' '.join(words))
    documents = max(len(bags), 1)
    unique = set(wanted)
    frequency = {term: sum(1 for bag, _ in bags.values() if term in bag) for term in unique}
    idf = {term: math.log((1 + documents) / (1 + frequency[term])) + 1 for term in unique}
    phrases = [' '.join(pair) for pair in pairwise(wanted)]
    scored: list[tuple[str, float]] = []
    for position, bundle in enumerate(candidates):
        bag, text = bags[bundle.id]
        total = max(sum(bag.values()), 1)
        score = sum((bag[term] / total) * idf[term] for term in unique if bag[term])
        score += sum(0.5 for phrase in phrases if phrase in text)
        if score > 0:
            scored.append((bundle.id, score + position * 1e-9))
    scored.sort(key=lambda item: -item[1])
    return scored


REQUESTS = st.sampled_from(['', 'the', 'alpha beta', 'read alpha beta gamma', 'log 7 report', 'READ_LOG index'])


@EXAMPLES
@given(histories(), REQUESTS)
def test_rank_is_the_first_rankings_twice_in_a_row(history: list[ModelMessage], request: str) -> None:
    view = segment_fresh(history)
    candidates = [b for b in bundles(view) if not b.forced]
    expected = reference_rank(view, candidates, request)
    assert rank(view, candidates, request) == expected
    assert rank(view, candidates, request) == expected  # the terms now remembered


def test_a_bundle_is_tokenized_once_across_rankings(monkeypatch: Any) -> None:
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('start')])]
    for turn in range(6):
        history.append(ModelResponse(parts=[TextPart(f'alpha {turn} ' * 50)]))
        history.append(ModelRequest(parts=[UserPromptPart(f'beta {turn}')]))
    calls: list[int] = []
    original = selection_module.terms

    def counted(text: str) -> list[str]:
        calls.append(len(text))
        return original(text)

    monkeypatch.setattr(selection_module, 'terms', counted)
    selection = BoundedSelection[Any](budget=40)
    selection.selection(history)
    first = len(calls)
    assert first >= 6  # the request, and each candidate bundle once
    calls.clear()
    later = [*history, ModelResponse(parts=[TextPart('noted')]), ModelRequest(parts=[UserPromptPart('alpha 3')])]
    selection.selection(later)
    # A new user turn ranks again: the request and the one new candidate (the turn just answered) are read.
    assert len(calls) == 2
