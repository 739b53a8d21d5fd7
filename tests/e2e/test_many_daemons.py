"""Many daemons, one PostgreSQL database (issue 14): three real daemons on unix sockets, a
writer and a watcher connected to each, all on the same sessions.

What must hold: nothing acknowledged is lost; each connection's writes are stored in the order
it sent them; every watcher, whichever daemon it is connected to, hears every write; and an
overflow that all three daemons see at once is compacted exactly once.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from pgcluster import Cluster, new_pg_database
from sidecar_client import Call, Client
from wire import put_message, put_part, stored

from sidecar.model.buffers import LARGE_BYTES
from sidecar.model.ids import new_id

from .builders import assistant_message, text_part, user_message
from .conftest import SocketDaemon

MESSAGES = 12  # per writer and session
SESSIONS = 2
MODEL = {"providerID": "anthropic", "modelID": "claude-sonnet-4-5"}  # 200k, usable 168k
OVER = {"input": 180_000, "output": 500, "reasoning": 0, "cache": {"read": 0, "write": 0}}


@pytest_asyncio.fixture(loop_scope="session")
async def daemons(
    pg_cluster: Cluster, daemon_env: dict[str, str | None]
) -> AsyncIterator[list[SocketDaemon]]:
    url = await new_pg_database(pg_cluster)
    where = Path(tempfile.mkdtemp(prefix="sc3-"))
    started: list[SocketDaemon] = []
    try:
        for i in range(3):
            started.append(
                await SocketDaemon.start(f"unix:{where / f'd{i}.sock'}", url, daemon_env)
            )
        yield started
    finally:
        for daemon in started:
            await daemon.stop()
        shutil.rmtree(where, ignore_errors=True)


async def test_three_daemons_share_sessions_without_losing_or_reordering_a_write(
    daemons: list[SocketDaemon],
) -> None:
    writers = [await d.connect() for d in daemons]
    watchers = [await d.connect() for d in daemons]
    sessions = [(await writers[i % 3].create_session()).id for i in range(SESSIONS)]
    for watcher in watchers:
        for sid in sessions:
            await watcher.subscribe(sid)

    # Every writer pipelines its messages (each with two parts) into every session at once.
    sent: dict[tuple[int, str], list[str]] = {}
    calls: list[Call[Any]] = []
    parts: set[str] = set()
    for w, client in enumerate(writers):
        for sid in sessions:
            ids = sent[w, sid] = []
            for n in range(MESSAGES):
                mid = new_id("msg")
                ids.append(mid)
                calls.append(client.call("message/update", {"message": user_message(sid, id=mid)}))
                for k in range(2):
                    pid = new_id("prt")
                    parts.add(pid)
                    part = text_part(sid, mid, f"w{w} {sid} m{n} p{k}", id=pid)
                    calls.append(client.call("part/update", {"part": part}))
    replies = await asyncio.gather(*calls)
    assert len(replies) == 3 * SESSIONS * MESSAGES * 3

    for sid in sessions:
        for reader in writers:  # every daemon serves the same history
            page = await stored(reader, sid)
            kept = [m.info["id"] for m in page.messages]
            # Nothing lost...
            assert sorted(kept) == sorted(i for w in range(3) for i in sent[w, sid])
            assert sum(len(m.parts) for m in page.messages) == 2 * 3 * MESSAGES
            # ... and each connection's messages in the order it sent them.
            for w in range(3):
                mine = set(sent[w, sid])
                assert [i for i in kept if i in mine] == sent[w, sid], f"writer {w} reordered"
            assert await context_ids(reader, sid) == kept

    # Every watcher hears every message and part, whichever daemon it was written through.
    messages = {i for ids in sent.values() for i in ids}
    for n, watcher in enumerate(watchers):
        heard_messages = await heard(watcher, "message/updated", "message", messages)
        heard_parts = await heard(watcher, "part/updated", "part", parts)
        assert heard_messages == messages, f"watcher {n} missed messages"
        assert heard_parts == parts, f"watcher {n} missed parts"


async def test_an_overflow_seen_by_three_daemons_is_compacted_once(
    daemons: list[SocketDaemon],
) -> None:
    writers = [await d.connect() for d in daemons]
    watchers = [await d.connect() for d in daemons]
    sid = (await writers[0].create_session()).id
    for watcher in watchers:
        await watcher.subscribe(sid)
    user = await put_message(writers[0], user_message(sid, model=MODEL))
    # About 15k tokens of history: enough for a summary to bring the context under the limit.
    await put_part(writers[0], text_part(sid, user["id"], "Refactor src/app.py " * 3000))
    reply = await put_message(writers[1], assistant_message(sid, user["id"], **MODEL))
    await put_part(writers[1], text_part(sid, reply["id"], "Done. " * 300))
    for client in writers:  # a cache on every daemon
        await client.context(sid)

    # The turn finishes over the model's limit, and all three daemons store it at once
    # (three frontends echoing the same update): each one sees the overflow.
    finished = reply | {"finish": "stop", "tokens": OVER}
    await asyncio.gather(*(put_message(c, finished) for c in writers))
    for client in writers:  # answered once that daemon's automatic work is done
        await client.request("session/idle", {"sessionID": sid})

    page = await stored(writers[2], sid)
    summaries = [m.info for m in page.messages if m.info.get("summary")]
    assert len(summaries) == 1, f"compacted {len(summaries)} times: {summaries}"
    assert "error" not in summaries[0], summaries[0]["error"]
    for n, watcher in enumerate(watchers):
        event = await watcher.wait_for("session/compacted", timeout=30)
        assert event["sessionID"] == sid and event["messageID"] == summaries[0]["id"], n
    for client in writers:
        ctx = await client.context(sid, "openai")
        assert ctx.messages[0] == {"role": "user", "content": "What did we do so far?"}
    # No second compaction arrived at any watcher meanwhile.
    assert [len(w.notifications("session/compacted")) for w in watchers] == [1, 1, 1]


async def context_ids(client: Client, sid: str) -> list[str]:
    ctx = await client.context(sid, "parts")
    return [m["info"]["id"] for m in ctx.messages]


async def heard(client: Client, method: str, key: str, expected: set[str]) -> set[str]:
    """The ids of ``key`` in ``method`` notifications, waiting (bounded) until all of
    ``expected`` arrived."""

    def wanted(params: Any) -> bool:
        return bool(params[key]["id"] in expected)

    seen: set[str] = set()
    while not expected <= seen:
        try:
            params = await client.wait_for(method, wanted, timeout=20)
        except TimeoutError:
            break
        seen.add(params[key]["id"])
    return seen & expected


pytestmark = pytest.mark.usefixtures("pg_cluster")


NEAR = {"input": 120_000, "output": 500, "reasoning": 0, "cache": {"read": 0, "write": 0}}


async def test_prepared_summaries_of_two_daemons_commit_once(
    daemons: list[SocketDaemon],
) -> None:
    """Issue 25: with ``compaction.prepare`` every daemon that sees the session's turns
    prepares its own summary (in memory); at the overflow the compaction lease lets exactly one
    of them commit, and the other's is discarded (the history it covered is gone)."""
    writers = [await d.connect() for d in daemons[:2]]
    watcher = await daemons[2].connect()
    for client in writers:
        await client.update_config({"compaction": {"prepare": 0.7}})
    sid = (await writers[0].create_session()).id
    await watcher.subscribe(sid)
    user = await put_message(writers[0], user_message(sid, model=MODEL))
    await put_part(writers[0], text_part(sid, user["id"], "Refactor src/app.py " * 3000))
    reply = await put_message(writers[0], assistant_message(sid, user["id"], **MODEL))
    await put_part(writers[0], text_part(sid, reply["id"], "Done. " * 300))
    near = reply | {"finish": "stop", "tokens": NEAR}
    # Both daemons store the finished turn (two frontends echoing it): both prepare.
    await asyncio.gather(*(put_message(c, near) for c in writers))
    for client in writers:
        await client.request("session/idle", {"sessionID": sid})
    user2 = await put_message(writers[1], user_message(sid, model=MODEL))
    await put_part(writers[1], text_part(sid, user2["id"], "Now the tests"))
    reply2 = await put_message(
        writers[1],
        {
            "role": "assistant",
            "sessionID": sid,
            "parentID": user2["id"],
            "providerID": MODEL["providerID"],
            "modelID": MODEL["modelID"],
        },
    )
    finished = reply2 | {"finish": "stop", "tokens": OVER}
    await asyncio.gather(*(put_message(c, finished) for c in writers))
    for client in writers:
        await client.request("session/idle", {"sessionID": sid})

    page = await stored(watcher, sid)
    summaries = [m.info for m in page.messages if m.info.get("summary")]
    assert len(summaries) == 1, f"committed {len(summaries)} times: {summaries}"
    event = await watcher.wait_for("session/compacted", timeout=30)
    assert event["messageID"] == summaries[0]["id"] and event["prepared"] is True
    for client in writers:
        ctx = await client.context(sid, "openai")
        assert ctx.messages[0] == {"role": "user", "content": "What did we do so far?"}
        # The turn after the prepared cut is kept as it is, after the summary.
        assert {"role": "user", "content": "Now the tests"} in ctx.messages
    assert len(watcher.notifications("session/compacted")) == 1


async def test_a_large_part_reaches_the_other_daemons_watchers(
    daemons: list[SocketDaemon],
) -> None:
    """A part of ``LARGE_BYTES`` or more is relayed by its id, not its JSON: the watcher on
    another daemon hears it as stored, whole."""
    writer = await daemons[0].connect()
    watcher = await daemons[1].connect()
    sid = (await writer.create_session()).id
    await watcher.subscribe(sid)
    user = await put_message(writer, user_message(sid))
    text = "é" + "large relayed part " * (LARGE_BYTES // 19 + 10)
    for given_id in (True, False):  # the client's id, or one the daemon splices in front
        part = text_part(sid, user["id"], text, **({"id": new_id("prt")} if given_id else {}))
        reply = await put_part(writer, part)
        heard = await watcher.wait_for(
            "part/updated", lambda p, pid=reply["id"]: p["part"]["id"] == pid, timeout=60
        )
        assert heard["part"] == reply
        assert heard["part"]["text"] == text
