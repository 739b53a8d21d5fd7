"""Regressions found while building the e2e suite: each once failed against the daemon."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from client_writer import CLIENT_WRITER, HeldWriter
from sidecar_client import RpcError, spawn

from .conftest import Spawner
from .test_daemon_requests import small_conversation


async def test_request_waiting_in_stdin_at_startup_gets_32002(
    daemon_env: dict[str, str | None], tmp_path: Path
) -> None:
    client = await spawn(tmp_path / "db", env=daemon_env, initialize=False)
    try:
        with pytest.raises(RpcError) as err:
            await client.request("session/list", timeout=5)
        assert err.value.code == -32002
    finally:
        await client.kill()


async def test_initialize_result_has_protocol_version(spawner: Spawner) -> None:
    client = await spawner(initialize=False)
    result = await client.initialize()
    assert result["protocolVersion"] == "1.0"


async def test_a_client_cannot_set_the_daemons_server_limits(spawner: Spawner) -> None:
    """``server.*`` is the daemon's own (issue 9 item 8): refused in ``initializationOptions``
    and ``config/update``, and the daemon keeps its limits for every later frame."""
    client = await spawner(initialize=False)
    with pytest.raises(RpcError) as err:
        await client.initialize(initialization_options={"server": {"maxFrameBytes": 4096}})
    assert err.value.code == -32602 and "initializationOptions.server" in err.value.message
    result = await client.initialize()
    assert result["capabilities"]["maxFrameBytes"] == 64 * 1024 * 1024
    with pytest.raises(RpcError) as err:
        await client.request("config/update", {"config": {"server": {"maxFrameBytes": 16}}})
    assert err.value.code == -32602 and "config.server" in err.value.message
    session = await client.create_session(title="x" * 8000)  # a frame well over 16 bytes
    assert session.title == "x" * 8000


async def test_cancel_request_cancels_an_in_flight_request(spawner: Spawner) -> None:
    client = await spawner(**CLIENT_WRITER)
    held = HeldWriter("late summary")
    client.on_request("summarizer/complete", held)
    session_id = await small_conversation(client)
    call = client.call("session/compact", {"sessionID": session_id})
    await held.asked.wait()
    client.notify("$/cancelRequest", {"id": call.id})
    await client.list_sessions()  # the cancel has been read by now
    held.release.set()
    with pytest.raises(RpcError) as err:
        await call
    assert err.value.code == -32800


async def test_wrong_jsonrpc_type_still_gets_its_id_back(spawner: Spawner) -> None:
    client = await spawner()
    call = client.reserve_call()
    client.send_frame(json.dumps({"jsonrpc": 2, "id": call.id, "method": "session/list"}).encode())
    with pytest.raises(RpcError) as err:
        await call
    assert err.value.code == -32600 and "jsonrpc" in err.value.message
