"""The write door: every write to a session goes through here, and so does what follows it.

A write changes more than its rows: the window cache (``Store.cache``), the delta revisions
``since`` refers to, a summary prepared ahead of an overflow (``compaction.prepare``), the
session's turn clock (the automatic work waiting for the turn's end) and the session's
subscribers. Each ``WriteKind`` says which of these it touches; ``WriteDoor``
applies them in one order, so no caller (a handler, an engine unit) has to remember them:

1. ``before``: the turn clock (a write of the turn being written), before the write is
   queued, so automatic work registered behind it waits;
2. the write itself (an awaited op, or, on the ingest path, a queued one answered from the
   commit callback, which stays zero-copy and task-free);
3. ``after`` (once committed): the window cache (dropped when the store's commit does not keep
   it for this kind), the revisions, the prepared summary, then the events to subscribers.

The history index is the store's own: a commit notes what it wrote, and the store's indexer
(``sidecar.store.indexer``) brings the index up to date in batches of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import msgspec

from sidecar.engine import fork as fork_mod
from sidecar.engine.delta import Revisions
from sidecar.engine.host import Host
from sidecar.engine.ports import StorePort
from sidecar.errors import UnknownMessage, UnknownPart
from sidecar.model.buffers import Shared
from sidecar.model.config import Config
from sidecar.model.messages import Message
from sidecar.model.rpc import (
    Event,
    MessageRemovedEvent,
    MessageUpdatedEvent,
    PartRemovedEvent,
    PartUpdatedEvent,
)
from sidecar.model.session import Session
from sidecar.store import Done, PartKey

T = TypeVar("T")


@dataclass(frozen=True)
class WriteKind:
    """A kind of write, and which of a write's consequences it has."""

    name: str
    #: The store's commit keeps the window cache for it (row-exact); else the door drops the
    #: session's cached window after the commit.
    cache_kept: bool = True
    #: It changes what a prepared summary covers without a message write (whose changes the
    #: summary's fingerprint catches when it would be committed): the summary is dropped.
    history: bool = False
    #: A write of the turn being written: the turn's quiet timer starts again.
    turn: bool = False


MESSAGE = WriteKind("message", turn=True)
PART = WriteKind("part", turn=True)
MESSAGE_REMOVE = WriteKind("message.remove")
PART_REMOVE = WriteKind("part.remove")
PIN = WriteKind("pin", history=True)
REVERT = WriteKind("revert", history=True)
UNREVERT = WriteKind("unrevert", history=True)
UNCOMPACT = WriteKind("uncompact", cache_kept=False, history=True)
FORK = WriteKind("fork")
SESSION = WriteKind("session")
SESSION_DELETE = WriteKind("session.delete", cache_kept=False, history=True)
PRUNE = WriteKind("prune")
COMPACTION = WriteKind("compaction")


class Writer(Protocol):
    """The client an ingest write came from: subscribed to the session once it commits, and
    left out of the write's own notification when it declared ``capabilities.echo`` false."""

    @property
    def echo(self) -> bool: ...

    def subscribe(self, session_id: str) -> None: ...


def _message_event(stored: Any) -> Event:
    return MessageUpdatedEvent(message=stored)


def _part_event(stored: Any) -> Event:
    return PartUpdatedEvent(part=stored)


