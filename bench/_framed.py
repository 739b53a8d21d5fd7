"""The daemon's ``Content-Length`` framing on a stdio pipe, for the bench's baseline servers.

``_echo_server.py`` and ``_replay_server.py`` measure what is left of a request's cost without
the daemon: both find each frame's end here and answer it in ``on_frame``; what one answer
costs is theirs to decide. Both run as scripts, so this module is imported from their folder.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable


def frame(body: bytes) -> bytes:
    """``body`` in the daemon's framing, as the baseline servers answer."""
    return b"Content-Length: %d\r\n\r\n%b" % (len(body), body)


class FramedProtocol(asyncio.Protocol):
    """Splits stdin into frames; ``on_frame`` returns the bytes to write back (or ``b""``)."""

    def __init__(self, out: asyncio.WriteTransport, done: asyncio.Future[None]) -> None:
        self._out = out
        self._done = done
        self._buf = bytearray()
        self._need = -1

    def on_frame(self, body: bytes) -> bytes:
        raise NotImplementedError

    def finish(self) -> None:
        if not self._done.done():
            self._done.set_result(None)

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        out: list[bytes] = []
        while True:
            if self._need < 0:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                length = -1
                for line in bytes(buf[:end]).split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                del buf[: end + 4]
                if length < 0:
                    continue
                self._need = length
            if len(buf) < self._need:
                break
            body = bytes(buf[: self._need])
            del buf[: self._need]
            self._need = -1
            out.append(self.on_frame(body))
        if out:
            self.read_done()
            self._out.write(b"".join(out))

    def read_done(self) -> None:
        """Called after the frames of one read were handled, before their answers go out."""

    def connection_lost(self, exc: Exception | None) -> None:
        self.finish()


async def serve_stdio(
    protocol: Callable[[asyncio.WriteTransport, asyncio.Future[None]], FramedProtocol],
) -> None:
    """Serves stdin/stdout with ``protocol`` until it finishes (``exit`` or end of input)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    out, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout.buffer)
    await loop.connect_read_pipe(lambda: protocol(out, done), sys.stdin.buffer)  # type: ignore[arg-type]
    await done
