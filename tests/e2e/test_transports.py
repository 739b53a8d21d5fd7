"""The shared-daemon transports: a 0600 unix socket and TCP on loopback."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .builders import user_message
from .conftest import SocketDaemon, free_tcp_port


async def test_unix_socket_is_0600_and_serves_several_clients(
    unix_daemon: SocketDaemon,
) -> None:
    path = unix_daemon.address.removeprefix("unix:")
    mode = os.stat(path).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600

    first = await unix_daemon.connect()
    second = await unix_daemon.connect()
    session = await first.create_session(title="over unix")
    assert (await second.get_session(session.id)).title == "over unix"
    # Each connection has its own lifecycle: one shutting down leaves the other served.
    assert await first.shutdown_and_exit() is None
    assert (await second.get_session(session.id)).id == session.id


async def test_tcp_loopback(daemon_env: dict[str, str | None], tmp_path: Path) -> None:
    port = free_tcp_port()
    daemon = await SocketDaemon.start(
        f"tcp://127.0.0.1:{port}", tmp_path / "sessions.db", daemon_env
    )
    try:
        client = await daemon.connect()
        assert client.initialize_result is not None
        session = await client.create_session(title="over tcp")
        message = await client.update_message(user_message(session.id))
        page = await client.messages(session.id)
        assert [m.info["id"] for m in page.messages] == [message["id"]]
    finally:
        assert await daemon.stop() == 0
