"""Issue 19, item 4: unauthenticated TCP connections are bounded.

Before a successful ``initialize`` a TCP connection may send only a small frame (64 KiB: an
``initialize`` fits), and it is closed once ``server.authTimeout`` passes without one; the
daemon serves at most ``server.maxConnections`` connections and logs each refusal. Every
wait here is on the daemon closing the socket (EOF), with a guard against a daemon that
never does; ``bench/unauthenticated.py`` measures the memory of 16 large partial frames.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from .conftest import SocketDaemon, free_tcp_port
from .test_trust import request_frame

TOKEN = "unauthenticated-test-token-0123456789"
GUARD = 30.0  # seconds: a daemon that never closes fails the test instead of hanging it


@asynccontextmanager
async def tcp_daemon(
    daemon_env: dict[str, str | None], where: Path, server: dict[str, Any]
) -> AsyncIterator[tuple[SocketDaemon, int]]:
    config = where / "daemon.json"
    config.write_text(json.dumps({"server": server}))
    port = free_tcp_port()
    daemon = await SocketDaemon.start(
        f"tcp://127.0.0.1:{port}",
        where / "s.db",
        {**daemon_env, "COMPACTION_SIDECAR_TOKEN": TOKEN},
        extra_args=["--config", str(config)],
    )
    try:
        yield daemon, port
    finally:
        await daemon.stop()


async def _until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the daemon sends until it closes the connection."""
    got = bytearray()
    async with asyncio.timeout(GUARD):
        try:
            while data := await reader.read(1 << 16):
                got += data
        except ConnectionError:
            pass
    return bytes(got)


async def test_an_idle_unauthenticated_connection_is_closed_after_auth_timeout(
    daemon_env: dict[str, str | None], tmp_path: Path
) -> None:
    async with tcp_daemon(daemon_env, tmp_path, {"authTimeout": 0.5}) as (daemon, port):
        idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        # One that started an initialize and never finished it is closed too.
        idle[2][1].write(b"Content-Length: 500\r\n\r\n{")
        for reader, writer in idle:
            assert await _until_closed(reader) == b""
            writer.close()
        # An authenticated client is not timed out: it is still served after the others.
        client = await daemon.connect(auth_token=TOKEN)
        session = await client.create_session(title="authenticated")
        assert (await client.request("session/get", {"sessionID": session.id}))["title"] == (
            "authenticated"
        )
        log = "".join(daemon.stderr_lines)
        assert "server.authTimeout" in log


async def test_a_large_frame_before_initialize_is_refused_and_closed(
    daemon_env: dict[str, str | None], tmp_path: Path
) -> None:
    async with tcp_daemon(daemon_env, tmp_path, {}) as (daemon, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # A 60 MB partial frame: its header is refused at once, nothing of it is buffered.
        writer.write(b"Content-Length: %d\r\n\r\n" % (60 << 20) + b"x" * (1 << 20))
        got = await _until_closed(reader)
        writer.close()
        body = json.loads(got.partition(b"\r\n\r\n")[2])
        assert body["error"]["code"] == -32600
        assert "65536" in body["error"]["message"]
        # An initialize (with its token) fits the pre-authentication limit.
        client = await daemon.connect(auth_token=TOKEN)
        sid = (await client.create_session()).id
        # After it, the daemon's own maxFrameBytes applies again.
        big = {"sessionID": sid, "role": "user", "id": "msg_big", "summary": {"x": "y" * 200_000}}
        await client.update_message(big)


async def test_connections_over_max_connections_are_refused_and_logged(
    daemon_env: dict[str, str | None], tmp_path: Path
) -> None:
    async with tcp_daemon(daemon_env, tmp_path, {"maxConnections": 2}) as (daemon, port):
        first = await daemon.connect(auth_token=TOKEN)
        second = await daemon.connect(auth_token=TOKEN)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request_frame(1, "initialize", {"capabilities": {}, "authToken": TOKEN}))
        got = await _until_closed(reader)
        writer.close()
        body = json.loads(got.partition(b"\r\n\r\n")[2])
        assert body["id"] is None and "server.maxConnections" in body["error"]["message"]
        assert "server.maxConnections" in "".join(daemon.stderr_lines)
        assert (await first.create_session()).id
        await second.close()  # answered exit: the daemon has let it go
        third = await daemon.connect(auth_token=TOKEN)
        assert (await third.create_session()).id
