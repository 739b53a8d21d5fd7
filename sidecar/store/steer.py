"""The daemon's own steering data (PROTOCOL.md "Steering compaction"): pins and diagnostics.

Kept beside the client's JSON, never in it: a pin is a row of ``pins`` (removed with its
part by the foreign key), a compaction's diagnostics a row of ``compactions`` (removed with
its summary message). Both backends run the same SQL (``schema.py`` migration 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from sidecar.errors import InvalidParams, UnknownMessage
from sidecar.model.messages import WithParts
from sidecar.model.parts import Part
from sidecar.store.parts import PART_ROWS
from sidecar.store.rows import (
    Tables,
    assemble,
    cached_part,
    chunks,
    decode_part,
    kind_of,
    rows_in,
)
from sidecar.store.statements import DELETE_MESSAGE, PARTS_BY_IDS, SET_PART_DATA

_dict = msgspec.json.Decoder(dict[str, Any])
_enc = msgspec.json.Encoder()

_PIN = (
    "INSERT INTO pins (part_id, message_id, session_id, created) "
    "VALUES (?, ?, ?, ?) ON CONFLICT (part_id) DO NOTHING"
)
_UNPIN = "DELETE FROM pins WHERE part_id = ?"
_SESSION_MESSAGE = "SELECT created FROM messages WHERE id = ? AND session_id = ?"
_MESSAGE_PART = "SELECT id FROM parts WHERE id = ? AND message_id = ?"
_PART_IDS = "SELECT id FROM parts WHERE message_id = ? ORDER BY id"
_PINNED_OF = "SELECT part_id FROM pins WHERE part_id IN ({ids})"
_PINS = (
    "SELECT p.message_id, p.part_id FROM pins p JOIN messages m ON m.id = p.message_id "
    "WHERE p.session_id = ? ORDER BY m.created, m.id, p.part_id"
)
_PINNED_IDS = "SELECT part_id FROM pins WHERE session_id = ?"
_PINNED_PARTS = (
    "SELECT p.data FROM pins x JOIN part_json p ON p.id = x.part_id "
    "JOIN messages m ON m.id = x.message_id "
    "WHERE x.session_id = ? ORDER BY m.created, m.id, p.id"
)
_FIRST_USER = (
    "SELECT id, data FROM messages WHERE session_id = ? AND role = 'user' "
    "ORDER BY created, id LIMIT 1"
)
_RECORD = (
    "INSERT INTO compactions (message_id, session_id, created, data) "
    "VALUES (?, ?, ?, ?) ON CONFLICT (message_id) DO UPDATE SET data = excluded.data"
)
_COMPACTIONS = "SELECT data FROM compactions WHERE session_id = ? ORDER BY created, message_id"
_SESSION_MESSAGES = "SELECT id FROM messages WHERE session_id = ? AND id IN ({ids})"


async def set_pin(
    store: Tables, session_id: str, message_id: str, part_id: str | None, pinned: bool
) -> None:
    """Pin (or unpin) one part of ``message_id``, or every part it has now when ``part_id``
    is None. Refused, naming the field, when the message or part is not the session's."""
    db = store.backend
    rows = await db.query(_SESSION_MESSAGE, (message_id, session_id))
    if not rows:
        raise UnknownMessage(message_id)
    if part_id is not None:
        found = await db.query(_MESSAGE_PART, (part_id, message_id))
        if not found:
            raise InvalidParams(
                f"invalid params: `$.partID` {part_id!r} is not a part of message {message_id!r}"
            )
        ids = [part_id]
    else:
        ids = [r[0] for r in await db.query(_PART_IDS, (message_id,))]
    if not ids:
        return
    if pinned:
        now = await db.now_ms()
        await db.submit([(_PIN, [(pid, message_id, session_id, now) for pid in ids])])
    else:
        await db.submit([(_UNPIN, [(pid,) for pid in ids])])


