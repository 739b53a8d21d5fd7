"""Issue 9 item 7, the isolation half (the TCP token is in test_transports.py): on a shared
listener no client can point the summarizer at an endpoint of its choosing with the daemon's
credentials, nor change what another client's sessions run under.

A real daemon on a unix socket, configured by its owner with an OpenAI-compatible summarizer
whose key comes from the daemon's environment and whose extra header comes from its config
file; the "attacker" is a real HTTP server on 127.0.0.1 that records what reaches it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from sidecar_client import RpcError

from tests.summarizers.httpserver import Reply, ScriptedServer

from .conftest import SocketDaemon
from .test_daemon_requests import small_conversation

SECRET = "sk-owner-secret-0123456789"
HEADER_SECRET = "owner-header-secret"


@pytest_asyncio.fixture(loop_scope="session")
async def attacker() -> AsyncIterator[ScriptedServer]:
    server = ScriptedServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def owned_daemon(
    daemon_env: dict[str, str | None], attacker: ScriptedServer
) -> AsyncIterator[SocketDaemon]:
    where = Path(tempfile.mkdtemp(prefix="sc-iso-"))
    config = {
        "summarizer": {
            "provider": "openai",
            "model": "owner-model",
            "baseURL": "http://127.0.0.1:9/v1",  # the owner's endpoint (nothing listens)
            "apiKeyEnv": "OWNER_KEY",
            "headers": {"X-Owner": HEADER_SECRET},
            "maxRetries": 0,
        }
    }
    (where / "config.json").write_text(json.dumps(config))
    daemon = await SocketDaemon.start(
        f"unix:{where / 's.sock'}",
        where / "sessions.db",
        {**daemon_env, "OWNER_KEY": SECRET},
        extra_args=["--config", str(where / "config.json")],
    )
    try:
        yield daemon
    finally:
        await daemon.stop()
        shutil.rmtree(where, ignore_errors=True)


async def test_a_client_cannot_send_the_daemons_credentials_to_its_own_endpoint(
    owned_daemon: SocketDaemon, attacker: ScriptedServer
) -> None:
    client = await owned_daemon.connect()
    # Naming one of the daemon's environment variables is refused outright.
    for patch in (
        {"summarizer": {"baseURL": f"{attacker.url}/v1", "apiKeyEnv": "OWNER_KEY"}},
        {"summarizer": {"apiKeyEnv": "HOME"}},
    ):
        with pytest.raises(RpcError) as err:
            await client.request("config/update", {"config": patch})
        assert err.value.code == -32602 and "apiKeyEnv" in err.value.message
    # Pointing the summarizer elsewhere is allowed, but carries none of the owner's secrets.
    await client.request("config/update", {"config": {"summarizer": {"baseURL": attacker.url}}})
    attacker.script(
        Reply(
            body={
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "sum"}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 2},
            }
        )
    )
    session_id = await small_conversation(client)
    result = await client.compact(session_id)
    assert result.status in ("continue", "stop")
    assert len(attacker.requests) == 1
    sent = attacker.requests[0]
    assert SECRET not in json.dumps(sent.headers) and SECRET.encode() not in sent.body
    assert HEADER_SECRET not in json.dumps(sent.headers)
    assert "authorization" not in sent.headers and "x-owner" not in sent.headers
    # Nor did the owner's secrets leak through config/get.
    shown = json.dumps(await client.request("config/get", {}))
    assert SECRET not in shown and HEADER_SECRET not in shown


async def test_a_clients_settings_never_reach_another_client(
    owned_daemon: SocketDaemon, attacker: ScriptedServer
) -> None:
    mine, theirs = await owned_daemon.connect(), await owned_daemon.connect()
    await mine.request(
        "config/update",
        {"config": {"summarizer": {"baseURL": attacker.url}, "compaction": {"auto": False}}},
    )
    effective = await theirs.request("config/get", {})
    assert effective["summarizer"]["baseURL"] == "http://127.0.0.1:9/v1"
    assert effective["compaction"]["auto"] is True
    with pytest.raises(RpcError) as err:
        await mine.request("config/update", {"config": {"server": {"maxFrameBytes": 16}}})
    assert err.value.code == -32602
    assert (await theirs.create_session(title="x" * 100)).title == "x" * 100


async def test_an_override_in_a_clients_overlay_gets_none_of_the_daemons_credentials(
    owned_daemon: SocketDaemon, attacker: ScriptedServer
) -> None:
    """Issue 24: a ``compaction.overrides`` summarizer follows the same credential rules."""
    client = await owned_daemon.connect()
    with pytest.raises(RpcError) as err:
        await client.request(
            "config/update",
            {"config": {"compaction": {"overrides": [{"summarizer": {"apiKeyEnv": "OWNER_KEY"}}]}}},
        )
    assert err.value.code == -32602 and "overrides[0].summarizer.apiKeyEnv" in err.value.message
    shown = await client.request(
        "config/update",
        {"config": {"compaction": {"overrides": [{"summarizer": {"baseURL": attacker.url}}]}}},
    )
    assert HEADER_SECRET not in json.dumps(shown)
    attacker.script(
        Reply(
            body={
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "sum"}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 2},
            }
        )
    )
    before = len(attacker.requests)
    session_id = await small_conversation(client)
    await client.compact(session_id)
    assert len(attacker.requests) == before + 1
    sent = attacker.requests[-1]
    assert SECRET not in json.dumps(sent.headers) and SECRET.encode() not in sent.body
    assert HEADER_SECRET not in json.dumps(sent.headers)
    assert "authorization" not in sent.headers and "x-owner" not in sent.headers
