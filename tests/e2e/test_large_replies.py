"""Issue 19, item 2: a reply larger than ``server.maxOutgoingBytes`` but within
``server.maxReplyBytes`` reaches a client that reads it; one over ``maxReplyBytes`` is
-32047 and nothing of it is sent. The limits are lowered by the daemon's config (64 KiB
outgoing, 1 MiB per reply) so the same rule is shown with small replies;
``bench/large_reply.py`` runs the 80 MB case with the default limits.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from sidecar_client import RpcError

from .builders import text_part
from .conftest import Spawner
from .test_trust import message_with_id, request_frame, unix_daemon_with

LIMITS = {"server": {"maxOutgoingBytes": 64 * 1024, "maxReplyBytes": 1 << 20}}
BIG = 400_000  # a part's text: its reply is six times maxOutgoingBytes, under maxReplyBytes
TOO_BIG = 3  # parts of BIG in one message: its page is over maxReplyBytes


async def _read_frame(reader: asyncio.StreamReader) -> dict[str, Any]:
    """One frame, its body read 4 KiB at a time (a client that reads slowly)."""
    header = await reader.readuntil(b"\r\n\r\n")
    length = int(header.split(b":", 1)[1].strip())
    body = bytearray()
    while len(body) < length:
        body += await reader.readexactly(min(4096, length - len(body)))
    return dict(json.loads(body))


async def test_reply_over_max_outgoing_reaches_a_reading_socket_client(
    daemon_env: dict[str, str | None],
) -> None:
    async with unix_daemon_with(daemon_env, LIMITS) as daemon:
        writer_client = await daemon.connect()
        big = (await writer_client.create_session()).id
        mid = await message_with_id(writer_client, big)
        # Its own part/updated (400 KB) reaches the writer too: a reading client, not cut.
        await writer_client.update_part(text_part(big, mid, "b" * BIG))
        huge = (await writer_client.create_session()).id
        mid2 = await message_with_id(writer_client, huge)
        for _ in range(TOO_BIG):
            await writer_client.update_part(text_part(huge, mid2, "h" * BIG))
        assert (await writer_client.request("session/get", {"sessionID": big}))["id"] == big

        path = daemon.address.removeprefix("unix:")
        reader, writer = await asyncio.open_unix_connection(path, limit=1 << 16)
        writer.write(request_frame(1, "initialize", {"capabilities": {}}))
        assert "result" in await _read_frame(reader)
        writer.write(request_frame(2, "session/messages", {"sessionID": big}))
        writer.write(request_frame(3, "session/messages", {"sessionID": huge}))
        writer.write(request_frame(4, "session/get", {"sessionID": big}))
        got = [await _read_frame(reader) for _ in range(3)]
        by_id = {f["id"]: f for f in got}
        (message,) = by_id[2]["result"]["messages"]
        assert message["parts"][0]["text"] == "b" * BIG
        assert by_id[3]["error"]["code"] == -32047
        assert "maxReplyBytes" in by_id[3]["error"]["message"]
        assert by_id[4]["result"]["id"] == big
        writer.close()


async def test_reply_over_max_outgoing_reaches_a_stdio_client(
    spawner: Spawner, tmp_path: Path
) -> None:
    config = tmp_path / "limits.json"
    config.write_text(json.dumps(LIMITS))
    client = await spawner(extra_args=["--config", str(config)])
    sid = (await client.create_session()).id
    mid = await message_with_id(client, sid)
    await client.update_part(text_part(sid, mid, "s" * BIG))
    page = await client.messages(sid)
    assert page.messages[0].parts[0].text == "s" * BIG  # type: ignore[union-attr]
    huge = (await client.create_session()).id
    mid2 = await message_with_id(client, huge)
    for _ in range(TOO_BIG):
        await client.update_part(text_part(huge, mid2, "h" * BIG))
    try:
        await client.messages(huge)
    except RpcError as exc:
        assert exc.code == -32047
    else:
        raise AssertionError("a reply over maxReplyBytes was sent")
    assert (await client.request("session/get", {"sessionID": sid}))["id"] == sid
