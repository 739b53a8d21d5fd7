"""The ways to reach a daemon: a spawned one's stdio pipes, or a shared one's socket.

Both are plain ``asyncio.StreamReader``/``StreamWriter`` pairs, so one ``StreamTransport``
serves all three transports; the framing on them is the daemon's own
(``sidecar.protocol.framing``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from sidecar.shared_daemon.paths import split_address

#: Read-buffer limit of the streams.
STREAM_LIMIT = 1 << 20


@dataclasses.dataclass(eq=False)
class StreamTransport:
    """One duplex byte stream to the daemon, with the daemon's process when we spawned it.

    ``stderr_file`` is where a spawned daemon writes its stderr (``stderr_text()``).
    """

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    _: dataclasses.KW_ONLY
    process: asyncio.subprocess.Process | None = None
    stderr_file: IO[bytes] | None = None
    address: str | None = None
    _stderr_final: str = dataclasses.field(default="", init=False)

    def write(self, data: bytes) -> None:
        if self.writer.is_closing():
            raise ConnectionResetError("the connection to the daemon is closed")
        self.writer.write(data)

    async def drain(self) -> None:
        await self.writer.drain()

    def is_closing(self) -> bool:
        return self.writer.is_closing()

    async def close_write(self) -> None:
        """Stop writing: EOF on the daemon's stdin, or close the socket."""
        if not self.writer.is_closing():
            self.writer.close()
        with contextlib.suppress(ConnectionError, BrokenPipeError):
            await self.writer.wait_closed()

    def stderr_text(self) -> str:
        """Everything the spawned daemon wrote to stderr so far ("" for sockets)."""
        f = self.stderr_file
        if f is None or f.closed:
            return self._stderr_final
        # pread: the daemon shares this file's offset, which must not move under it.
        fd = f.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace")

    def release(self) -> None:
        """Close the stderr file, keeping its text for ``stderr_text()``."""
        if self.stderr_file is not None and not self.stderr_file.closed:
            self._stderr_final = self.stderr_text()
            self.stderr_file.close()


def daemon_command(db_path: str | os.PathLike[str], extra_args: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "sidecar", "serve", "--db", os.fspath(db_path), *extra_args]


def merged_env(env: Mapping[str, str | None] | None) -> dict[str, str] | None:
    """``os.environ`` with ``env`` applied on top; a ``None`` value removes a variable."""
    if env is None:
        return None
    out = dict(os.environ)
    for key, value in env.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


async def spawn_stdio(
    db_path: str | os.PathLike[str],
    extra_args: Sequence[str] = (),
    env: Mapping[str, str | None] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> StreamTransport:
    """Start ``python -m sidecar serve --db PATH`` on pipes.

    stderr goes to an anonymous temporary file, so a chatty daemon can never block on a full
    pipe, and the text stays readable through ``stderr_text()``.
    """
    stderr_file = tempfile.TemporaryFile(prefix="sidecar-stderr-")
    try:
        process = await asyncio.create_subprocess_exec(
            *daemon_command(db_path, extra_args),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr_file,
            env=merged_env(env),
            cwd=cwd,
            limit=STREAM_LIMIT,
        )
    except BaseException:
        stderr_file.close()
        raise
    assert process.stdin is not None and process.stdout is not None
    return StreamTransport(process.stdout, process.stdin, process=process, stderr_file=stderr_file)


def parse_address(address: str) -> tuple[str, str, int]:
    """``tcp://HOST:PORT`` or ``unix:PATH`` -> (kind, host-or-path, port)."""
    usage = f"address must be tcp://HOST:PORT or unix:PATH, not {address!r}"
    kind, where, port = split_address(address, ValueError, usage)
    if kind == "unix":
        return kind, where, 0
    if not where or port is None or not port.isdigit():
        raise ValueError(f"bad tcp address {address!r}")
    return kind, where.strip("[]"), int(port)


async def open_connected(conn: socket.socket, address: str) -> StreamTransport:
    """Streams over a unix socket already connected (``connect_shared``)."""
    reader, writer = await asyncio.open_unix_connection(sock=conn, limit=STREAM_LIMIT)
    return StreamTransport(reader, writer, address=address)


async def open_socket(address: str) -> StreamTransport:
    kind, where, port = parse_address(address)
    if kind == "unix":
        reader, writer = await asyncio.open_unix_connection(str(Path(where)), limit=STREAM_LIMIT)
    else:
        reader, writer = await asyncio.open_connection(where, port, limit=STREAM_LIMIT)
    return StreamTransport(reader, writer, address=address)
