"""The PostgreSQL server goes away under a running daemon, and comes back.

While it is down, a write is answered -32048 (unavailable: nothing stored) and so is a read,
never -32603; the daemon keeps its clients. Once the server is back, the same connection's
next write and read succeed (the daemon reconnects), and everything acknowledged before the
outage is there. The server runs with PostgreSQL's default durability, since it is crashed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

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
