"""One validator for public configuration fields.

Every capability checks its fields in `__post_init__` through these functions, so a bad value fails at
construction with the same kind of message everywhere: the `Class.field`, what was expected and the
value given. Without them a `True`, `2.5`, `'3'`, NaN or a bare string slips through and surfaces much
later as a bare `TypeError` deep in a run, or as one-character markers.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import types
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

T = TypeVar('T')


class ConfigurationError(ValueError, TypeError):
    """A configuration value is not acceptable.

    Both a `ValueError` and a `TypeError`, so code that catches either for a bad argument keeps working
    whether the value had the wrong type (`'3'`) or the wrong value (`-3`).
    """


MAX_WINDOW = 10**12
"""Largest context window a setting may name, in tokens: far past any model's, and a ratio of it to a history's
size is still a float (an integer past about 1.8e308 is not, and every request failed on it)."""


def fail(owner: str, name: str, expected: str, value: object) -> ConfigurationError:
    """The error for `owner.name`, which must be *expected* but is *value* (raise it)."""
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + '...'
    return ConfigurationError(f'{owner}.{name} must be {expected}, got {shown} ({type(value).__name__}).')


def check_int(
    owner: str, name: str, value: object, *, minimum: int | None = None, maximum: int | None = None, also: str = ''
) -> int:
    """*value* if it is an integer (not a bool) within the bounds, else `ConfigurationError` (*also*: what else the
    field accepts, named in the error)."""
    expected = _range('an integer', minimum, maximum) + also
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(owner, name, expected, value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise fail(owner, name, expected, value)
    return value


def check_optional_int(
    owner: str, name: str, value: object, *, minimum: int | None = None, maximum: int | None = None
) -> int | None:
    """Like `check_int`, also accepting `None` (which the error then names as allowed)."""
    return None if value is None else check_int(owner, name, value, minimum=minimum, maximum=maximum, also=' or None')


def check_number(
    owner: str,
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
    also: str = '',
) -> float:
    """*value* if it is a finite real number (not a bool, not NaN or infinite) within the bounds.

    *also* ends what the error says is expected (`' or None'` for an optional number).
    """
    low = None if minimum is None else (f'> {minimum:g}' if exclusive_minimum else f'≥ {minimum:g}')
    high = None if maximum is None else f'≤ {maximum:g}'
    expected = 'a finite number' + ''.join(f' {bound}' for bound in (low, high) if bound) + also
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail(owner, name, expected, value)
    try:
        number = float(value)
    except OverflowError:  # an int beyond the float range
        raise fail(owner, name, expected, value) from None
    if not math.isfinite(number):
        raise fail(owner, name, expected, value)
    if minimum is not None and (number <= minimum if exclusive_minimum else number < minimum):
        raise fail(owner, name, expected, value)
    if maximum is not None and number > maximum:
        raise fail(owner, name, expected, value)
    return number


def check_optional_number(
    owner: str,
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
) -> float | None:
    """Like `check_number`, also accepting `None` (which the error then names as allowed)."""
    if value is None:
        return None
    return check_number(
        owner, name, value, minimum=minimum, maximum=maximum, exclusive_minimum=exclusive_minimum, also=' or None'
    )


def check_strings(owner: str, name: str, value: object, *, allow_empty_items: bool = False) -> tuple[str, ...]:
    """*value* as a tuple of strings. A bare string is refused: it would iterate as characters."""
    expected = 'a sequence of strings (a list or tuple; a bare string would be split into characters)'
    if isinstance(value, str | bytes | bytearray) or not isinstance(value, Iterable):
        raise fail(owner, name, expected, value)
    items: list[str] = []
    for index, item in enumerate(cast('Iterable[object]', value)):
        if not isinstance(item, str) or (not allow_empty_items and not item):
            raise fail(owner, f'{name}[{index}]', 'a non-empty string', item)
        items.append(item)
    return tuple(items)


def check_patterns(owner: str, name: str, value: object) -> tuple[re.Pattern[str], ...]:
    """*value* (a sequence of regex strings or compiled patterns) compiled; a bad pattern names itself."""
    if isinstance(value, str | bytes | bytearray) or not isinstance(value, Iterable):
        raise fail(owner, name, 'a sequence of regular expressions (a bare string is refused)', value)
    compiled: list[re.Pattern[str]] = []
    for index, item in enumerate(cast('Iterable[object]', value)):
        if isinstance(item, re.Pattern):
            compiled.append(cast('re.Pattern[str]', item))
            continue
        if not isinstance(item, str) or not item:
            raise fail(owner, f'{name}[{index}]', 'a non-empty regular expression string', item)
        try:
            compiled.append(re.compile(item))
        except re.error as error:
            raise ConfigurationError(
                f'{owner}.{name}[{index}] is not a valid regular expression: {item!r} ({error}).'
            ) from None
    return tuple(compiled)


def check_pattern(owner: str, name: str, value: object) -> re.Pattern[str]:
    """*value* (one regex string or compiled pattern) compiled; a bad pattern names itself."""
    if isinstance(value, re.Pattern):
        return cast('re.Pattern[str]', value)
    if not isinstance(value, str) or not value:
        raise fail(owner, name, 'a non-empty regular expression string', value)
    try:
        return re.compile(value)
    except re.error as error:
        raise ConfigurationError(f'{owner}.{name} is not a valid regular expression: {value!r} ({error}).') from None


def check_choice(owner: str, name: str, value: object, choices: Iterable[T]) -> T:
    """*value* if it is one of *choices*."""
    options = tuple(choices)
    if isinstance(value, bool) or value not in options:
        raise fail(owner, name, 'one of ' + ', '.join(repr(option) for option in options), value)
    return value  # pyright: ignore[reportReturnType]


def check_instance(owner: str, name: str, value: object, kind: type[T] | tuple[type[Any], ...], what: str) -> T:
    """*value* if it is an instance of *kind* (described as *what* in the error)."""
    if not isinstance(value, kind):
        raise fail(owner, name, what, value)
    return value  # pyright: ignore[reportReturnType]


def check_bool(owner: str, name: str, value: object) -> bool:
    """*value* if it is `True` or `False` (not 0, 1 or a string)."""
    if not isinstance(value, bool):
        raise fail(owner, name, 'True or False', value)
    return value


def check_callable(
    owner: str, name: str, value: object, *, optional: bool = True, arguments: int | None = None
) -> Callable[..., Any] | None:
    """*value* if it is a plain (not `async`) callable (or `None` when *optional*), taking *arguments* positional
    arguments when given.

    Each hook is called without `await`: an `async def` would give a coroutine never awaited, which is truthy (a
    `when` always true, every exchange protected) or not the value expected, and its work never done. A wrong
    number of parameters is told here rather than at the first compaction, for a Python function (or a method or
    `functools.partial` of one); other callables are taken as they are.
    """
    if value is None and optional:
        return None
    expected = 'a callable' + (f' of {arguments} argument{"s" * (arguments != 1)}' if arguments is not None else '')
    expected += ' or None' if optional else ''
    if not callable(value):
        raise fail(owner, name, expected, value)
    if _is_async(value):
        raise fail(owner, name, expected + ' (not async: it is called without await)', value)
    if arguments is not None and _plain_function(value):
        # Only where the signature is the call's own: an object's `__call__` (a `staticmethod` one is read with a
        # parameter too few), a mock or a C callable may be called in ways its signature does not show.
        try:
            inspect.signature(value, follow_wrapped=False).bind(*([None] * arguments))
        except TypeError:
            raise fail(owner, name, expected, value) from None
        except ValueError:
            pass  # no signature to read
    return value


def _is_async(value: object) -> bool:
    """Whether calling *value* gives a coroutine: an `async def`, an object with an `async def __call__`, or a
    `functools.partial` of either. Anything whose kind cannot be read (a `Mock(spec=...)` trips `inspect`) is not."""
    while isinstance(value, functools.partial):
        value = cast('functools.partial[Any]', value).func
    try:
        if inspect.iscoroutinefunction(value):
            return True
        if inspect.isroutine(value) or isinstance(value, type):
            return False
        return inspect.iscoroutinefunction(type(value).__call__)  # pyright: ignore[reportUnknownMemberType]
    except Exception:
        return False


def _plain_function(value: object) -> bool:
    """Whether *value* is a Python function, a method of one, or a `functools.partial` of one: by its exact type (a
    `Mock(spec=function)` says it is a function)."""
    while type(value) is functools.partial:
        value = cast('functools.partial[Any]', value).func
    if type(value) is types.MethodType:
        value = cast(types.MethodType, value).__func__
    return type(value) is types.FunctionType


def check_model(owner: str, name: str, value: object) -> object:
    """*value* if it is a pydantic-ai `Model`, `None`, or a model name `infer_model` could build: not blank, and
    with a provider prefix (`'openai:gpt-5-mini'`) a model after it. Whether the provider and model exist is told
    at the first call (a `SetupWarning`): building one needs its package and key.
    """
    from pydantic_ai.models import Model  # here: checks are imported by everything, pydantic-ai's models by few

    expected = "a Model, a model name ('provider:model') or None"
    if value is None or isinstance(value, Model):
        return cast(object, value)
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise fail(owner, name, expected, value)
    provider, colon, model = value.partition(':')
    if colon and (not provider or not model.strip()):
        raise fail(owner, name, expected, value)
    return value


def _range(kind: str, minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f'{kind} from {minimum} to {maximum}'
    if minimum is not None:
        return f'{kind} ≥ {minimum}'
    if maximum is not None:
        return f'{kind} ≤ {maximum}'
    return kind


def is_str(value: object) -> bool:
    """Whether *value* is a `str`: for a value typed `str` that a user's code may have set to anything."""
    return isinstance(value, str)
