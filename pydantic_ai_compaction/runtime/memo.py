"""Memoization by object identity that never keeps its keys alive.

pydantic-ai reuses the same message and part objects from request to request, so a value computed
for them once (a token estimate, a bundle's terms) can be reused on the next request. Messages and
parts are unhashable dataclasses, so entries are keyed by `id()`; each entry holds weak references
to its key objects and is dropped as soon as any of them is collected. So the memo never keeps a
history alive, and an id reused by a new object can never read an old value.
"""

from __future__ import annotations

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
