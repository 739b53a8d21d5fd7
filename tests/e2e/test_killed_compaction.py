"""A compaction whose daemon was killed does not block its session (issue 19, item 6).

A compaction holds a lease row in the database. A daemon killed (``kill -9``) while it
compacts leaves that row behind; the restarted daemon must take it over at once, since its
holder provably no longer exists (same host, its process gone), instead of answering -32044
until the row expires. A *live* daemon's lease still blocks: two daemons never compact one
session at once. The summarizer that hangs is a real HTTP server on 127.0.0.1 that reads the
request and never answers, so the kill lands while the compaction is running.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from sidecar_client import Client, RpcError
from wire import put_message, put_part

from tests.summarizers.httpserver import Reply, Request, ScriptedServer

from .builders import assistant_message, text_part, user_message
from .conftest import Spawner

BUSY = -32044


class HangingProvider(ScriptedServer):
    """Reads each request, says so (``received``), and never answers it."""

    def __init__(self) -> None:
        super().__init__()
        self.received = asyncio.Event()

    async def _read_request(self, reader: asyncio.StreamReader, prefix: bytes) -> Request | None:
        request = await super()._read_request(reader, prefix)
        if request is not None:
            self.received.set()
            self.script(Reply(stall=3600.0))
        return request


@pytest_asyncio.fixture(loop_scope="session")
async def hanging() -> AsyncIterator[HangingProvider]:
    server = HangingProvider()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def hanging_summarizer(server: HangingProvider) -> dict[str, Any]:
    return {
        "summarizer": {
            "provider": "openai",
            "model": "fake-model",
            "baseURL": f"{server.url}/v1",
            "timeout": 3600,
        }
    }


EXTRACTIVE = {"summarizer": {"provider": "extractive"}}


async def a_session(client: Client) -> str:
    session = await client.create_session(title="killed mid-compaction")
    for i in range(6):  # enough history that a summary makes the window smaller
        user = await put_message(client, user_message(session.id))
        await put_part(client, text_part(session.id, user["id"], f"question {i}"))
        reply = await put_message(client, assistant_message(session.id, user["id"]))
        answer = " ".join(f"answer {i} line {j} of a long reply." for j in range(200))
        await put_part(client, text_part(session.id, reply["id"], answer))
    return session.id


async def compaction_started(
    client: Client, server: HangingProvider, sid: str
) -> asyncio.Task[Any]:
    """A ``session/compact`` that is running: its summary request reached the provider."""
    task = asyncio.ensure_future(client.request("session/compact", {"sessionID": sid}))
    received = asyncio.ensure_future(server.received.wait())
    done, _ = await asyncio.wait({task, received}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        received.cancel()
        raise AssertionError(f"the compaction ended before the kill: {task.result()!r}")
    return task


async def test_a_killed_compaction_is_taken_over_at_once_after_restart(
    spawner: Spawner, hanging: HangingProvider
) -> None:
    first = await spawner(initialization_options=hanging_summarizer(hanging))
    sid = await a_session(first)
    running = await compaction_started(first, hanging, sid)

    assert await first.kill() == -signal.SIGKILL
    running.cancel()

    t0 = time.perf_counter()
    restarted = await spawner(initialization_options=EXTRACTIVE)
    ready = time.perf_counter() - t0
    result = await restarted.compact(sid)
    took = time.perf_counter() - t0
    print(
        f"\nsession/compact after kill -9 mid-compaction: answered {took:.3f} s after the "
        f"restart began ({took - ready:.3f} s after the daemon was ready)"
    )
    assert result.status == "continue", result
    assert result.summary_message_id


async def test_a_live_daemons_compaction_still_blocks_another(
    spawner: Spawner, hanging: HangingProvider
) -> None:
    holder = await spawner(initialization_options=hanging_summarizer(hanging))
    sid = await a_session(holder)
    running = await compaction_started(holder, hanging, sid)

    other = await spawner(initialization_options=EXTRACTIVE)
    with pytest.raises(RpcError) as err:
        await other.compact(sid)
    assert err.value.code == BUSY, err.value
    assert not running.done()

    # Its holder gone, the same daemon takes the lease over on its next request.
    assert await holder.kill() == -signal.SIGKILL
    running.cancel()
    result = await other.compact(sid)
    assert result.status == "continue", result
