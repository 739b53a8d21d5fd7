"""LSP lifecycle over real stdio: initialize, the -32002 gate, shutdown/exit and exit codes."""

from __future__ import annotations

import pytest
from sidecar_client import Client, ConnectionClosed, RpcError

from .conftest import Spawner


async def test_initialize_returns_server_info_and_capabilities(spawner: Spawner) -> None:
    client = await spawner(initialize=False)
    result = await client.initialize()
    assert result["serverInfo"]["name"] == "compaction-sidecar"
    assert isinstance(result["serverInfo"]["version"], str) and result["serverInfo"]["version"]
    caps = result["capabilities"]
    assert isinstance(caps, dict)
    for method in ("session/create", "session/messages", "message/update", "part/update"):
        assert method in caps["methods"]
    assert "message/updated" in caps["notifications"]
    assert client.initialize_result == result


async def test_request_before_initialize_gets_32002(spawner: Spawner) -> None:
    client = await spawner(initialize=False)
    with pytest.raises(RpcError) as err:
        await client.list_sessions()
    assert err.value.code == -32002
    assert "session/list" in err.value.message
    # The gate is lifted by initialize, on the same connection.
    await client.initialize()
    assert (await client.list_sessions()).sessions == []


async def test_shutdown_then_exit_exits_0(client: Client) -> None:
    assert await client.shutdown_and_exit() == 0


async def test_exit_without_shutdown_exits_1(client: Client) -> None:
    client.notify("exit")
    assert await client.wait_exit() == 1


async def test_stdin_eof_ends_the_daemon_cleanly(client: Client) -> None:
    assert await client.close() == 0


async def test_requests_after_shutdown_get_an_error_reply(client: Client) -> None:
    await client.shutdown()
    with pytest.raises(RpcError) as err:
        await client.list_sessions()
    assert err.value.code == -32600
    assert "shutting down" in err.value.message
    with pytest.raises(RpcError) as err:
        await client.create_session(title="too late")
    assert err.value.code == -32600
    # exit still works after shutdown, with status 0.
    client.notify("exit")
    assert await client.wait_exit() == 0


async def test_requests_to_a_killed_daemon_raise_connection_closed(client: Client) -> None:
    await client.kill()
    assert client.closed
    with pytest.raises(ConnectionClosed):
        await client.list_sessions()


async def test_async_with_closes_the_daemon(spawner: Spawner) -> None:
    async with await spawner() as client:
        session = await client.create_session(title="scoped")
        assert (await client.get_session(session.id)).title == "scoped"
    assert client.process is not None and client.process.returncode == 0
    assert client.closed


async def test_daemon_stderr_is_captured(spawner: Spawner) -> None:
    client = await spawner(extra_args=["--log-level", "DEBUG"])
    await client.create_session()
    assert "DEBUG" in client.stderr()  # logged at start-up, before the first reply
    await client.kill()
    assert "DEBUG" in client.stderr()  # still readable after the daemon is gone
