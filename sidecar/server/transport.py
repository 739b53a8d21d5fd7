"""Transports: stdio (one client, the default) and a shared daemon on TCP loopback or a 0600
unix socket (any number of clients)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import select
import stat
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import msgspec

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from sidecar.errors import ErrorCode
from sidecar.protocol.envelopes import JSONRPC, ErrorBody, ErrorResponse
from sidecar.protocol.framing import FrameReader, encode_frame
from sidecar.server.app import App
from sidecar.server.connection import Connection
from sidecar.shared_daemon import sockets
from sidecar.shared_daemon.paths import split_address

log = logging.getLogger("sidecar.transport")


class ListenError(ValueError):
    pass


async def run_stdio(app: App) -> int:
    """Serve the process's stdin/stdout until ``exit`` or end of input; returns the exit code.

    Either way every request read before is answered first, and the process ends only once
    stdout has taken every reply: a batch (``serve < requests > replies``) loses nothing.

    Pipes, sockets and terminals go through asyncio's pipe transports. Those refuse regular
    files and cannot poll /dev/null, so such a stdin is read by a thread, and such a stdout
    written with plain blocking writes (a file never blocks for long).
    """
    loop = asyncio.get_running_loop()
    conn = Connection(app)
    # The writer first: a frame already waiting on stdin may need an immediate reply.
    out_fd, in_fd = sys.stdout.fileno(), sys.stdin.fileno()
    for fd in (out_fd, in_fd):
        _widen_pipe(fd)
    if _pollable(out_fd):
        w_transport, _ = await loop.connect_write_pipe(conn.write_side, sys.stdout)
        conn.attach(w_transport, w_transport)
    else:
        writer = _FileWriter(out_fd)
        conn.attach(writer, writer)
    reader = conn.reader()
    r_transport: asyncio.BaseTransport | None = None
    if _pollable(in_fd):
        r_transport, _ = await loop.connect_read_pipe(lambda: reader, sys.stdin)
    else:
        threading.Thread(target=_read_blocking, args=(in_fd, loop, reader), daemon=True).start()
    await conn.closed.wait()
    await conn.flushed.wait()
    if r_transport is not None and not r_transport.is_closing():
        r_transport.close()  # ``exit`` with the client's side still open
    # LSP: ``exit`` without a prior ``shutdown`` ends with status 1.
    return 1 if conn.exit_requested and not conn.protocol.shutting_down else 0


def _pollable(fd: int) -> bool:
    """Whether asyncio's pipe transports (epoll/kqueue) can serve ``fd``."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or (stat.S_ISCHR(mode) and os.isatty(fd))


# Linux's default pipe holds 64 KiB: a 300 KB ``session/context`` reply then leaves in five
# writes, each waiting for the client to read the last (a wake-up and a loop turn on both
# sides). 1 MiB is the unprivileged maximum by default (``/proc/sys/fs/pipe-max-size``); the
# kernel allocates its pages only as data waits, so an idle pipe costs nothing more.
PIPE_BYTES = 1 << 20


def _widen_pipe(fd: int) -> None:
    """Make a pipe on ``fd`` hold ``PIPE_BYTES`` (best effort: not a pipe, not Linux, or over
    the user's pipe quota leaves it as it is)."""
    setsz = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    if setsz is None:
        return
    with contextlib.suppress(OSError):
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, setsz, PIPE_BYTES)


