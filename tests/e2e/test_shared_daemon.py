"""``connect``, ``status`` and ``stop``: editors sharing one background daemon (issue 12).

Every process here is real: ``connect`` bridges run as subprocesses and are driven with the
Python client over their stdio, the daemon they start is detached, and its end is awaited
through a pidfd, never a sleep. Timeouts only guard against hangs.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from sidecar_client import Client, connect_shared, default_socket_path
from sidecar_client._transport import STREAM_LIMIT, StreamTransport, merged_env
from wire import put_message, put_part, stored

from .builders import text_part, user_message

GUARD = 60.0


@dataclass
class Place:
    """Isolated per-user dirs (short: a socket path must stay under ~107 bytes)."""

    root: Path
    env: dict[str, str | None]

    @property
    def socket(self) -> Path:
        return self.root / "run" / "compaction-sidecar" / "daemon.sock"

    @property
    def log(self) -> Path:
        return self.root / "state" / "compaction-sidecar" / "daemon.log"


@pytest_asyncio.fixture(loop_scope="session")
async def place(daemon_env: dict[str, str | None]) -> AsyncIterator[Place]:
    root = Path(tempfile.mkdtemp(prefix="sc-"))
    env = {
        **daemon_env,
        "XDG_RUNTIME_DIR": str(root / "run"),
        "XDG_STATE_HOME": str(root / "state"),
        "XDG_DATA_HOME": str(root / "data"),
    }
    (root / "run").mkdir(mode=0o700)
    try:
        yield Place(root, env)
    finally:
        # Whatever a failed test left running: stop it through its socket.
        if place_socket_alive(root):
            await cli(env, "stop")
        shutil.rmtree(root, ignore_errors=True)


def place_socket_alive(root: Path) -> bool:
    from sidecar.shared_daemon import sockets

    return sockets.probe(root / "run" / "compaction-sidecar" / "daemon.sock")


async def connect_bridge(env: Mapping[str, str | None], *args: str) -> Client:
    """``compaction-sidecar connect ARGS`` as an editor runs it, wrapped in a client."""
    stderr = tempfile.TemporaryFile(prefix="connect-stderr-")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sidecar",
        "connect",
        "--idle-exit",
        "0.5",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        env=merged_env(env),
        limit=STREAM_LIMIT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    return Client(StreamTransport(proc.stdout, proc.stdin, process=proc, stderr_file=stderr))


async def cli(env: Mapping[str, str | None], *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sidecar",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=merged_env(env),
    )
    out, err = await asyncio.wait_for(proc.communicate(), GUARD)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def process_exit(pid: int) -> None:
    """Wait for a process that is not our child (the detached daemon) to end."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()

    def ended() -> None:
        if not gone.done():
            gone.set_result(None)

    loop.add_reader(fd, ended)
    try:
        await asyncio.wait_for(gone, GUARD)
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def status(env: Mapping[str, str | None], *args: str) -> dict[str, Any]:
    code, out, err = await cli(env, "status", "--json", *args)
    assert code == 0, err
    return dict(json.loads(out))


async def test_two_editors_starting_together_share_one_daemon_that_idles_out(
    place: Place,
) -> None:
    first, second = await asyncio.gather(connect_bridge(place.env), connect_bridge(place.env))
    await asyncio.gather(first.initialize(), second.initialize())

    mine = await first.request("daemon/status", {})
    theirs = await second.request("daemon/status", {})
    assert mine["pid"] == theirs["pid"]
    assert mine["socket"] == str(place.socket)
    assert place.log.read_text().count("listening on") == 1  # one daemon was started

    # A write through one bridge arrives as a notification on the other.
    session = await first.create_session(title="shared")
    await second.subscribe(session.id)
    message = await put_message(first, user_message(session.id, note="from the first"))
    seen = await second.wait_for("message/updated", timeout=GUARD)
    assert seen["message"] == message

    info = await status(place.env)
    assert info["running"] is True
    assert info["pid"] == mine["pid"]
    assert info["clients"] == 3  # both editors and the status command itself
    assert info["sessions"] == 1
    assert info["idleExit"] == 0.5
    assert info["db"] == str(place.root / "data" / "compaction-sidecar" / "sessions.db")

    # Both editors leave: each bridge ends, then the daemon after its idle time.
    assert await first.close(GUARD) == 0
    assert await second.close(GUARD) == 0
    await process_exit(mine["pid"])
    assert not place.socket.exists()
    assert "stopping (no client for 0.5s)" in place.log.read_text()


