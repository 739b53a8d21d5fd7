"""Transports: stdio (one client, the default) and a shared daemon on TCP loopback or a 0600
unix socket (any number of clients)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from pathlib import Path

from sidecar.server.app import App
from sidecar.server.connection import Connection


class ListenError(ValueError):
    pass


async def run_stdio(app: App) -> int:
    """Serve the process's stdin/stdout until EOF or ``exit``; returns the exit code."""
    loop = asyncio.get_running_loop()
    conn = Connection(app)
    # The writer first: a frame already waiting on stdin may need an immediate reply.
    w_transport, _ = await loop.connect_write_pipe(conn.write_side, sys.stdout)
    conn.attach(w_transport, w_transport)
    await loop.connect_read_pipe(conn.reader, sys.stdin)
    await conn.closed.wait()
    # LSP: ``exit`` without a prior ``shutdown`` ends with status 1.
    return 1 if conn.exit_requested and not conn.protocol.shutting_down else 0


def parse_listen(spec: str) -> tuple[str, str, int]:
    """``tcp://127.0.0.1:PORT`` or ``unix:PATH`` -> (kind, host-or-path, port)."""
    if spec.startswith("unix:"):
        path = spec[len("unix:") :]
        if not path:
            raise ListenError("unix: needs a path")
        return "unix", path, 0
    if spec.startswith("tcp://"):
        host, _, port = spec[len("tcp://") :].rpartition(":")
        host = host.strip("[]")
        if host not in ("127.0.0.1", "localhost", "::1") and not host.startswith("127."):
            raise ListenError(f"refusing to listen on {host!r}: only loopback addresses")
        if not port.isdigit():
            raise ListenError(f"bad port in {spec!r}")
        return "tcp", host, int(port)
    raise ListenError(f"--listen takes tcp://127.0.0.1:PORT or unix:PATH, not {spec!r}")


async def serve_socket(app: App, spec: str) -> asyncio.Server:
    kind, where, port = parse_listen(spec)
    loop = asyncio.get_running_loop()

    def factory() -> asyncio.Protocol:
        return Connection(app).reader(duplex=True)

    if kind == "tcp":
        return await loop.create_server(factory, where, port)
    path = Path(where)
    if path.exists() and stat.S_ISSOCK(path.stat().st_mode):
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    old = os.umask(0o177)  # the socket is created 0600: only this user may connect
    try:
        server = await loop.create_unix_server(factory, str(path))
    finally:
        os.umask(old)
    with contextlib.suppress(OSError):
        path.chmod(0o600)
    return server
