"""End-to-end fixtures: the real daemon as a subprocess, over stdio or a shared socket.

All e2e tests and fixtures share one event loop (session scope), so a module can share one
daemon between tests that do not need a fresh process; starting a daemon costs most of a
second of imports. Every daemon runs with an isolated environment: an empty XDG config home
(no user config file) and none of the ``OPENCODE_*`` switches of the developer's shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import socket
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from daemon_env import isolated_env
from pgcluster import fresh_database
from pytest_asyncio import is_async_test
from sidecar_client import Client, connect, spawn
from sidecar_client._transport import daemon_command, merged_env

E2E_DIR = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    marker = pytest.mark.asyncio(loop_scope="session")
    for item in items:
        if is_async_test(item) and E2E_DIR in item.path.parents:
            item.add_marker(marker, append=False)


# -- environment -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def daemon_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str | None]:
    """Overrides applied to the daemon's environment (``None`` removes a variable)."""
    return isolated_env(tmp_path_factory.mktemp("xdg"))


# -- stdio daemons -----------------------------------------------------------------------------


class Spawner:
    """Starts stdio daemons for one test and makes sure none outlives it."""

    def __init__(
        self, env: Mapping[str, str | None], tmp: Path, db: str | Path | None = None
    ) -> None:
        self._env = env
        self._tmp = tmp
        # The test's database: a SQLite file, or a PostgreSQL URL (the ``backend`` param).
        self.db: str | Path = db if db is not None else tmp / "sessions.db"
        self.clients: list[Client] = []

    async def __call__(
        self,
        db: str | Path | None = None,
        *,
        env: Mapping[str, str | None] | None = None,
        extra_args: Sequence[str] = (),
        **kwargs: Any,
    ) -> Client:
        client = await spawn(
            db or self.db, env={**self._env, **(env or {})}, extra_args=extra_args, **kwargs
        )
        self.clients.append(client)
        return client

    async def configured(self, config: Mapping[str, Any]) -> Client:
        """A daemon started with ``--config`` naming a file that holds ``config``."""
        path = self._tmp / f"config-{len(self.clients)}.json"
        path.write_text(json.dumps(config))
        return await self(extra_args=["--config", str(path)])

    async def cleanup(self) -> None:
        for client in self.clients:
            proc = client.process
            if proc is not None and proc.returncode is None:
                await client.kill()


@pytest_asyncio.fixture(loop_scope="session")
async def spawner(
    daemon_env: dict[str, str | None], tmp_path: Path, db: str | Path
) -> AsyncIterator[Spawner]:
    """Stdio daemons on this test's database (each backend in turn)."""
    s = Spawner(daemon_env, tmp_path, db)
    try:
        yield s
    finally:
        await s.cleanup()


@pytest_asyncio.fixture(loop_scope="session")
async def client(spawner: Spawner) -> Client:
    """A fresh, initialized daemon on stdio, for this test only."""
    return await spawner()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def shared(
    daemon_env: dict[str, str | None],
    tmp_path_factory: pytest.TempPathFactory,
    backend: str,
    request: pytest.FixtureRequest,
) -> AsyncIterator[Client]:
    """One initialized stdio daemon shared by the tests of a module (each uses its own
    sessions); for behaviour that does not depend on the daemon's global state."""
    where = tmp_path_factory.mktemp("shared")
    s = Spawner(daemon_env, where, await module_db(backend, request, where))
    try:
        yield await s()
    finally:
        for c in s.clients:
            if c.process is not None and c.process.returncode is None:
                await c.close()
        await s.cleanup()


# -- shared daemons on a socket ----------------------------------------------------------------


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SocketDaemon:
    """``sidecar serve --listen ADDRESS`` as a subprocess; ready once it logs its address."""

    address: str
    process: asyncio.subprocess.Process
    stderr_lines: list[str] = field(default_factory=list)
    _drain: asyncio.Task[None] | None = None
    clients: list[Client] = field(default_factory=list)

    @classmethod
    async def start(
        cls,
        address: str,
        db: str | Path,
        env: Mapping[str, str | None],
        timeout: float = 20.0,
        extra_args: Sequence[str] = (),
    ) -> SocketDaemon:
        proc = await asyncio.create_subprocess_exec(
            *daemon_command(db, ["--listen", address, *extra_args]),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=merged_env(env),
        )
        daemon = cls(address, proc)
        assert proc.stderr is not None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    line = await proc.stderr.readline()
                    if not line:
                        raise RuntimeError(
                            f"daemon exited before listening: {''.join(daemon.stderr_lines)}"
                        )
                    daemon.stderr_lines.append(line.decode(errors="replace"))
                    if b"listening on" in line:
                        break
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        daemon._drain = asyncio.create_task(daemon._drain_stderr())
        return daemon

    async def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        while line := await self.process.stderr.readline():
            self.stderr_lines.append(line.decode(errors="replace"))

    async def connect(self, **kwargs: Any) -> Client:
        client = await connect(self.address, **kwargs)
        self.clients.append(client)
        return client

    async def stop(self) -> int:
        for client in self.clients:
            if not client.closed:
                await client.close()
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(10):
                code = await self.process.wait()
        except TimeoutError:
            self.process.kill()
            code = await self.process.wait()
        if self._drain is not None:
            await self._drain
        return code


async def module_db(backend: str, request: pytest.FixtureRequest, where: Path) -> str | Path:
    """A database for a module's shared daemon, on the run's ``backend``."""
    return await fresh_database(backend, request, where / "sessions.db")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def unix_daemon(
    daemon_env: dict[str, str | None], backend: str, request: pytest.FixtureRequest
) -> AsyncIterator[SocketDaemon]:
    """A daemon on a unix socket, shared by a module's tests (each connects its own clients
    and uses its own sessions)."""
    # Not tmp_path: a unix socket path must stay under ~107 bytes.
    where = Path(tempfile.mkdtemp(prefix="sc-"))
    try:
        daemon = await SocketDaemon.start(
            f"unix:{where / 'sidecar.sock'}", await module_db(backend, request, where), daemon_env
        )
        try:
            yield daemon
        finally:
            await daemon.stop()
    finally:
        shutil.rmtree(where, ignore_errors=True)
