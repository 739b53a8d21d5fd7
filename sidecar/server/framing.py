"""LSP base-protocol framing (``Content-Length`` headers) as an ``asyncio.Protocol``.

pygls' stdio reader pays three thread hops per message; parsing frames in ``data_received``
on the event loop is what lets pipelined ingest keep up. A frame over the size cap is skipped
as it streams in, never buffered whole; stray bytes before a header are skipped (reported
unless they are blank lines) and a malformed header is reported, reading resuming at the next
``Content-Length``, so one bad frame never ends or desynchronises the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

MAX_HEADER_BYTES = 64 * 1024


class FrameError(Exception):
    """A framing problem to report to the peer; ``code`` is the JSON-RPC error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def encode_frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n%b" % (len(body), body)


class FrameReader(asyncio.Protocol):
    def __init__(
        self,
        on_frame: Callable[[bytes], None],
        on_error: Callable[[FrameError], None],
        on_close: Callable[[], None],
        max_frame_bytes: Callable[[], int],
        on_open: Callable[[asyncio.BaseTransport], None] | None = None,
        on_read_end: Callable[[], None] | None = None,
    ) -> None:
        self._on_open = on_open
        self._on_read_end = on_read_end
        self._on_frame = on_frame
        self._on_error = on_error
        self._on_close = on_close
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._need = -1  # body bytes still expected; -1 = reading headers
        self._discard = 0  # bytes of an oversized body still to drop
        self._transport: asyncio.BaseTransport | None = None
        # Backpressure: while the peer has not read enough of what we sent, its next frames
        # wait unread (``held``), so its own requests cannot grow what we buffer for it.
        self.should_hold: Callable[[], bool] = lambda: False
        self.held = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        if self._on_open is not None:
            self._on_open(transport)

    def data_received(self, data: bytes) -> None:
        if self._discard:
            if len(data) <= self._discard:
                self._discard -= len(data)
                return
            data = data[self._discard :]
            self._discard = 0
        self._buf += data
        self._process()

    def _process(self) -> None:
        while not self.held:
            if self.should_hold():
                self._hold()
                break
            if not self._step():
                break
        if self._on_read_end is not None:
            self._on_read_end()

    def _hold(self) -> None:
        self.held = True
        pause = getattr(self._transport, "pause_reading", None)
        if pause is not None and not self._transport.is_closing():  # type: ignore[union-attr]
            pause()

    def release(self) -> None:
        """The peer caught up: read its waiting frames, then from the transport again."""
        if not self.held:
            return
        self.held = False
        resume = getattr(self._transport, "resume_reading", None)
        if resume is not None and not self._transport.is_closing():  # type: ignore[union-attr]
            resume()
        self._process()

    def resume_writing(self) -> None:  # a duplex transport drained below its low-water mark
        self.release()

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_close()

    def _step(self) -> bool:
        buf = self._buf
        if self._need < 0:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEADER_BYTES:
                    buf.clear()
                    self._on_error(FrameError(-32700, "header block exceeds 64 KiB"))
                return False
            header = bytes(buf[:end])
            del buf[: end + 4]
            try:
                length = _content_length(header)
            except FrameError as err:
                found = _resync(header)
                if found is None:
                    if header.strip():
                        self._on_error(err)
                    return True
                if header[: header.lower().find(b"content-length")].strip():
                    self._on_error(
                        FrameError(-32700, f"skipped junk before a header: {header[:80]!r}")
                    )
                length = found
            cap = self.max_frame_bytes()
            if length > cap:
                self._on_error(
                    FrameError(
                        -32600,
                        f"frame of {length} bytes exceeds the limit of {cap} bytes "
                        "(config server.maxFrameBytes)",
                    )
                )
                drop = min(length, len(buf))
                del buf[:drop]
                self._discard = length - drop
                return bool(buf) and not self._discard
            self._need = length
        if len(buf) < self._need:
            return False
        body = bytes(buf[: self._need])
        del buf[: self._need]
        self._need = -1
        self._on_frame(body)
        return True


def _resync(header: bytes) -> int | None:
    """The length of a frame whose header block starts with stray bytes (a lone ``\\r\\n``
    between frames, or junk): parse again from its last ``Content-Length``, so one stray byte
    does not desynchronise the stream for good. ``None`` when there is none to be found."""
    at = header.lower().rfind(b"content-length")
    if at < 0:
        return None
    try:
        return _content_length(header[at:])
    except FrameError:
        return None


def _content_length(header: bytes) -> int:
    # The usual header block is exactly one well-formed line.
    if header.startswith(b"Content-Length: ") and header[16:].isdigit():
        return int(header[16:])
    length: int | None = None
    for line in header.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if not sep:
            raise FrameError(-32700, f"malformed header line {line[:80]!r}")
        if name.strip().lower() == b"content-length":
            text = value.strip()
            if not text.isdigit():
                raise FrameError(-32700, f"Content-Length is not a non-negative integer: {text!r}")
            length = int(text)
    if length is None:
        raise FrameError(-32700, "missing Content-Length header")
    return length
