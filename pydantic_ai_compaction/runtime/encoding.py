"""The one text and JSON encoding for everything this library stores, renders, hashes or sends.

pydantic-ai accepts values that common encoders refuse: strings holding lone surrogates (from
`os.fsdecode` of bytes that are not UTF-8, or a provider's broken escape) and integers beyond 64
bits in tool arguments. `orjson` refuses both, `str.encode()` refuses the first, and a `CompactionPart`
holding one makes `all_messages_json()` fail later. So:

- `to_json` is the canonical JSON text (sorted keys, compact, UTF-8 except lone surrogates, which
  are written as `\\udXXX` escapes): lossless, valid, deterministic. Its text is the standard library's
  (`orjson` refuses big integers and surrogates, and writes floats and other types differently); values
  made only of strings, 64-bit integers, booleans, `None`, lists and string-keyed dicts, the usual tool
  arguments, are written by `orjson`, whose text for them is the same (tested), in a tenth of the time.
- `from_json` reads it back (and any JSON a model or a store returns), big integers and escaped
  surrogates included.
- `to_bytes` is the lossless byte form used for hashing and byte-exact storage
  (UTF-8 with `surrogatepass`), and `from_bytes` its inverse.
- `clean_text` is the *lossy* form for text this library writes into messages (summaries,
  checkpoints, restatements) and for full-text indexes: lone surrogates become U+FFFD, so what we
  author never breaks serialization. Originals are kept with `to_bytes`/`to_json`, never cleaned.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import math
import re
import secrets
import sys
from datetime import date, datetime, time
from typing import Any, cast

import orjson
import pydantic_core

_SURROGATE = re.compile('[\ud800-\udfff]')
_NUL = '\x00'


def has_surrogates(text: str) -> bool:
    """Whether *text* holds a lone surrogate (a code point that has no UTF-8 encoding)."""
    # Answered in C without the pattern scan, which is several times slower on a long text: ASCII text
    # (most tool output) at once, other text by UTF-8's strict encoder, which refuses exactly lone surrogates.
    if text.isascii():
        return False
    try:
        text.encode('utf-8')
    except UnicodeEncodeError:
        return True
    return False


def clean_text(text: str) -> str:
    """*text* with each lone surrogate replaced by U+FFFD (lossy; for text we author or index)."""
    return _SURROGATE.sub('\ufffd', text) if has_surrogates(text) else text


def clean_value(value: Any) -> Any:
    """*value* with `clean_text` applied to every string in it, keys included (for records we write)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_value(key): clean_value(item) for key, item in value.items()}  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list | tuple):
        if ascii_strings(value):  # pyright: ignore[reportUnknownArgumentType]
            return list(cast('list[str] | tuple[str, ...]', value))
        return [clean_value(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
    return value


def has_surrogate_keys(value: object) -> bool:
    """Whether a dict anywhere in *value* (in lists, tuples and dicts) has a string key holding a lone surrogate."""
    if isinstance(value, dict):
        items = cast('dict[object, object]', value)
        return any(isinstance(key, str) and has_surrogates(key) for key in items) or any(
            map(has_surrogate_keys, items.values())
        )
    if isinstance(value, list | tuple):
        return any(map(has_surrogate_keys, cast('list[object]', value)))
    return False


def ascii_strings(value: object) -> bool:
    """Whether *value* is a list or tuple of strings that are all ASCII (so none holds a lone surrogate).

    Found in C, with one join, not a call per item: a boundary record lists every dropped exchange's id, and a
    checkpoint's sections are lists of lines.
    """
    if not isinstance(value, list | tuple):
        return False
    try:
        return ''.join(value).isascii()  # pyright: ignore[reportUnknownArgumentType]
    except TypeError:  # an item is not a string
        return False


def args_text(args: object) -> str:
    """A tool call's arguments as canonical JSON (`to_json`): the one text of them everywhere, never an error.

    Arguments a provider streamed as JSON text are parsed with the standard library (integers beyond 64
    bits stay integers) and written canonically, so the same call reads the same whatever its source;
    text that is not JSON stays as it is, and none or blank text is `{}`. (`ToolCallPart.args_as_json_str`
    refuses lone surrogates, and `args_as_dict` raises on text that is not JSON.)
    """
    if args is None:
        return '{}'
    if not isinstance(args, str):
        return to_json(args)
    if not args.strip():
        return '{}'
    try:
        return to_json(from_json(args))  # integers past Python's digit limit too
    except ValueError:
        return args


def to_bytes(text: str) -> bytes:
    """The lossless bytes of *text* (UTF-8, lone surrogates kept with `surrogatepass`)."""
    return text.encode('utf-8', 'surrogatepass')


def from_bytes(data: bytes) -> str:
    """The inverse of `to_bytes`."""
    return data.decode('utf-8', 'surrogatepass')


def to_json(value: Any) -> str:
    """Canonical JSON text of *value*: sorted keys, no spaces, lossless for big integers and surrogates.

    One path for every value, so the same value always gives the same text (a hash of it is stable):
    non-finite floats become `null`; datetimes, dates and times their ISO form; dataclasses their fields;
    sets sorted lists (in one order whatever the hash seed: `_member_order`); bytes base64; anything else its
    `str`. A value nested deeper than the interpreter can walk becomes a fixed JSON string saying so (lossy,
    never an error).
    """
    try:
        if _orjson_writes_as_json(value):
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except (orjson.JSONEncodeError, RecursionError):
        pass  # a lone surrogate, an integer beyond 64 bits, nesting past orjson's limit: the standard library's path
    try:
        text = _ENCODER.encode(_plain(value))
    except RecursionError:
        text = '"<a value nested too deeply to encode>"'
    except ValueError:
        text = _with_long_integers(value)
    return text if text.isascii() else _SURROGATE.sub(lambda match: f'\\u{ord(match.group()):04x}', text)


def to_json_in_order(value: Any) -> str:
    """`to_json`'s text of *value* with each dict's keys in their own order, all ASCII (lone surrogates escaped).

    For a value stored to be given back as it was, where a reader sees the order of its keys (a tool result a
    model reads back). Not canonical: the same keys in another order give another text.
    """
    try:
        return _IN_ORDER.encode(_plain(value))
    except RecursionError:
        return '"<a value nested too deeply to encode>"'
    except ValueError:
        return _with_long_integers(value, _IN_ORDER)


def _with_long_integers(value: Any, encoder: json.JSONEncoder | None = None) -> str:
    """`to_json`'s standard-library text of *value* holding an integer past Python's digit limit
    (`sys.get_int_max_str_digits`, 4,300 by default), which has no `str` and so no JSON there (*encoder*:
    `_ENCODER` unless given).

    Each such integer is written as pydantic-core writes it (no such limit: as pydantic-ai sends it): as a key, its
    digits are the key (sorted with the others, as the standard library sorts keys written as strings); as a value,
    it is written in, in one pass, in place of a marker string no value holds (a NUL and a random token). Sets and
    dataclasses are opened here as `_other` opens them (the encoder's `default` would meet the integer unwritten),
    each node once: a set's members are ordered by their own text, integers written in (`_member_order`). A
    value the encoder still cannot write becomes a fixed JSON string saying so (lossy, never an error).
    """
    token = secrets.token_hex(8)
    digits: list[str] = []
    marker = re.compile(r'"\\u0000' + token + r':(\d+)\\u0000"')
    # Below these many bits an integer has fewer digits than the limit (log2(10) > 3.32): `str` writes it.
    safe_bits = int((_digit_limit() - 1) * 3.32)

    def long(item: Any) -> bool:
        return isinstance(item, int) and not isinstance(item, bool) and item.bit_length() >= safe_bits

    def written_in(text: str) -> str:
        return marker.sub(lambda match: digits[int(match.group(1))], text)

    def swap(item: Any) -> Any:
        if long(item):
            digits.append(pydantic_core.to_json(int(item)).decode())
            return f'{_NUL}{token}:{len(digits) - 1}{_NUL}'
        if isinstance(item, dict):
            return {
                (pydantic_core.to_json(int(key)).decode() if long(key) else _key(key)): swap(inner)  # pyright: ignore[reportUnknownArgumentType]
                for key, inner in item.items()  # pyright: ignore[reportUnknownVariableType]
            }
        if isinstance(item, list | tuple):
            return [swap(inner) for inner in item]  # pyright: ignore[reportUnknownVariableType]
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            return swap(dataclasses.asdict(item))
        if isinstance(item, set | frozenset):
            # `_member_order`'s order, from each member's swapped form: a member is walked once, however deep.
            members = [(swap(inner), type(inner).__qualname__) for inner in item]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
            # Ties (members written apart that the key cannot tell apart) go by their text as written.
            members.sort(
                key=lambda pair: (
                    written_in(_ORDER_ENCODER.encode(pair[0])),
                    pair[1],
                    written_in((encoder or _ENCODER).encode(pair[0])),
                )
            )
            return [swapped for swapped, _ in members]
        return _plain(item)

    try:
        text = (encoder or _ENCODER).encode(swap(value))
    except (ValueError, RecursionError):
        return '"<a value holding an integer too long to encode>"'
    return written_in(text)


def _member_order(member: Any) -> tuple[str, str]:
    """The key `_other` sorts a set's members by: the member's text as `json.dumps(sort_keys=True)` writes it, then
    its type's name (a string and an object written as that string tie on the text).

    Sets and dataclasses inside the member are written as `to_json` writes them (their sets sorted the same way),
    not by `str`, whose order of a set's members follows the interpreter's hash seed; so are integers past the
    digit limit.
    """
    try:
        text = _ORDER_PLAIN.encode(_plain(member))
    except (TypeError, ValueError):  # a set or a dataclass inside; an integer past the digit limit
        text = _with_long_integers(member, _ORDER_ENCODER)
    return text, type(member).__qualname__


def _first(pair: tuple[tuple[str, str], Any]) -> tuple[str, str]:
    return pair[0]


def _unordered(value: Any) -> str:
    """`str` of a value JSON has no form for, except those `_member_order` writes itself (a `TypeError`)."""
    if isinstance(value, set | frozenset) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        raise TypeError('written by _with_long_integers')
    return str(value)


_ORDER_ENCODER = json.JSONEncoder(sort_keys=True, default=str)
"""`json.dumps(sort_keys=True, default=str)`: the text a set's members are ordered by."""
_ORDER_PLAIN = json.JSONEncoder(sort_keys=True, default=_unordered)
"""`_ORDER_ENCODER` for a member without sets or dataclasses inside (the common case, without a walk in Python)."""


def _digit_limit() -> int:
    """Python's limit on the digits of an integer converted to or from text, as set now (0 sets none)."""
    return sys.get_int_max_str_digits() or _NO_LIMIT


_NO_LIMIT = 1 << 62


_EXACT_SCALARS = (str, int, bool, type(None))
PLAIN_SCALARS = frozenset(_EXACT_SCALARS)
"""The value types of a flat dict (`_plain_flat`) that `orjson` writes as `to_json` does."""
_STR_ONLY = frozenset({str})


def _orjson_writes_as_json(value: Any) -> bool:
    """Whether *value* holds only types `orjson` writes as the standard library does: exact `str`, `int`,
    `bool`, `None`, `list`, `tuple` and `dict` with `str` keys (no float: the two write some differently).

    Big integers and lone surrogates pass this check; `orjson` refuses them and `to_json` takes the
    standard library's path.
    """
    kind = type(value)  # pyright: ignore[reportUnknownVariableType]
    if kind in _EXACT_SCALARS:
        return True
    if kind is dict:
        if _plain_flat(value):  # pyright: ignore[reportUnknownArgumentType]
            return True
        return all(type(key) is str and _orjson_writes_as_json(item) for key, item in value.items())  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    if kind is list or kind is tuple:
        return all(_orjson_writes_as_json(item) for item in value)  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return False


def _plain_flat(value: dict[Any, Any]) -> bool:
    """Whether every key of *value* is an exact `str` and every value an exact `str`, `int`, `bool` or `None`.

    Most arguments are such flat dicts: told in C, without a call per item. `orjson` writes them as `to_json`
    does, or refuses them (a lone surrogate, an integer beyond 64 bits).
    """
    return _STR_ONLY.issuperset(map(type, value)) and PLAIN_SCALARS.issuperset(map(type, value.values()))


def from_json(text: str | bytes) -> Any:
    """Parse JSON text, accepting integers of any size and escaped lone surrogates.

    Raises:
        ValueError: *text* is not JSON (or nested deeper than the interpreter can walk).
    """
    # orjson reads an integer beyond 64 bits as a float, silently: only digit runs that cannot be
    # one go to it.
    probe = text.decode('utf-8', 'surrogatepass') if isinstance(text, bytes) else text
    if _LONG_DIGITS.search(probe) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(probe)
    except (json.JSONDecodeError, RecursionError) as error:
        raise ValueError(f'not JSON: {error}') from None
    except ValueError:
        pass  # an integer past Python's digit limit: read again with `_int` (a call per integer, so only then)
    try:
        return json.loads(probe, parse_int=_int)
    except (json.JSONDecodeError, RecursionError) as error:
        raise ValueError(f'not JSON: {error}') from None


def _int(digits: str) -> int:
    """An integer's JSON *digits* read back, past Python's digit limit too (`to_json` writes such integers)."""
    if len(digits) < _digit_limit():
        return int(digits)
    # Halves, each under the limit at the bottom (at least 640 digits): products and sums have no digit limit.
    sign, body = (-1, digits[1:]) if digits.startswith('-') else (1, digits)
    low = len(body) // 2
    return sign * (_int(body[:-low]) * 10**low + _int(body[-low:]))


_LONG_DIGITS = re.compile(r'\d{19}')


def _other(value: Any) -> Any:
    """What JSON has no form for, as data (the `default` of `json.dumps`)."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, set | frozenset):
        members = cast('set[Any] | frozenset[Any]', value)
        keyed: list[tuple[tuple[str, str], Any]] = sorted(((_member_order(item), item) for item in members), key=_first)
        if any(one[0] == other[0] for one, other in itertools.pairwise(keyed)):
            # Members the key cannot tell apart that are written differently (bytes and the string of their `str`,
            # a datetime and its `str`, inside tuples): their own text decides, not the set's iteration order.
            keyed.sort(key=lambda pair: (pair[0], to_json(pair[1])))
        return [_plain(item) for _, item in keyed]
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    return str(value)


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(',', ':'), ensure_ascii=False, allow_nan=False, default=_other)
"""`to_json`'s standard-library encoder, built once (`json.dumps` with arguments builds one per call)."""
_IN_ORDER = json.JSONEncoder(separators=(',', ':'), allow_nan=False, default=_other)
"""`to_json_in_order`'s encoder: keys as they come, every non-ASCII character escaped (lone surrogates included)."""


def _plain(value: Any) -> Any:
    """*value* with non-finite floats as `None` and keys as strings, as orjson writes them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {_key(key): _plain(item) for key, item in value.items()}  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
    return value


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool) or key is None:
        return json.dumps(key)
    return str(key)


def strip_nul(text: str) -> str:
    """*text* without NUL characters (PostgreSQL text columns refuse them); for indexes, never originals."""
    return text.replace(_NUL, '') if _NUL in text else text
