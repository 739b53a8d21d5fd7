"""Results remembered per object, for as long as those objects live, and no longer.

The store hands back the same decoded Structs for unchanged rows (its decode cache), so a
result computed from them (a part's token estimate, a message's rendering) can be reused by
object identity. Keyed by ``id()``, an entry must not outlive its objects (a freed object's id
is reused); holding the objects to prevent that would keep them alive past the decode cache,
which is bounded in bytes, and let a memo bounded only by entries pin any amount of memory.
So an entry holds weak references, and drops itself when the first of its objects is freed.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

V = TypeVar("V")


class _Watch(weakref.ref):  # type: ignore[type-arg]
    """A weak reference that knows the entry it belongs to."""

    __slots__ = ("key",)
    key: Hashable


class LiveMemo(Generic[V]):
    """``key -> value``, where ``key`` is made of the ids of ``objects`` given to ``put``:
    the entry lasts while all of them live (so their ids cannot have been reused) and at most
    ``limit`` entries are kept (all dropped when full)."""

    __slots__ = ("_drop", "_items", "_limit")

    def __init__(self, limit: int) -> None:
        # key -> (value, the weak references watching the entry's objects). An entry holds its
        # references: once it is dropped they go too, and never call back.
        self._items: dict[Hashable, tuple[V, tuple[_Watch, ...]]] = {}
        self._limit = limit
        self._drop = self._dropped  # one bound method for every watch

    def get(self, key: Hashable) -> V | None:
        hit = self._items.get(key)
        return None if hit is None else hit[0]

    def put(self, key: Hashable, objects: Iterable[object], value: V) -> None:
        items = self._items
        if len(items) >= self._limit:
            items.clear()
        watches = tuple(_Watch(o, self._drop) for o in objects)
        for w in watches:
            w.key = key
        items[key] = (value, watches)

    def _dropped(self, watch: _Watch) -> None:
        """One of an entry's objects was freed: the entry goes, unless it is a newer one."""
        items = self._items
        hit = items.get(watch.key)
        if hit is not None and watch in hit[1]:
            # ``pop``: the object may be freed on another thread, as the loop changes the memo.
            items.pop(watch.key, None)

    def __len__(self) -> int:
        return len(self._items)
