"""Ways to get a ``Client``: spawn a private daemon, connect to an address, or join the shared
background daemon (starting it when none answers)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket as pysocket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sidecar_client._client import Client
from sidecar_client._inbox import ConnectionClosed
from sidecar_client._transport import open_connected, open_socket, spawn_stdio


async def _start(
    client: Client,
    initialize: bool,
    capabilities: Mapping[str, Any] | None,
    initialization_options: Mapping[str, Any] | None,
    auth_token: str | None = None,
) -> Client:
    try:
        if initialize:
            await client.initialize(capabilities, initialization_options, auth_token=auth_token)
    except ConnectionClosed as exc:
        if client.process is None:
            await client.close()
            raise
        code = await client.kill()
        raise ConnectionClosed(
            f"the daemon exited (status {code}) before answering initialize: {exc}\n"
            f"{client.stderr()}"
        ) from exc
    except BaseException:
        if client.process is not None:
            await client.kill()
        else:
            await client.close()
        raise
    return client


async def spawn(
    db_path: str | os.PathLike[str],
    *,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str | None] | None = None,
    initialize: bool = True,
    capabilities: Mapping[str, Any] | None = None,
    initialization_options: Mapping[str, Any] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> Client:
    """Start ``python -m sidecar serve --db DB_PATH [extra_args]`` on stdio and connect.

    ``env`` is applied on top of this process's environment (a ``None`` value removes a
    variable). Unless ``initialize=False``, ``initialize`` + ``initialized`` are done here,
    with ``capabilities`` (wire names, e.g. ``{"summarizer": True}``) and
    ``initialization_options`` (a partial config). A daemon that exits before answering
    ``initialize`` raises ``ConnectionClosed`` with its stderr.
    """
    transport = await spawn_stdio(db_path, extra_args, env, cwd)
    return await _start(Client(transport), initialize, capabilities, initialization_options)


async def connect(
    address: str,
    *,
    initialize: bool = True,
    capabilities: Mapping[str, Any] | None = None,
    initialization_options: Mapping[str, Any] | None = None,
    auth_token: str | None = None,
) -> Client:
    """Connect to a shared daemon at ``tcp://127.0.0.1:PORT`` or ``unix:/path``.

    A TCP daemon requires ``auth_token``: the contents of its ``--token-file`` (or its
    ``COMPACTION_SIDECAR_TOKEN``). A unix socket (0600) needs none.
    """
    client = Client(await open_socket(address))
    return await _start(client, initialize, capabilities, initialization_options, auth_token)


async def connect_shared(
    socket: str | os.PathLike[str] | None = None,
    *,
    db: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
    idle_exit: float | None = None,
    log_level: str | None = None,
    log_file: str | os.PathLike[str] | None = None,
    initialize: bool = True,
    capabilities: Mapping[str, Any] | None = None,
    initialization_options: Mapping[str, Any] | None = None,
) -> Client:
    """Join the shared background daemon, starting it when none answers: what
    ``compaction-sidecar connect`` does for an editor, without the stdio bridge.

    ``socket`` defaults to ``default_socket_path()``; ``db``, ``config``, ``idle_exit``
    (seconds without a client before it exits; default 300, as ``connect``), ``log_level``
    and ``log_file`` apply only to a daemon this call starts (a running one keeps its own: see
    ``daemon/status``). Starting is done by ``sidecar.shared_daemon.bridge`` under the
    socket's lock, so agents and editors starting together end with one daemon. Raises
    ``ConnectionError`` saying why when the daemon cannot be reached or started.
    """
    from sidecar.shared_daemon import bridge, paths

    default = socket is None
    where = paths.default_socket_path() if socket is None else Path(socket)
    target = bridge.Target(
        socket=where,
        db=os.fspath(db) if db is not None else None,
        config=Path(config) if config is not None else None,
        log_file=Path(log_file) if log_file is not None else None,
    )
    if idle_exit is not None:
        target = dataclasses.replace(target, idle_exit=idle_exit)
    if log_level is not None:
        target = dataclasses.replace(target, log_level=log_level)

    def attach() -> pysocket.socket:
        bridge.socket_dir(where, default=default)
        return bridge.attach(target)

    try:
        # Blocking (a file lock, maybe a daemon's start-up): off the event loop.
        conn = await asyncio.to_thread(attach)
    except (bridge.BridgeError, paths.UnsafeDirectory) as exc:
        raise ConnectionError(str(exc)) from exc
    client = Client(await open_connected(conn, f"unix:{where}"))
    return await _start(client, initialize, capabilities, initialization_options)
