"""Steering compaction (PROTOCOL.md "Steering compaction"): pins, the compaction records
(``session/compactions``) and undoing compactions (``session/uncompact``). The kept block a
summary holds is ``steer``'s (pure rules); the rows are the store's."""

from __future__ import annotations

import asyncio
from typing import Protocol

import msgspec

from sidecar.engine import lease as lease_mod
from sidecar.engine.auto import Automatic
from sidecar.engine.ports import StorePort
from sidecar.engine.writes import PIN, UNCOMPACT, WriteDoor
from sidecar.errors import Busy, InvalidParams
from sidecar.model.rpc import (
    CompactionRecord,
    Event,
    MessageRemovedEvent,
    PartUpdatedEvent,
)

_record = msgspec.json.Decoder(CompactionRecord)


class Face(Protocol):
    """What steering needs of the ``Engine`` (its face)."""

    store: StorePort
    writes: WriteDoor
    auto: Automatic
    owner: str

    def lock(self, session_id: str) -> asyncio.Lock: ...
    def is_compacting(self, session_id: str) -> bool: ...


class Steering:
    def __init__(self, face: Face) -> None:
        self.face = face
        self.store = face.store

    async def compactions(self, session_id: str) -> list[CompactionRecord]:
        await self.store.require_session(session_id)
        return [_record.decode(d) for d in await self.store.compactions(session_id)]

    async def uncompact(
        self, session_id: str, message_id: str | None, restore_pruned: bool
    ) -> list[str]:
        """Remove the newest compaction (or ``message_id``'s and every later one): marker,
        summary and continue message, so the window is what it was before it; with
        ``restore_pruned``, the outputs pruned among what it replaced come back too."""
        if self.face.is_compacting(session_id):
            raise Busy(f"session {session_id!r} is compacting")
        async with self.face.lock(session_id):
            if self.face.is_compacting(session_id):
                raise Busy(f"session {session_id!r} is compacting")
            # The compaction lease: no other daemon on this database compacts it meanwhile.
            lease = lease_mod.name(session_id)
            if not await self.store.acquire_lease(lease, self.face.owner, lease_mod.LEASE_MS):
                raise Busy(f"session {session_id!r} is being compacted by another daemon")
            try:
                # A summary prepared in the background covers the window being changed: the
                # door drops it (``UNCOMPACT``).
                async def op() -> tuple[list[str], list[Event]]:
                    return await self._uncompact(session_id, message_id, restore_pruned)

                return await self.face.writes.write(UNCOMPACT, session_id, op)
            finally:
                await self.store.release_lease(lease, self.face.owner)

    async def _uncompact(
        self, session_id: str, message_id: str | None, restore_pruned: bool
    ) -> tuple[list[str], list[Event]]:
        records = await self.compactions(session_id)
        if not records:
            raise InvalidParams(f"invalid params: session {session_id!r} has no compaction to undo")
        at = len(records) - 1
        if message_id is not None:
            found = next(
                (
                    i
                    for i, r in enumerate(records)
                    if message_id in (r.message_id, r.marker_id, r.continue_id)
                ),
                None,
            )
            if found is None:
                raise InvalidParams(
                    f"invalid params: `$.messageID` {message_id!r} is not a compaction of "
                    f"session {session_id!r} (see session/compactions)"
                )
            at = found
        undone = records[at:]
        ids = [
            mid
            for r in reversed(undone)
            for mid in (r.continue_id, r.message_id, r.marker_id)
            if mid is not None
        ]
        removed = await self.store.remove_messages(session_id, ids)
        events: list[Event] = [
            MessageRemovedEvent(session_id=session_id, message_id=mid) for mid in removed
        ]
        if restore_pruned:
            pruned = [pid for r in undone for pid in r.pruned_part_ids]
            for raw in await self.store.unmark_compacted(pruned):
                events.append(PartUpdatedEvent(part=msgspec.Raw(raw)))
        self.face.auto.forget(session_id)
        return removed, events

    async def pin(
        self, session_id: str, message_id: str, part_id: str | None, pinned: bool
    ) -> None:
        """``part/pin``. The kept block of a summary prepared in the background holds the pins
        as they were: the door drops it (``PIN``)."""

        async def op() -> tuple[None, list[Event]]:
            await self.store.require_session(session_id)
            await self.store.set_pin(session_id, message_id, part_id, pinned)
            return None, []

        await self.face.writes.write(PIN, session_id, op)
