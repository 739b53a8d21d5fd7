"""Durability: every acknowledged write survives ``kill -9`` of the daemon."""

from __future__ import annotations

import asyncio
import signal

from wire import put_message, put_part, stored

from .builders import assistant_message, text_part, user_message
from .conftest import Spawner

N = 40


async def test_acknowledged_writes_survive_sigkill(spawner: Spawner) -> None:
    client = await spawner()
    session = await client.create_session(title="durable")
    expected: dict[str, list[str]] = {}
    for i in range(N):
        user = await put_message(client, user_message(session.id, seq=i))
        part = await put_part(client, text_part(session.id, user["id"], f"turn {i}"))
        expected[user["id"]] = [part["id"]]
    # A burst of concurrent writes too: group-committed, each acknowledged only when durable.
    replies = await asyncio.gather(
        *(
            put_message(client, assistant_message(session.id, mid, burst=True))
            for mid in list(expected)[: N // 2]
        )
    )
    for reply in replies:
        expected[reply["id"]] = []
    parts = await asyncio.gather(
        *(put_part(client, text_part(session.id, r["id"], "burst")) for r in replies)
    )
    for part in parts:
        expected[part["messageID"]].append(part["id"])

    assert await client.kill() == -signal.SIGKILL

    again = await spawner()  # same db file
    assert (await again.get_session(session.id)).title == "durable"
    page = await stored(again, session.id)
    kept = {m.info["id"]: [p["id"] for p in m.parts] for m in page.messages}
    assert kept == expected
    assert len(kept) == N + N // 2
