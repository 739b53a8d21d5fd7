"""The shared-daemon transports: a 0600 unix socket and TCP on loopback."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import stat
import sys
import tempfile
from pathlib import Path

import pytest
from sidecar_client import RpcError
from sidecar_client._transport import merged_env
from wire import put_message, stored

from .builders import user_message
from .conftest import SocketDaemon, free_tcp_port

GUARD = 60  # seconds: only a hung daemon reaches it


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
    token = "a-token-of-the-test-" + "0" * 16
    daemon = await SocketDaemon.start(
        f"tcp://127.0.0.1:{port}",
        tmp_path / "sessions.db",
        {**daemon_env, "COMPACTION_SIDECAR_TOKEN": token},
    )
    try:
        client = await daemon.connect(auth_token=token)
        assert client.initialize_result is not None
        session = await client.create_session(title="over tcp")
        message = await put_message(client, user_message(session.id))
        page = await stored(client, session.id)
        assert [m.info["id"] for m in page.messages] == [message["id"]]
    finally:
        assert await daemon.stop() == 0


# -- unix socket ownership (issue 9 item 10) ----------------------------------------------------


def _serve_cmd(address: str, db: Path) -> list[str]:
    return [sys.executable, "-m", "sidecar", "serve", "--db", str(db), "--listen", address]


async def test_a_live_socket_is_refused_with_a_clear_error(
    unix_daemon: SocketDaemon, tmp_path: Path
) -> None:
    path = unix_daemon.address.removeprefix("unix:")
    inode = os.stat(path).st_ino
    proc = await asyncio.create_subprocess_exec(
        *_serve_cmd(unix_daemon.address, tmp_path / "other.db"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=merged_env({"SIDECAR_LOG": None}),
    )
    _, err = await asyncio.wait_for(proc.communicate(), GUARD)
    assert proc.returncode == 2
    assert f"a daemon is already listening on {path}" in err.decode()
    # The first daemon keeps its socket and goes on serving.
    assert os.stat(path).st_ino == inode
    client = await unix_daemon.connect()
    assert (await client.create_session(title="still here")).title == "still here"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_stale_socket_is_replaced_and_the_socket_removed_on_exit(
    daemon_env: dict[str, str | None], sig: signal.Signals
) -> None:
    where = Path(tempfile.mkdtemp(prefix="sc-"))
    try:
        path = where / "sidecar.sock"
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(str(path))  # a socket file nobody listens on: a crashed daemon's leftover
        stale.close()
        daemon = await SocketDaemon.start(f"unix:{path}", where / "s.db", daemon_env)
        client = await daemon.connect()
        assert (await client.create_session(title="replaced")).title == "replaced"
        await client.close()
        daemon.process.send_signal(sig)
        assert await asyncio.wait_for(daemon.process.wait(), GUARD) == 0
        assert not path.exists()
        await daemon.stop()
    finally:
        shutil.rmtree(where, ignore_errors=True)


async def test_a_path_that_is_not_a_socket_is_refused(
    daemon_env: dict[str, str | None], tmp_path: Path
) -> None:
    path = tmp_path / "not-a-socket"
    path.write_text("precious")
    proc = await asyncio.create_subprocess_exec(
        *_serve_cmd(f"unix:{path}", tmp_path / "s.db"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=merged_env(daemon_env),
    )
    _, err = await asyncio.wait_for(proc.communicate(), GUARD)
    assert proc.returncode == 2
    assert "exists and is not a socket" in err.decode()
    assert path.read_text() == "precious"


# -- TCP authentication (issue 9 item 7, DESIGN §4) ---------------------------------------------


async def test_tcp_writes_a_0600_token_file_and_requires_the_token(
    daemon_env: dict[str, str | None],
) -> None:
    runtime = Path(tempfile.mkdtemp(prefix="sc-run-"))
    port = free_tcp_port()
    env = {**daemon_env, "XDG_RUNTIME_DIR": str(runtime), "COMPACTION_SIDECAR_TOKEN": None}
    daemon = await SocketDaemon.start(f"tcp://127.0.0.1:{port}", runtime / "s.db", env)
    try:
        token_file = runtime / "compaction-sidecar" / f"tcp-{port}.token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= 32

        for wrong in (None, "", token[:-1] + ("x" if token[-1] != "x" else "y")):
            anonymous = await daemon.connect(initialize=False)
            with pytest.raises(RpcError) as info:
                await anonymous.initialize(auth_token=wrong)
            assert info.value.code == -32046
            assert "authToken" in info.value.message
            # ... and the daemon closes the connection.
            assert await anonymous.wait_exit(GUARD) is None
            assert anonymous.closed

        client = await daemon.connect(auth_token=token)
        session = await client.create_session(title="authenticated")
        assert (await client.get_session(session.id)).title == "authenticated"
    finally:
        assert await daemon.stop() == 0
        assert not (runtime / "compaction-sidecar" / f"tcp-{port}.token").exists()
        shutil.rmtree(runtime, ignore_errors=True)
    # The token never reaches the log.
    assert token not in "".join(daemon.stderr_lines)


async def test_tcp_token_from_the_environment_writes_no_file(
    daemon_env: dict[str, str | None], tmp_path: Path
) -> None:
    port = free_tcp_port()
    token_file = tmp_path / "token"
    env = {**daemon_env, "COMPACTION_SIDECAR_TOKEN": "s3cret-from-env-" + "x" * 20}
    daemon = await SocketDaemon.start(
        f"tcp://127.0.0.1:{port}",
        tmp_path / "s.db",
        env,
        extra_args=["--token-file", str(token_file)],
    )
    try:
        client = await daemon.connect(auth_token="s3cret-from-env-" + "x" * 20)
        assert (await client.create_session(title="env")).title == "env"
        assert not token_file.exists()
    finally:
        assert await daemon.stop() == 0
    assert "s3cret-from-env" not in "".join(daemon.stderr_lines)
