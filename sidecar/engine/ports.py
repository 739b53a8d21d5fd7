"""What the engine needs of the store: a narrow ``typing.Protocol``, not the ``Store`` class.

Only the code that builds an ``Engine`` (``server/engine_host.py``, an embedder, a test) holds
the concrete ``sidecar.store.Store``; every engine unit is typed on ``StorePort``, which lists
exactly the methods and attributes the engine calls (mypy checks that ``Store`` satisfies it
where the engine is built). A new store call in the engine is a new line here, so the
engine's dependence on the store stays visible in one place.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol, cast

from sidecar.model.messages import Message, WithParts
from sidecar.model.parts import Part
from sidecar.model.rpc import StoredMessage
from sidecar.model.session import Session
from sidecar.store import Boundary, Key
from sidecar.store.backend import Done
from sidecar.store.store import LightMessage, PartKey

if TYPE_CHECKING:
    from sidecar.store import Store


class WindowCachePort(Protocol):
    """The store's window cache, as the write door drops a session's entry."""

    def invalidate(self, sid: str) -> None: ...


class StorePort(Protocol):
    """Every store call the engine makes."""

    @property
    def cache(self) -> WindowCachePort: ...

    # sessions
    async def put_session(self, session: Session) -> None: ...
    async def get_session(self, session_id: str) -> Session | None: ...
    async def require_session(self, session_id: str) -> Session: ...
    async def delete_session(self, session_id: str) -> bool: ...

    # messages and parts
    def put_message_then(self, info: Message, raw: bytes | str, then: Done[None]) -> None: ...
    def put_part_then(self, part: Part | PartKey, raw: bytes | str, then: Done[None]) -> None: ...
    async def put_many(
        self,
        messages: Sequence[tuple[Message, bytes | str]],
        parts: Sequence[tuple[Part, bytes | str]],
    ) -> None: ...
    async def get_message(self, message_id: str) -> tuple[Message, str] | None: ...
    async def get_part(self, part_id: str) -> tuple[Part, str] | None: ...
    async def message_key(self, message_id: str) -> Key | None: ...
    async def remove_message(self, session_id: str, message_id: str) -> bool: ...
    async def remove_part(self, session_id: str, message_id: str, part_id: str) -> bool: ...
    async def mark_compacted(self, part_ids: Sequence[str], ts: int) -> list[str]: ...
    async def delete_from(
        self, session_id: str, start: Key, part_cut: tuple[str, str] | None
    ) -> int: ...
    async def barrier(self) -> None: ...

    # windows
    async def boundary(self, session_id: str, before: Key | None = None) -> Boundary | None: ...
    async def window(
        self,
        session_id: str,
        start: Key | None = None,
        end: Key | None = None,
        raws: dict[str, str] | None = None,
    ) -> list[WithParts]: ...
    def newest_first(
        self, session_id: str, end: Key | None = None, page: int = ...
    ) -> AsyncIterator[list[WithParts]]: ...
    def light_newest_first(
        self, session_id: str, end: Key | None = None, page: int = ...
    ) -> AsyncIterator[list[LightMessage]]: ...
    def cached_newest_first(
        self, session_id: str
    ) -> tuple[Key | None, Iterator[WithParts]] | None: ...
    async def fresh(self, session_id: str) -> None: ...
    async def page_raw(
        self, session_id: str, limit: int | None, cursor: str | None
    ) -> tuple[list[StoredMessage], str | None]: ...
    async def summary_texts(self, session_id: str, limit: int) -> list[str]: ...

    # the compaction lease
    async def acquire_lease(self, name: str, owner: str, ttl_ms: int) -> bool: ...
    async def release_lease(self, name: str, owner: str) -> None: ...


def steering(store: StorePort) -> Store:
    """``store`` for ``sidecar.store.steer``'s functions, which are still typed on the class
    (pins and compaction records): the one place the engine names it, until the store's
    steering sits behind its face as methods (then they join ``StorePort``)."""
    return cast("Store", store)
