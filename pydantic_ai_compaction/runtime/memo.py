"""Memoization by object identity that never keeps its keys alive.

pydantic-ai reuses the same message and part objects from request to request, so a value computed
for them once (a token estimate, a bundle's terms) can be reused on the next request. Messages and
parts are unhashable dataclasses, so entries are keyed by `id()`; each entry holds weak references
to its key objects and is dropped as soon as any of them is collected. So the memo never keeps a
history alive, and an id reused by a new object can never read an old value.
"""

from __future__ import annotations

import functools
import operator
import weakref
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar, cast

V = TypeVar('V')

_CALL = cast('Callable[[weakref.ref[object]], object | None]', weakref.ref.__call__)  # pyright: ignore[reportUnknownMemberType]
"""A reference's referent (or `None`), as a function `map` calls in C."""


class IdentityMemo(Generic[V]):
    """Values keyed by the identity of a sequence of objects (each must support weak references)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[int, ...], tuple[tuple[weakref.ref[object], ...], V]] = {}

    def get(self, objects: Sequence[object]) -> V | None:
        """The value stored for exactly these objects, or `None`."""
        entry = self._entries.get(tuple(map(id, objects)))
        if entry is None or len(entry[0]) != len(objects):
            return None
        # Each reference called and compared by identity in C (no frame per object): a run's first compaction
        # looks up every step of the history.
        if all(map(operator.is_, map(_CALL, entry[0]), objects)):
            return entry[1]
        return None

    def put(self, objects: Sequence[object], value: V) -> V:
        """Store *value* for these objects until any of them is collected; returns *value*."""
        key = tuple(map(id, objects))
        entries = self._entries
        refs: tuple[weakref.ref[object], ...] = ()

        def forget(_: weakref.ref[object]) -> None:
            entry = entries.get(key)
            if entry is not None and entry[0] is refs:
                # Two of the key's objects can die at once in two threads: both callbacks get here, and a
                # value put again meanwhile is only recomputed if removed.
                entries.pop(key, None)

        refs = tuple(weakref.ref(obj, forget) for obj in objects)
        entries[key] = (refs, value)
        return value

    def discard(self, objects: Sequence[object]) -> None:
        """Forget the value stored for these objects, if any."""
        self._entries.pop(tuple(map(id, objects)), None)

    def __len__(self) -> int:
        return len(self._entries)


def same_objects(left: Sequence[object], right: Sequence[object]) -> bool:
    """Whether *left* and *right* hold the same objects in the same order: by identity, never `==` (an equal copy
    can read differently: `0 == False`).

    Two lists are compared through their arrays of addresses in C, at a fraction of an identity pass's cost per
    object; both must be lists no other thread changes during the call (a slice made for the comparison, or a list
    its owner never changes). Anything else, or an interpreter whose lists are laid out otherwise, takes the
    identity pass.
    """
    count = len(left)
    if count != len(right):
        return False
    compare = _list_arrays()
    # `isinstance` for the type checker, `type` for the layout: a subclass may keep its items elsewhere.
    if compare is not None and isinstance(left, list) and isinstance(right, list) and type(left) is type(right) is list:
        return compare(left, right, count)
    return all(map(operator.is_, cast('Sequence[object]', left), right))


AddressesEqual = Callable[[int, int, int], bool]
"""`equal(first, second, size)`: whether the *size* bytes at two addresses are equal."""


def address_arrays() -> tuple[AddressesEqual, int] | None:
    """A comparison of memory in C and the size of an address, or `None` where arrays of addresses cannot be read
    (another interpreter than CPython, a build without the interpreter's lock, or without `ctypes`).

    The C library's `memcmp` (called without releasing the interpreter's lock: a short call), or, where it cannot be
    loaded by name (`None` is refused on Windows), both ranges copied out as bytes and compared. Called by the
    comparisons' makers, each cached and made at its first comparison: importing `ctypes` costs milliseconds a
    program that never compares should not pay.
    """
    import sys

    if sys.implementation.name != 'cpython' or not getattr(sys, '_is_gil_enabled', lambda: True)():
        return None
    try:
        import ctypes
    except ImportError:  # a build without it (some sandboxed or embedded ones)
        return None
    string_at = ctypes.string_at
    try:
        memcmp = ctypes.PyDLL(None).memcmp  # the C library, with the lock held during the call
        memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        memcmp.restype = ctypes.c_int
    except (OSError, AttributeError, TypeError):  # no C library to load by name here
        return lambda first, second, size: string_at(first, size) == string_at(second, size), ctypes.sizeof(
            ctypes.c_void_p
        )
    return lambda first, second, size: memcmp(first, second, size) == 0, ctypes.sizeof(ctypes.c_void_p)


@functools.cache
def _list_arrays() -> Callable[[list[object], list[object], int], bool] | None:
    """`compare(left, right, count)`: whether two lists' first *count* addresses are equal, compared in C
    (`address_arrays`); `None` where the layout cannot be read.

    A list's header ends with the address of its array, then its allocated size: the offset comes from the type's
    size and is checked on lists of known objects, so an interpreter that lays lists out otherwise falls back to
    the identity pass.
    """
    found = address_arrays()
    if found is None:
        return None
    import ctypes  # loaded by `address_arrays` already

    equal, word = found
    array_of_list = list.__basicsize__ - 2 * word  # `ob_item` then `allocated` end the list's header
    pointer = ctypes.c_void_p

    def compare(left: list[object], right: list[object], count: int) -> bool:
        if not count:
            return True
        first = pointer.from_address(id(left) + array_of_list).value or 0
        second = pointer.from_address(id(right) + array_of_list).value or 0
        return equal(first, second, count * word)

    try:
        probe = [object() for _ in range(4)]
        other = [*probe[:3], object()]
        if not compare(probe, list(probe), 4) or compare(probe, other, 4) or not compare(probe, other, 3):
            return None
    except Exception:  # an unexpected layout: use the identity pass
        return None
    return compare