async def copy_pins(store: Tables, session_id: str, parts: Sequence[tuple[str, str, str]]) -> None:
    """Pin ``(old part id, new part id, new message id)`` in ``session_id`` where the old part
    is pinned (a fork inherits its source's pins)."""
    if not parts:
        return
    rows = await rows_in(store.backend.query, _PINNED_OF, [old for old, _, _ in parts])
    pinned = {r[0] for r in rows}
    rows_out = [(new, mid, session_id, 0) for old, new, mid in parts if old in pinned]
    if rows_out:
        await store.backend.submit([(_PIN, rows_out)])


async def pins(store: Tables, session_id: str) -> list[tuple[str, str]]:
    """``(message id, part id)`` of every pin, oldest message first."""
    rows = await store.backend.query(_PINS, (session_id,))
    return [(r[0], r[1]) for r in rows]


async def pinned_ids(store: Tables, session_id: str) -> frozenset[str]:
    """Asked by every prune (each turn's end): an indexed read of a few ids, on the loop."""
    rows = await store.backend.query_point(_PINNED_IDS, (session_id,))
    return frozenset(r[0] for r in rows)


async def pinned_parts(store: Tables, session_id: str) -> list[Part]:
    """The pinned parts themselves, oldest message first."""
    rows = await store.backend.query(_PINNED_PARTS, (session_id,))
    return [decode_part(r[0]) for r in rows]


async def first_user_message(store: Tables, session_id: str) -> WithParts | None:
    """The session's first user message (by ``(created, id)``) with its parts."""
    db = store.backend
    rows = await db.query(_FIRST_USER, (session_id,))
    if not rows:
        return None
    mid = rows[0][0]
    parts = [(mid, pid, data) for pid, data in await db.query(PART_ROWS, (mid,))]
    found = assemble([(mid, rows[0][1])], parts)
    return found[0] if found else None


async def record_compaction(
    store: Tables, session_id: str, message_id: str, created: int, data: bytes
) -> None:
    """One compaction's diagnostics, keyed by its summary message."""
    await store.backend.submit([(_RECORD, [(message_id, session_id, created, data.decode())])])


async def compactions(store: Tables, session_id: str) -> list[str]:
    """The stored diagnostics of the session's compactions, oldest first."""
    rows = await store.backend.query(_COMPACTIONS, (session_id,))
    return [r[0] for r in rows]


async def unmark_compacted(store: Tables, part_ids: Sequence[str]) -> list[str]:
    """Clear ``state.time.compacted`` of these parts (a prune undone); returns the updated
    parts' JSON. Patched in Python, so both backends keep the client's other keys as they are."""
    out: list[tuple[str, str]] = []  # (part id, updated JSON)
    for chunk in chunks(list(part_ids), 500):
        rows = await rows_in(store.backend.query, PARTS_BY_IDS, chunk)
        updates: list[tuple[str, str]] = []
        for pid, data in rows:
            doc = _dict.decode(data)
            state = doc.get("state")
            time = state.get("time") if isinstance(state, dict) else None
            if isinstance(time, dict) and "compacted" in time:
                del time["compacted"]
                updates.append((_enc.encode(doc).decode(), pid))
        if updates:
            await store.backend.submit([(SET_PART_DATA, updates)])
            out.extend((pid, data) for data, pid in updates)
    for pid, raw in out:
        part = cached_part(pid, raw)
        store.cache.part_written(part.session_id, part.message_id, part.id, raw, kind_of(part))
    return [raw for _, raw in out]


async def remove_messages(store: Tables, session_id: str, ids: Sequence[str]) -> list[str]:
    """Delete these messages of the session (their parts, pins and diagnostics go with them)
    in one transaction; returns the ids that existed, in the order given."""
    rows = await rows_in(store.backend.query, _SESSION_MESSAGES, ids, session_id)
    found = {r[0] for r in rows}
    present = [i for i in ids if i in found]
    if present:
        await store.backend.submit([(DELETE_MESSAGE, [(mid, session_id) for mid in present])])
        store.cache.invalidate(session_id)
    return present
