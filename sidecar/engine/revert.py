"""``session/revert`` / ``session/unrevert`` and the cleanup compaction does first.

Reverting hides messages (from ``messageID`` on, or parts from ``partID`` on) without
deleting them, so it can be undone. Compacting while a revert is armed would summarize
messages the user threw away (OpenCode #6186), so compaction first deletes them for good and
clears the revert, as OpenCode's ``SessionRevert.cleanup`` does.
"""

from __future__ import annotations

import msgspec

from sidecar.engine.host import Host
from sidecar.engine.ports import StorePort
from sidecar.errors import ErrorCode, SidecarError, UnknownMessage
from sidecar.model.ids import now_ms
from sidecar.model.rpc import MessageRemovedEvent
from sidecar.model.session import RevertInfo, Session
from sidecar.store import Key


async def revert(
    store: StorePort, session: Session, message_id: str, part_id: str | None
) -> Session:
    found = await store.get_message(message_id)
    if found is None or found[0].session_id != session.id:
        raise UnknownMessage(message_id)
    if part_id is not None:
        part = await store.get_part(part_id)
        if part is None or part[0].message_id != message_id:
            raise SidecarError(
                f"part {part_id!r} is not in message {message_id!r}", ErrorCode.UNKNOWN_PART
            )
    return await _put_revert(store, session, RevertInfo(message_id=message_id, part_id=part_id))


async def unrevert(store: StorePort, session: Session) -> Session:
    return await _put_revert(store, session, None)


async def _put_revert(store: StorePort, session: Session, info: RevertInfo | None) -> Session:
    """A new ``Session`` with ``revert`` set (the one read is shared: never mutated)."""
    time = msgspec.structs.replace(session.time, updated=now_ms())
    changed = msgspec.structs.replace(session, revert=info, time=time)
    await store.put_session(changed)
    return changed


async def cleanup(store: StorePort, host: Host, session: Session) -> Session:
    """Delete what the armed revert hides, then clear it."""
    info = session.revert
    if info is None:
        return session
    key = await store.message_key(info.message_id)
    if key is not None:
        doomed = await store.window(session.id, start=key)
        cut = (info.message_id, info.part_id) if info.part_id else None
        await store.delete_from(session.id, Key(key.created, key.id), cut)
        for m in doomed:
            if cut is not None and m.info.id == info.message_id:
                continue
            host.publish(
                session.id,
                MessageRemovedEvent(session_id=session.id, message_id=m.info.id),
            )
    return await unrevert(store, session)
