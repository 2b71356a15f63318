"""The one text and JSON encoding for everything this library stores, renders, hashes or sends.

pydantic-ai accepts values that common encoders refuse: strings holding lone surrogates (from
`os.fsdecode` of bytes that are not UTF-8, or a provider's broken escape) and integers beyond 64
bits in tool arguments. `orjson` refuses both, `str.encode()` refuses the first, and a `CompactionPart`
holding one makes `all_messages_json()` fail later. So:

- `to_json` is the canonical JSON text (sorted keys, compact, UTF-8 except lone surrogates, which
  are written as `\\udXXX` escapes): lossless, valid, deterministic. It always takes the standard
  library's path (`orjson` refuses big integers and surrogates, and writes other types differently,
  so two paths would give two texts for one value); what it encodes is small (tool arguments, records).
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
import json
import math
import re
from datetime import date, datetime, time
from typing import Any

import orjson

_SURROGATE = re.compile('[\ud800-\udfff]')
_NUL = '\x00'


def has_surrogates(text: str) -> bool:
    """Whether *text* holds a lone surrogate (a code point that has no UTF-8 encoding)."""
    # ASCII text (most tool output) is answered in C without the pattern scan.
    return not text.isascii() and _SURROGATE.search(text) is not None


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
        return [clean_value(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
    return value


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
        return to_json(json.loads(args))
    except (ValueError, RecursionError):
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
    sets sorted lists; bytes base64; anything else its `str`. A value nested deeper than the interpreter
    can walk becomes a fixed JSON string saying so (lossy, never an error).
    """
    try:
        text = _ENCODER.encode(_plain(value))
    except RecursionError:
        text = '"<a value nested too deeply to encode>"'
    return _SURROGATE.sub(lambda match: f'\\u{ord(match.group()):04x}', text)


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


_LONG_DIGITS = re.compile(r'\d{19}')


def _other(value: Any) -> Any:
    """What JSON has no form for, as data (the `default` of `json.dumps`)."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, set | frozenset):
        return sorted((_plain(item) for item in value), key=lambda item: json.dumps(item, sort_keys=True, default=str))  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    return str(value)


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(',', ':'), ensure_ascii=False, allow_nan=False, default=_other)
"""What `json.dumps` builds from these arguments at each call (a compaction of 50k messages writes 25k calls'
arguments): made once. Encoding keeps no state between calls."""


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