def _read_blocking(fd: int, loop: asyncio.AbstractEventLoop, reader: FrameReader) -> None:
    """Feed ``reader`` from a blocking ``fd`` on this thread; tell it where the input ends."""
    try:
        while chunk := os.read(fd, 1 << 16):
            loop.call_soon_threadsafe(reader.data_received, chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(reader.input_ended)


class _FileWriter(asyncio.BaseTransport):
    """The write side of stdio when stdout is a regular file: blocking, complete writes."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self._closing = False

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True


class _Refusals:
    """Connections over ``server.maxConnections``: told why in one error frame, then closed.
    Logged once a second at most, with the count, so a flood cannot flood the log too."""

    def __init__(self) -> None:
        self._count = 0
        self._logged_at = -1.0

    def refuse(self, limit: int) -> asyncio.Protocol:
        self._count += 1
        now = asyncio.get_running_loop().time()
        if now - self._logged_at >= 1.0:
            log.warning(
                "refused %d connection(s): %d already open (config server.maxConnections)",
                self._count,
                limit,
            )
            self._count, self._logged_at = 0, now
        return _Refused(limit)


class _Refused(asyncio.Protocol):
    def __init__(self, limit: int) -> None:
        self._limit = limit

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        message = f"too many connections: {self._limit} already open (config server.maxConnections)"
        body = msgspec.json.encode(ErrorResponse(JSONRPC, None, ErrorBody(ErrorCode.BUSY, message)))
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(encode_frame(body))
        transport.close()


def parse_listen(spec: str) -> tuple[str, str, int]:
    """``tcp://127.0.0.1:PORT`` or ``unix:PATH`` -> (kind, host-or-path, port).

    A TCP host must be a loopback IP literal (127.0.0.0/8, ::1) or ``localhost``: anything
    else would be resolved by DNS at bind (``127.0.0.1.nip.io`` is a public name), so it is
    refused here, before anything is opened, as is a port outside 1-65535.
    """
    usage = f"--listen takes tcp://127.0.0.1:PORT or unix:PATH, not {spec!r}"
    kind, host, port = split_address(spec, ListenError, usage)
    if kind == "unix":
        return kind, host, 0
    if port is None:
        raise ListenError(f"--listen {spec!r}: no port (tcp://127.0.0.1:PORT)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host != "localhost":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ListenError(
                f"--listen {spec!r}: refusing to listen on {host!r}: only a loopback IP "
                "address (127.0.0.0/8, ::1) or localhost"
            )
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise ListenError(f"--listen {spec!r}: the port must be a number from 1 to 65535")
    return "tcp", host, int(port)


class Listener:
    """A bound shared-daemon socket and what closing it must undo.

    A unix socket is removed on close, under the path's lock and only while it is still the
    one this daemon bound (a successor may already have replaced it).
    """

    def __init__(self, server: asyncio.Server, kind: str, path: Path | None) -> None:
        self.server = server
        self.kind = kind
        self.path = path
        self._inode = path.stat().st_ino if path is not None else None

    @property
    def address(self) -> str:
        if self.path is not None:
            return f"unix:{self.path}"
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"tcp://{host}:{port}"

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1]) if self.kind == "tcp" else 0

    def pending(self) -> bool:
        """Whether a connection waits in the backlog, not yet accepted."""
        fds = [s.fileno() for s in self.server.sockets if s.fileno() >= 0]
        return bool(fds) and bool(select.select(fds, [], [], 0)[0])

    def close(self) -> None:
        """Stop accepting; established connections are left to their owners."""
        self.server.close()

    def remove_socket(self, *, locked: bool = False) -> None:
        """Unlink our socket file (blocking: takes the path's lock unless ``locked``)."""
        if self.path is None:
            return
        if not locked:
            with sockets.lock(self.path):
                self.remove_socket(locked=True)
            return
        with contextlib.suppress(FileNotFoundError):
            if self.path.stat().st_ino == self._inode:
                self.path.unlink()
        self._inode = None


async def serve_socket(
    app: App,
    spec: str,
    *,
    on_connection: Callable[[Connection], None] | None = None,
    locked: bool = False,
) -> Listener:
    """Listen on ``spec``; ``locked``: the caller already holds the unix path's lock."""
    kind, where, port = parse_listen(spec)
    loop = asyncio.get_running_loop()
    # A TCP listener has a token (any local user can connect): its peers must authenticate.
    needs_auth = app.control is not None and app.control.token is not None
    refusals = _Refusals()

    def factory() -> asyncio.Protocol:
        limits = app.config.current.server
        if len(app.connections) >= limits.max_connections:
            return refusals.refuse(limits.max_connections)
        conn = Connection(app)
        if needs_auth:
            conn.require_auth(limits.auth_timeout)
        if on_connection is not None:
            on_connection(conn)
        return conn.reader(duplex=True)

    if kind == "tcp":
        return Listener(await loop.create_server(factory, where, port), "tcp", None)
    path = Path(where)
    path.parent.mkdir(parents=True, exist_ok=True)
    if locked:
        return await _bind_unix(factory, path)
    held = sockets.Lock(path)
    await asyncio.to_thread(held.acquire)
    try:
        return await _bind_unix(factory, path)
    finally:
        held.release()


async def _bind_unix(factory: Callable[[], asyncio.Protocol], path: Path) -> Listener:
    """Bind ``path`` (its lock held): refuse a live daemon's socket, replace a stale one."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(mode):
            raise ListenError(f"{path} exists and is not a socket; not touching it")
        if sockets.probe(path):
            raise ListenError(
                f"a daemon is already listening on {path}; "
                "use `compaction-sidecar connect` to share it, or `stop` it first"
            )
        path.unlink()  # a stale socket: nobody accepts on it any more
    old = os.umask(0o177)  # the socket is created 0600: only this user may connect
    try:
        server = await asyncio.get_running_loop().create_unix_server(factory, str(path))
    finally:
        os.umask(old)
    with contextlib.suppress(OSError):
        path.chmod(0o600)
    return Listener(server, "unix", path)
