"""One reader for every structured model reply: the JSON object a reply carries, or why there is none.

Real models wrap the object they were asked for: a code fence, a sentence before it, a remark after it,
single or typographic quotes around keys and strings, a line break typed inside a string. Each of those
is read as the object it plainly is, and the reader says which it tolerated. Nothing that could change
what a reply means is repaired: a truncated object is not completed, two different objects are neither
merged nor chosen between, a repeated key is not resolved, a bare word is not turned into a string, a
missing comma is not inserted.
Such replies are refused with a reason, and the caller falls back.

The rule when a reply holds several objects: every complete object that is not inside another counts.
The same object repeated counts once; two different ones make the reply `ambiguous`. A malformed object
(an opening brace and a quoted key that never become a complete object) makes it `unparseable`, even
next to a complete one: that one may be a piece of the malformed object, or a second answer.

`json_repair` (installed with pydantic-ai-harness) is not used: even with `strict=True` it completes a
truncated object (`{"keep": ["g1"` becomes `{"keep": ["g1"]}`), reads a bare `tru` as the string
`"tru"` and inserts missing commas, so a reply cut off mid-list would silently keep fewer exchanges than
the model meant. The tolerances below are few enough to write out, and each is tested.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from jsonschema import Draft202012Validator

ReplyProblem = Literal['unparseable', 'ambiguous']
"""Why a reply carries no usable object: none could be read, or more than one could."""

Tolerance = Literal['fence', 'prose', 'trailing', 'quotes', 'raw_control']
"""What the reader looked past: a code fence, text before the object, text after it, single or typographic
quotes, raw control characters (a line break typed inside a string, which JSON wants escaped)."""

MAX_FRAGMENTS = 64
"""Object starts examined at most; a reply full of braces must not make reading quadratic."""

MAX_DEPTH = 200
"""Nesting accepted at most (deeper replies are refused, never a `RecursionError`)."""


class ReplyError(ValueError):
    """A reply that does not carry exactly one readable JSON object."""

    def __init__(self, problem: ReplyProblem, detail: str) -> None:
        super().__init__(f'{problem}: {detail}')
        self.problem: ReplyProblem = problem
        """`unparseable` or `ambiguous`; used as the fallback reason."""
        self.detail = detail
        """What was wrong, for the record."""


@dataclass(frozen=True)
class JsonReply:
    """The JSON object a reply carries and what around it was tolerated."""

    data: dict[str, Any]
    """The object, decoded."""

    tolerated: tuple[Tolerance, ...] = ()
    """What the reader looked past, in a fixed order; empty for a reply that is exactly one JSON object."""


def read_json_object(reply: str) -> JsonReply:
    """The single JSON object in *reply*, read with the tolerances the module describes.

    Raises:
        ReplyError: no object could be read, or a malformed one is present (`unparseable`); two
            different complete objects are present (`ambiguous`).
    """
    found: list[tuple[int, int, dict[str, Any], frozenset[Tolerance]]] = []  # start, end, object, leniencies
    broken: list[tuple[int, int, str]] = []  # start, how far reading got, why it stopped
    for start in _object_starts(reply):
        if (found and start < found[-1][1]) or (broken and start <= broken[-1][1]):
            continue  # inside an object read (or partly read) already: not one of its own
        if len(found) + len(broken) >= MAX_FRAGMENTS:
            raise ReplyError('unparseable', f'more than {MAX_FRAGMENTS} JSON-like fragments in the reply')
        try:
            data, end = _strict(reply, start)
        except (ValueError, RecursionError):
            parser = _Lenient(reply)
            try:
                data, end = parser.object(start, 0)
            except _Refused as refused:
                broken.append((start, parser.reach, f'{refused.message} at character {refused.position}'))
                continue
            found.append((start, end, data, frozenset(parser.used)))
        else:
            found.append((start, end, data, frozenset()))
    if broken:
        # The complete object may be part of the malformed one, or a second answer: either way not the reply.
        also = '; a complete object elsewhere in the reply is not used on its own' if found else ''
        raise ReplyError('unparseable', f'malformed JSON object: {broken[0][2]}{also}')
    if not found:
        raise ReplyError('unparseable', 'no JSON object in the reply')
    distinct = {json.dumps(data, sort_keys=True) for _, _, data, _ in found}
    if len(distinct) > 1:
        raise ReplyError('ambiguous', f'{len(distinct)} different JSON objects in the reply; expected one')
    start, end, data, _ = found[0]
    used = frozenset[Tolerance]().union(*(item[3] for item in found))
    return JsonReply(data, _tolerated(reply, start, end, used))


def schema_problem(validator: Draft202012Validator, data: Any) -> str | None:
    """The first schema violation in *data* as `path: message` (deterministic order), or `None`."""
    errors = sorted(validator.iter_errors(data), key=lambda error: [str(step) for step in error.absolute_path])  # pyright: ignore[reportUnknownMemberType, reportUnknownLambdaType, reportUnknownArgumentType]
    if not errors:
        return None
    first = errors[0]
    where = '/'.join(str(step) for step in first.absolute_path) or '(root)'
    return f'{where}: {first.message[:300]}'


PLACEHOLDER = re.compile(r'^<[^<>]+>$')
"""How an example in a prompt marks what the model must replace: `<what goes here>`."""


def placeholders(example: object) -> frozenset[str]:
    """Every placeholder string (`<...>`) in an example reply, keys and values."""
    return frozenset(text for text in _strings(example) if PLACEHOLDER.match(text))


def unfilled(data: object, marks: Collection[str]) -> list[str]:
    """The example placeholders *data* still contains, in order of appearance, each once: a string that is one, or
    holds one (`<what is done>.`, `<instruction in force, latest wording>: ids in lowercase`)."""
    return list(
        dict.fromkeys(
            mark for text in _strings(data) for mark in sorted((m for m in marks if m in text), key=text.find)
        )
    )


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():  # pyright: ignore[reportUnknownVariableType]
            yield from _strings(key)  # pyright: ignore[reportUnknownArgumentType]
            yield from _strings(item)  # pyright: ignore[reportUnknownArgumentType]
    elif isinstance(value, list):
        for item in value:  # pyright: ignore[reportUnknownVariableType]
            yield from _strings(item)  # pyright: ignore[reportUnknownArgumentType]


# An object start: a brace, then the end of an empty object or a quoted key (any quote the reader knows).
_OBJECT_START = re.compile(r'\{\s*[}"\'\u201c\u201d\u2018]')
_FENCE_BEFORE = re.compile(r'```[A-Za-z0-9_+-]*[ \t]*\r?\n\s*$')
_FENCE_AFTER = re.compile(r'^\s*```')


def _object_starts(text: str) -> Iterator[int]:
    match = _OBJECT_START.search(text)
    while match is not None:
        yield match.start()
        match = _OBJECT_START.search(text, match.start() + 1)


def _tolerated(text: str, start: int, end: int, used: frozenset[Tolerance]) -> tuple[Tolerance, ...]:
    before, after = text[:start], text[end:]
    out: list[Tolerance] = []
    opening, closing = _FENCE_BEFORE.search(before), _FENCE_AFTER.match(after)
    if opening is not None and closing is not None:
        out.append('fence')
        before, after = before[: opening.start()], after[closing.end() :]
    if before.strip():
        out.append('prose')
    if after.strip():
        out.append('trailing')
    out.extend(tolerance for tolerance in ('quotes', 'raw_control') if tolerance in used)
    return tuple(out)


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f'key {key!r} appears twice')
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f'{name} is not JSON')


_DECODER = json.JSONDecoder(object_pairs_hook=_no_repeats, parse_constant=_no_constant)


def _strict(text: str, start: int) -> tuple[dict[str, Any], int]:
    data, end = _DECODER.raw_decode(text, start)
    return data, end


class _Refused(Exception):
    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.message = message
        self.position = position


_WHITESPACE = re.compile(r'[ \t\r\n]*')
_NUMBER = re.compile(r'-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?')
_LITERALS = {'true': True, 'false': False, 'null': None}
_LITERAL = re.compile(r'true|false|null')
# String bodies by opening quote. Standard double quotes and single quotes take backslash escapes;
# typographic quotes end at the next closing typographic quote.
_STRINGS = {
    '"': re.compile(r'"((?:[^"\\]|\\.)*)"', re.DOTALL),
    "'": re.compile(r"'((?:[^'\\]|\\.)*)'", re.DOTALL),
    '\u201c': re.compile('\u201c([^\u201c\u201d]*)[\u201d\u201c]'),
    '\u201d': re.compile('\u201d([^\u201c\u201d]*)[\u201d\u201c]'),
    '\u2018': re.compile('\u2018([^\u2019]*)\u2019'),
}
_ESCAPE_OR_QUOTE = re.compile(r'\\(.)|"', re.DOTALL)


def _as_json_string(body: str) -> str:
    """A string body from another kind of quotes as a JSON string literal (bare `"` escaped, `\\'` unescaped)."""

    def fix(match: re.Match[str]) -> str:
        if match.group(0) == '"':
            return '\\"'
        return "'" if match.group(1) == "'" else match.group(0)

    return '"' + _ESCAPE_OR_QUOTE.sub(fix, body) + '"'


class _Lenient:
    """JSON's grammar with more string delimiters; anything else that is not JSON is refused.

    For a text that is valid JSON it reads exactly what `json` reads. A raw control character inside a
    string (JSON wants `\\n`, models type a line break) is read as itself: it means what it shows.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.reach = 0
        self.used: set[Tolerance] = set()

    def refuse(self, message: str, position: int) -> _Refused:
        self.reach = max(self.reach, position)
        if position >= len(self.text):
            return _Refused('the reply ends inside a JSON object (truncated?)', position)
        return _Refused(message, position)

    def too_deep(self, position: int) -> _Refused:
        # Everything after this point belongs to the object refused: no piece of it is a reply of its own.
        self.reach = len(self.text)
        return _Refused(f'nested deeper than {MAX_DEPTH}', position)

    def skip(self, position: int) -> int:
        match = _WHITESPACE.match(self.text, position)
        assert match is not None  # the pattern matches the empty string
        return match.end()

    def peek(self, position: int) -> str:
        return self.text[position] if position < len(self.text) else ''

    def object(self, position: int, depth: int) -> tuple[dict[str, Any], int]:
        if depth > MAX_DEPTH:
            raise self.too_deep(position)
        self.reach = max(self.reach, position)
        position = self.skip(position + 1)
        out: dict[str, Any] = {}
        if self.peek(position) == '}':
            return out, position + 1
        while True:
            if self.peek(position) not in _STRINGS:
                raise self.refuse('expected a quoted key', position)
            key, position = self.string(position)
            if key in out:
                raise self.refuse(f'key {key!r} appears twice', position)
            position = self.skip(position)
            if self.peek(position) != ':':
                raise self.refuse("expected ':' after a key", position)
            out[key], position = self.value(self.skip(position + 1), depth + 1)
            position = self.skip(position)
            if self.peek(position) == '}':
                return out, position + 1
            if self.peek(position) != ',':
                raise self.refuse("expected ',' or '}'", position)
            position = self.skip(position + 1)

    def array(self, position: int, depth: int) -> tuple[list[Any], int]:
        if depth > MAX_DEPTH:
            raise self.too_deep(position)
        position = self.skip(position + 1)
        out: list[Any] = []
        if self.peek(position) == ']':
            return out, position + 1
        while True:
            item, position = self.value(position, depth + 1)
            out.append(item)
            position = self.skip(position)
            if self.peek(position) == ']':
                return out, position + 1
            if self.peek(position) != ',':
                raise self.refuse("expected ',' or ']'", position)
            position = self.skip(position + 1)

    def value(self, position: int, depth: int) -> tuple[Any, int]:
        self.reach = max(self.reach, position)
        head = self.peek(position)
        if head == '{':
            return self.object(position, depth)
        if head == '[':
            return self.array(position, depth)
        if head in _STRINGS:
            return self.string(position)
        literal = _LITERAL.match(self.text, position)
        if literal is not None:
            return _LITERALS[literal.group(0)], literal.end()
        number = _NUMBER.match(self.text, position)
        if number is not None:
            try:
                return json.loads(number.group(0)), number.end()
            except ValueError as error:  # an integer too long to convert
                raise self.refuse(str(error)[:100], position) from error
        raise self.refuse('expected a JSON value', position)

    def string(self, position: int) -> tuple[str, int]:
        quote = self.text[position]
        match = _STRINGS[quote].match(self.text, position)
        if match is None:
            raise self.refuse('unterminated string', len(self.text) if quote in '"\'' else position)
        self.reach = max(self.reach, match.end())
        if quote != '"':
            self.used.add('quotes')
        literal = match.group(0) if quote == '"' else _as_json_string(match.group(1))
        try:
            return json.loads(literal), match.end()
        except ValueError:
            pass
        try:
            value = json.loads(literal, strict=False)
        except ValueError as error:
            raise self.refuse(f'invalid string ({str(error)[:80]})', position) from error
        self.used.add('raw_control')
        return value, match.end()
