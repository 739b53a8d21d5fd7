"""The PostgreSQL server goes away under a running daemon, and comes back.

While it is down, a write is answered -32048 (unavailable: nothing stored) and so is a read,
never -32603; the daemon keeps its clients. Once the server is back, the same connection's
next write and read succeed (the daemon reconnects), and everything acknowledged before the
outage is there. The server runs with PostgreSQL's default durability, since it is crashed.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pgcluster import Cluster, available_reason
from sidecar_client import RpcError
from wire import put_message, put_part, stored

from .builders import text_part, user_message
from .conftest import Spawner

UNAVAILABLE = -32048


@pytest.fixture
def own_cluster() -> Iterator[Cluster]:
    reason = available_reason()
    if reason is not None:  # as the run's own cluster (tests/conftest.py)
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required under CI: {reason}")
        pytest.skip(f"PostgreSQL tests need a PostgreSQL server: {reason}")
    cluster = Cluster(durable=True)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


async def test_an_outage_is_unavailable_not_a_bug_and_the_daemon_recovers(
    own_cluster: Cluster, daemon_env: dict[str, str | None], tmp_path: Path
) -> None:
    spawner = Spawner(daemon_env, tmp_path, own_cluster.url())
    try:
        await outage(own_cluster, spawner)
    finally:
        await spawner.cleanup()


async def outage(own_cluster: Cluster, spawner: Spawner) -> None:
    client = await spawner()
    session = await client.create_session()
    message = await put_message(client, user_message(session.id))
    before = await put_part(client, text_part(session.id, message["id"], "before"))
    await client.context(session.id)  # a warm window cache

    own_cluster.crash()
    with pytest.raises(RpcError) as err:
        await put_part(client, text_part(session.id, message["id"], "during"))
    assert err.value.code == UNAVAILABLE, err.value
    assert "nothing was stored" in err.value.message
    with pytest.raises(RpcError) as err:
        await client.context(session.id)  # not served from the cache it cannot check
    assert err.value.code == UNAVAILABLE, err.value

    own_cluster.resume()
    after = await put_part(client, text_part(session.id, message["id"], "after"))
    page = await stored(client, session.id)
    texts = [p["text"] for m in page.messages for p in m.parts]
    assert texts == ["before", "after"]
    assert [p["id"] for p in page.messages[0].parts] == sorted([before["id"], after["id"]])
    ctx = await client.context(session.id)
    assert [p["text"] for m in ctx.messages for p in m["parts"]] == ["before", "after"]


# -- a restart under pipelined load (issue 19, item 7) ----------------------------------------

INTERNAL = -32603
IN_FLIGHT = 48  # requests pipelined at once on the one connection
PREFILL = 1000  # parts in the session before the load starts: reads of several round trips
CYCLES = int(os.environ.get("SIDECAR_OUTAGE_CYCLES", "5"))  # of each way to stop
AFTER = 6  # rounds that must succeed after the server is back, per cycle


class Load:
    """Pipelined rounds of writes (new messages, parts) and reads (window, history) on one
    session, counting each reply; stops when told."""

    def __init__(self, client: Any, session_id: str, parent_id: str) -> None:
        self.client, self.sid, self.parent = client, session_id, parent_id
        self.counts: Counter[str] = Counter()
        self.errors: list[RpcError] = []
        self.acked_parts: set[str] = set()
        self.acked_messages: set[str] = set()
        self.failed = asyncio.Event()  # a request was refused since this was cleared
        self.recovered = asyncio.Event()  # AFTER whole rounds succeeded since ``watch()``
        self._rounds_ok = 0
        self.stop = False

    def watch(self) -> None:
        """Start counting whole rounds that succeed, towards ``recovered``."""
        self._rounds_ok = 0
        self.recovered.clear()

    async def _one(self, coro: Any, kind: str) -> Any:
        try:
            result = await coro
        except RpcError as exc:
            self.counts[str(exc.code)] += 1
            if exc.code != UNAVAILABLE:
                self.errors.append(exc)
            self.failed.set()
            return None
        self.counts["ok"] += 1
        return result

    async def round(self, n: int) -> bool:
        c, sid = self.client, self.sid
        calls: list[Any] = []
        for i in range(IN_FLIGHT):
            if i % 8 == 0:
                calls.append(self._one(put_message(c, user_message(sid)), "message"))
            elif i % 8 == 1:
                # The window, from the database (the write before it changed the session),
                # read in several chunks inside one read-only transaction.
                calls.append(self._one(c.context(sid, wait=False, fit=False), "read"))
            elif i % 8 == 2:
                calls.append(self._one(c.messages(sid, limit=20), "read"))
            else:
                part = text_part(sid, self.parent, f"load {n}.{i}")
                calls.append(self._one(put_part(c, part), "part"))
        results = await asyncio.gather(*calls)
        for i, r in enumerate(results):
            if r is None or i % 8 in (1, 2):
                continue
            (self.acked_messages if i % 8 == 0 else self.acked_parts).add(r["id"])
        return all(r is not None for r in results)

    async def run(self) -> None:
        n = 0
        while not self.stop:
            n += 1
            if await self.round(n):
                self._rounds_ok += 1
                if self._rounds_ok >= AFTER:
                    self.recovered.set()
            else:
                self._rounds_ok = 0


async def until(event: asyncio.Event, running: asyncio.Future[None]) -> None:
    """Wait for ``event``, unless the load itself ends (failed) first."""
    waiting = asyncio.ensure_future(event.wait())
    await asyncio.wait({waiting, running}, return_when=asyncio.FIRST_COMPLETED)
    if not waiting.done():
        waiting.cancel()
        running.result()  # its exception
        raise AssertionError("the load ended early")


async def test_a_restart_under_pipelined_load_is_never_an_internal_error(
    own_cluster: Cluster, daemon_env: dict[str, str | None], tmp_path: Path
) -> None:
    spawner = Spawner(daemon_env, tmp_path, own_cluster.url())
    try:
        client = await spawner()
        session = await client.create_session()
        parent = await put_message(client, user_message(session.id))
        for start in range(0, PREFILL, 500):  # a window read takes several round trips
            await asyncio.gather(
                *(
                    put_part(client, text_part(session.id, parent["id"], f"old {i}"))
                    for i in range(start, start + 500)
                )
            )
        load = Load(client, session.id, parent["id"])
        running = asyncio.ensure_future(load.run())
        try:
            # A fast shutdown (what `pg_ctl stop` and a service manager's restart do: the
            # server ends every session) and a crash, each under load, each then resumed.
            for stop in CYCLES * (own_cluster.shut_down, own_cluster.crash):
                load.failed.clear()
                await asyncio.to_thread(stop)
                await until(load.failed, running)  # the load met the outage
                load.watch()
                await asyncio.to_thread(own_cluster.resume)
                await until(load.recovered, running)  # whole rounds succeed again
        finally:
            load.stop = True
            await running
        restarts = 2 * CYCLES
        print(f"\nreplies across {restarts} PostgreSQL restarts under load: {dict(load.counts)}")
        logged = client._transport.stderr_text()
        internal = logged[logged.find("Traceback") - 200 :][:3000] if "Traceback" in logged else ""
        assert load.counts[str(INTERNAL)] == 0, ([str(e) for e in load.errors][:5], internal)
        assert not load.errors, [str(e) for e in load.errors][:5]
        assert load.counts[str(UNAVAILABLE)] > 0  # the outages were met under load

        page = await client.messages(session.id)
        stored_messages = {m.info.id for m in page.messages}
        stored_parts = {p.id for m in page.messages for p in m.parts}
        assert load.acked_messages <= stored_messages
        assert load.acked_parts <= stored_parts
        print(
            f"acknowledged and stored: {len(load.acked_messages)} messages, "
            f"{len(load.acked_parts)} parts; lost: "
            f"{len(load.acked_messages - stored_messages) + len(load.acked_parts - stored_parts)}"
        )
    finally:
        await spawner.cleanup()
