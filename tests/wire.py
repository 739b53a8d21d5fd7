"""The daemon's stored JSON as it is on the wire, for tests of the daemon itself.

The client's typed helpers (``update_message``, ``messages``, ...) decode into the model's
Structs, which skip fields this version does not know. Tests of what the daemon stores and
echoes (unknown fields kept, byte-exact echoes, notifications equal to replies) need the wire
JSON instead, so they go through ``Client.request`` here.
"""

from __future__ import annotations

from typing import Any

import msgspec
from sidecar_client import Client

from sidecar.model.base import wire_name


class StoredMessage(msgspec.Struct, kw_only=True):
    """``{info, parts}``: one message and its parts (in id order) as plain JSON objects."""

    info: dict[str, Any]
    parts: list[dict[str, Any]] = msgspec.field(default_factory=list)


class StoredPage(msgspec.Struct, kw_only=True, rename=wire_name):
    """A ``session/messages`` page as stored (wire names, unknown fields included)."""

    messages: list[StoredMessage]
    next_cursor: str | None = None


async def put_message(client: Client, message: Any) -> dict[str, Any]:
    """``message/update``; the stored message as the daemon echoes it."""
    result: dict[str, Any] = await client.request("message/update", {"message": message})
    return result


async def put_part(client: Client, part: Any) -> dict[str, Any]:
    """``part/update``; the stored part as the daemon echoes it."""
    result: dict[str, Any] = await client.request("part/update", {"part": part})
    return result


def read_call(
    session_id: str, message_id: str, path: str, output: str, **state: Any
) -> dict[str, Any]:
    """A completed ``read`` tool part of ``path`` (one call per message) as a frontend sends
    it; ``state``: more fields of its state (``title``, ``metadata``)."""
    return {
        "type": "tool",
        "sessionID": session_id,
        "messageID": message_id,
        "callID": f"call-{message_id}",
        "tool": "read",
        "state": {
            "status": "completed",
            "input": {"filePath": path},
            "output": output,
            "time": {"start": 1, "end": 2},
            **state,
        },
    }


async def stored(
    client: Client, session_id: str, limit: int | None = None, cursor: str | None = None
) -> StoredPage:
    """``session/messages`` with every message and part as stored."""
    params: dict[str, Any] = {"sessionID": session_id}
    if limit is not None:
        params["limit"] = limit
    if cursor is not None:
        params["cursor"] = cursor
    return await client.request("session/messages", params, StoredPage)