class WriteDoor:
    """The one entry for writes (see the module docstring). ``touch`` is the turn clock,
    ``invalidate_prepared`` the prepared summaries' drop."""

    def __init__(
        self,
        store: StorePort,
        host: Host,
        revisions: Revisions,
        touch: Callable[[str], None],
        invalidate_prepared: Callable[[str], None],
        will_store: Callable[[Message, Config | None], Done[Any] | None],
    ) -> None:
        self.store = store
        self.host = host
        self.revisions = revisions
        self._touch = touch
        self._invalidate_prepared = invalidate_prepared
        self._will_store = will_store  # the automatic work a message write causes

    def before(self, kind: WriteKind, session_id: str) -> None:
        if kind.turn:
            self._touch(session_id)

    def after(
        self,
        kind: WriteKind,
        session_id: str,
        events: Sequence[Event] = (),
        skip: Writer | None = None,
    ) -> None:
        """What follows a committed write of ``kind`` to the session; its ``events`` go to
        every subscriber but ``skip``."""
        if not kind.cache_kept:
            self.store.cache.invalidate(session_id)
        self.revisions.wrote(session_id)
        if kind.history:
            self._invalidate_prepared(session_id)
        for event in events:
            self.host.publish(session_id, event, skip)

    async def write(
        self,
        kind: WriteKind,
        session_id: str,
        op: Callable[[], Awaitable[tuple[T, Sequence[Event]]]],
    ) -> T:
        """Run ``op`` (the write; it returns its result and the events it causes), then what
        follows it. Nothing follows a write that raised: nothing was stored."""
        self.before(kind, session_id)
        result, events = await op()
        self.after(kind, session_id, events)
        return result

    def _on_commit(
        self,
        kind: WriteKind,
        session_id: str,
        reply: Any,
        event: Callable[[Any], Event],
        then: Done[Any],
        committed: Done[None] | None,
        writer: Writer | None,
    ) -> Done[None]:
        """The ingest path's commit callback: ``committed`` (the automatic work the write
        causes) is told, the writer is subscribed, what follows the write is applied
        (``event(reply)`` to subscribers, the writer too unless it declared no echo), and
        ``then(reply, None)`` answers; a failed write only answers ``then(None, exc)``. One
        closure a write and the event made only once committed: a queued write holds as few
        objects as it can."""

        def done(_: None, exc: BaseException | None) -> None:
            if committed is not None:
                committed(None, exc)
            if exc is not None:
                then(None, exc)
                return
            skip = None
            if writer is not None:
                writer.subscribe(session_id)
                if not writer.echo:
                    skip = writer
            self.after(kind, session_id, (event(reply),), skip)
            then(reply, None)

        return done

    # -- the writes ----------------------------------------------------------------------------

    def put_message(
        self,
        info: Message,
        raw: bytes,
        cfg: Config | None,
        then: Done[Any],
        writer: Writer | None = None,
    ) -> None:
        """``message/update``: queue the row; once committed the work it causes may run (see
        ``will_store``, registered before the write is queued so a read behind it waits), the
        writer is subscribed, what follows a write is applied and ``then`` gets the stored
        JSON."""
        work = self._will_store(info, cfg)
        sid = info.session_id
        self.before(MESSAGE, sid)
        done = self._on_commit(MESSAGE, sid, msgspec.Raw(raw), _message_event, then, work, writer)
        self.store.put_message_then(info, raw, done)

    def put_part(
        self,
        part: PartKey,
        raw: str | Shared,
        stored: Any,
        then: Done[Any],
        writer: Writer | None = None,
    ) -> None:
        """``part/update``'s hot path: queue the row (``raw``); once committed, ``stored``
        (the client's bytes, whatever encodes as them) is echoed in ``part/updated`` and the
        reply."""
        sid = part.session_id
        self.before(PART, sid)
        done = self._on_commit(PART, sid, stored, _part_event, then, None, writer)
        self.store.put_part_then(part, raw, done)

    async def put_session(self, session: Session) -> None:
        """``session/create``: store the new session."""

        async def op() -> tuple[None, list[Event]]:
            await self.store.put_session(session)
            return None, []

        await self.write(SESSION, session.id, op)

    async def delete_session(self, session_id: str) -> bool:
        """``session/delete``: False when there was no such session."""

        async def op() -> tuple[bool, list[Event]]:
            return await self.store.delete_session(session_id), []

        return await self.write(SESSION_DELETE, session_id, op)

    async def remove_message(self, session_id: str, message_id: str) -> None:
        async def op() -> tuple[None, list[Event]]:
            await self.store.require_session(session_id)
            if not await self.store.remove_message(session_id, message_id):
                raise UnknownMessage(message_id)
            return None, [MessageRemovedEvent(session_id=session_id, message_id=message_id)]

        await self.write(MESSAGE_REMOVE, session_id, op)

    async def remove_part(self, session_id: str, message_id: str, part_id: str) -> None:
        async def op() -> tuple[None, list[Event]]:
            await self.store.require_session(session_id)
            if not await self.store.remove_part(session_id, message_id, part_id):
                raise UnknownPart(part_id)
            event = PartRemovedEvent(session_id=session_id, message_id=message_id, part_id=part_id)
            return None, [event]

        await self.write(PART_REMOVE, session_id, op)

    async def fork(self, session_id: str, message_id: str | None) -> Session:
        async def op() -> tuple[Session, list[Event]]:
            source = await self.store.require_session(session_id)
            return await fork_mod.fork(self.store, source, message_id), []

        return await self.write(FORK, session_id, op)
