"""Load the context window from the store without reading the history behind it.

The store finds the latest effective compaction marker with one indexed query; only messages
from there (or from the collapse tail it points back at) are read, then ``filter_compacted``
orders them. Reverted messages (PROTOCOL.md ``session/revert``) are cut here, so no caller can
let them reach a model.
"""

from __future__ import annotations

from sidecar.engine.filter import filter_compacted
from sidecar.engine.ports import StorePort
from sidecar.model.messages import WithParts
from sidecar.model.session import Session
from sidecar.store import Boundary, Key


async def revert_key(store: StorePort, session: Session) -> Key | None:
    if session.revert is None:
        return None
    return await store.message_key(session.revert.message_id)


def cut_reverted(msgs: list[WithParts], session: Session, rkey: Key | None) -> list[WithParts]:
    """Drop messages at/after the revert point (with ``partID``, keep the earlier parts)."""
    if session.revert is None or rkey is None:
        return msgs
    part_id = session.revert.part_id
    out: list[WithParts] = []
    for m in msgs:
        key = Key(m.info.time.created, m.info.id)
        if key < rkey:
            out.append(m)
        elif key == rkey and part_id is not None:
            kept = [p for p in m.parts if p.id < part_id]
            if kept:
                out.append(WithParts(info=m.info, parts=kept))
    return out


async def load_history(store: StorePort, session: Session) -> list[WithParts]:
    """Every visible message (revert applied), unfiltered: what summarization may read."""
    rkey = await revert_key(store, session)
    return cut_reverted(await store.window(session.id), session, rkey)


async def window_start(
    store: StorePort, session: Session, rkey: Key | None = None
) -> tuple[Boundary | None, Key | None]:
    """The newest effective compaction boundary before ``rkey`` and the key the window is
    read from: its marker, or the collapse tail it points back at when that is older."""
    boundary = await store.boundary(session.id, before=rkey)
    if boundary is None:
        return None, None
    start = boundary.marker
    if boundary.tail_start_id:
        tail = await store.message_key(boundary.tail_start_id)
        if tail is not None and tail < start:
            start = tail
    return boundary, start


async def load_window(
    store: StorePort, session: Session, raws: dict[str, str] | None = None
) -> list[WithParts]:
    """The filtered, chronological context window (``raws``: see ``Store.window``)."""
    rkey = await revert_key(store, session)
    _, start = await window_start(store, session, rkey)
    msgs = await store.window(session.id, start, raws=raws)
    return filter_compacted(cut_reverted(msgs, session, rkey))
