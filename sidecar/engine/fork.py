"""``session/fork``: copy a session's messages (before ``messageID``) under new ids.

Every reference is remapped — ``parentID`` of summaries and ``tailStartID`` of collapse
markers — so the fork's compaction boundaries still point at its own messages (OpenCode
#6445 lost them and sent whole histories; #24898 lost the retained tail). Times are kept, so
the fork orders exactly like its parent. The stored JSON is copied, unknown fields included.
"""

from __future__ import annotations

from typing import Any

import msgspec

from sidecar.engine.ports import StorePort
from sidecar.errors import UnknownMessage
from sidecar.model.ids import new_id, now_ms
from sidecar.model.messages import Message
from sidecar.model.parts import Part
from sidecar.model.session import Session, SessionTime
from sidecar.store import Key, decode_stored

_dict = msgspec.json.Decoder(dict[str, Any])
_enc = msgspec.json.Encoder()


async def fork(store: StorePort, source: Session, message_id: str | None) -> Session:
    stop: Key | None = None
    if message_id is not None:
        stop = await store.message_key(message_id)
        found = await store.get_message(message_id)
        if stop is None or found is None or found[0].session_id != source.id:
            raise UnknownMessage(message_id)
    if source.revert is not None:
        rkey = await store.message_key(source.revert.message_id)
        if rkey is not None and (stop is None or rkey < stop):
            stop = rkey  # reverted messages are not part of what a fork inherits
    page, _ = await store.page_raw(source.id, None, None)
    now = now_ms()
    target = Session(
        id=new_id("ses"),
        title=f"{source.title} (fork)" if source.title else "fork",
        parent_id=source.id,
        directory=source.directory,
        time=SessionTime(created=now, updated=now),
    )
    infos: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    ids: dict[str, str] = {}
    for stored in page:
        info = decode_stored(_dict, stored.info)
        key = Key(int(info.get("time", {}).get("created", 0)), info["id"])
        if stop is not None and key >= stop:
            break
        ids[info["id"]] = new_id("msg")
        infos.append(info)
        parts.extend(decode_stored(_dict, p) for p in stored.parts)
    messages: list[tuple[Message, bytes]] = []
    for info in infos:
        info["id"] = ids[info["id"]]
        info["sessionID"] = target.id
        if info.get("parentID") in ids:
            info["parentID"] = ids[info["parentID"]]
        raw = _enc.encode(info)
        messages.append((msgspec.json.decode(raw, type=Message), raw))
    new_parts: list[tuple[Part, bytes]] = []
    copied: list[tuple[str, str, str]] = []  # (old part id, new part id, new message id)
    for part in parts:
        old_id = part["id"]
        part["id"] = new_id("prt")
        part["sessionID"] = target.id
        part["messageID"] = ids[part["messageID"]]
        copied.append((old_id, part["id"], part["messageID"]))
        for tail in ("tailStartID", "tail_start_id"):  # the daemon's, OpenCode >= 1.14's
            if part.get(tail) in ids:
                part[tail] = ids[part[tail]]
        raw = _enc.encode(part)
        new_parts.append((msgspec.json.decode(raw, type=Part), raw))
    await store.put_session(target)
    await store.put_many(messages, new_parts)
    await store.copy_pins(target.id, copied)  # pins are the daemon's: copied too
    return target