async def test_the_bridge_is_byte_exact(place: Place) -> None:
    client = await connect_bridge(place.env)
    await client.initialize()
    session = await client.create_session(title="bytes")
    message = await put_message(client, user_message(session.id))
    # Larger than any pipe or socket buffer, and not ASCII: it crosses the bridge in pieces.
    text = "ünïcödé ✓ " * 40_000
    part = await put_part(client, text_part(session.id, message["id"], text))
    page = await stored(client, session.id)
    assert [p["text"] for p in page.messages[0].parts] == [text]
    assert part["text"] == text
    # A malformed frame gets the daemon's own answer, as over serve's stdio.
    client.send_raw(b"Content-Length: 9\r\n\r\n{not json")
    error = await client.wait_for_error(timeout=GUARD)
    assert error.code == -32700
    assert await client.shutdown_and_exit(GUARD) == 0


async def test_many_editors_at_once_start_exactly_one_daemon(place: Place) -> None:
    bridges = await asyncio.gather(*(connect_bridge(place.env) for _ in range(5)))
    await asyncio.gather(*(b.initialize() for b in bridges))
    pids = {(await b.request("daemon/status", {}))["pid"] for b in bridges}
    assert len(pids) == 1
    assert place.log.read_text().count("listening on") == 1
    assert all(code == 0 for code in await asyncio.gather(*(b.close(GUARD) for b in bridges)))
    await process_exit(pids.pop())
    assert not place.socket.exists()


async def test_a_bridge_after_idle_exit_starts_a_fresh_daemon_on_the_same_store(
    place: Place,
) -> None:
    client = await connect_bridge(place.env)
    await client.initialize()
    session = await client.create_session(title="kept")
    old = (await client.request("daemon/status", {}))["pid"]
    await client.close(GUARD)
    await process_exit(old)

    again = await connect_bridge(place.env)
    await again.initialize()
    assert (await again.request("daemon/status", {}))["pid"] != old
    assert (await again.get_session(session.id)).title == "kept"
    assert await again.shutdown_and_exit(GUARD) == 0


async def test_stop_ends_the_daemon_and_its_bridges(place: Place) -> None:
    sock = place.root / "custom.sock"
    bridge = await connect_bridge(place.env, "--socket", str(sock), "--idle-exit", "3600")
    await bridge.initialize()
    info = await status(place.env, "--socket", str(sock))
    assert info["socket"] == str(sock) and info["idleExit"] == 3600

    code, out, err = await cli(place.env, "stop", "--socket", str(sock))
    assert code == 0, err
    assert out.strip() == f"stopped compaction-sidecar (pid {info['pid']})"
    await process_exit(info["pid"])
    assert not sock.exists()
    # The daemon closed the bridge's connection: the bridge ends on its own.
    assert await bridge.wait_exit(GUARD) == 0


async def test_status_and_stop_without_a_daemon(place: Place) -> None:
    code, out, err = await cli(place.env, "status")
    assert code == 1
    assert f"no daemon is listening on {place.socket}" in err
    code, out, _ = await cli(place.env, "status", "--json")
    assert code == 1
    assert json.loads(out) == {"running": False, "socket": str(place.socket)}
    code, _, err = await cli(place.env, "stop")
    assert code == 1
    assert "no daemon is listening" in err


async def test_connect_reports_a_daemon_that_cannot_start(place: Place) -> None:
    db_dir = place.root / "not-a-dir"
    db_dir.write_text("a file where the database's directory should be")
    code, _, err = await cli(place.env, "connect", "--db", str(db_dir / "sessions.db"))
    assert code == 2  # the daemon's usage error, passed on (issue 20)
    assert "the daemon exited with status" in err
    assert not place.socket.exists()


async def test_connect_refuses_a_default_socket_dir_open_to_others(place: Place) -> None:
    place.socket.parent.mkdir(mode=0o777, parents=True)
    place.socket.parent.chmod(0o777)
    code, _, err = await cli(place.env, "connect")
    assert code == 1
    assert "is open to other users" in err


async def test_connect_shared_starts_the_shared_daemon_and_joins_it(
    place: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``connect_shared()`` is ``connect`` for a Python agent: it starts the background daemon
    at the default socket when none answers, and a second call (or an editor's bridge) joins
    the same daemon."""
    for key, value in place.env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    assert default_socket_path() == place.socket
    assert not place.socket.exists()

    agent = await connect_shared(idle_exit=0.5)
    mine = await agent.request("daemon/status", {})
    assert mine["socket"] == str(place.socket) and mine["idleExit"] == 0.5
    assert place.log.read_text().count("listening on") == 1

    again = await connect_shared()
    editor = await connect_bridge(place.env)
    await editor.initialize()
    assert (await again.request("daemon/status", {}))["pid"] == mine["pid"]
    assert (await editor.request("daemon/status", {}))["pid"] == mine["pid"]
    assert place.log.read_text().count("listening on") == 1  # still the one daemon

    session = await agent.create_session(title="from the agent")
    assert (await editor.get_session(session.id)).title == "from the agent"

    await again.close()
    assert await editor.close(GUARD) == 0
    await agent.close()
    await process_exit(mine["pid"])  # idles out once the last client left
    assert not place.socket.exists()
