"""LSP base-protocol framing (``Content-Length`` headers), for the daemon and its clients.

``FrameParser`` is the one parser (sans I/O: bytes in, frame bodies or ``FrameError`` out):
a frame over the size cap is skipped as it streams in, never buffered whole; stray bytes
before a header are skipped (reported unless they are blank lines) and a malformed header is
reported, reading resuming at the next ``Content-Length``, so one bad frame never ends or
desynchronises a connection. Two drivers share it: ``FrameReader``, the daemon's
``asyncio.Protocol`` (pygls' stdio reader pays three thread hops per message; parsing frames
in ``data_received`` on the event loop is what lets pipelined ingest keep up), and
``StreamFrames``, the clients' reader over an ``asyncio.StreamReader``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

from sidecar.protocol.codes import ErrorCode

MAX_HEADER_BYTES = 64 * 1024
READ_CHUNK = 1 << 16


class FrameError(Exception):
    """A framing problem to report to the peer; ``code`` is the JSON-RPC error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def frame_header(length: int) -> bytes:
    """The header of a frame whose body is ``length`` bytes."""
    return b"Content-Length: %d\r\n\r\n" % length


def encode_frame(body: bytes) -> bytes:
    return frame_header(len(body)) + body


#: A frame's body: ``bytes``, or the ``bytearray`` a large body was read into.
Body = bytes | bytearray

#: A frame body this large is read into a buffer of its own size (``FrameParser``).
DIRECT_BYTES = 1 << 20


def _no_cap() -> int:
    return sys.maxsize


class FrameParser:
    """Feed bytes with ``feed``; take frames with ``next`` until it returns ``None``."""

    __slots__ = ("_body", "_buf", "_discard", "_filled", "_length", "_need", "max_frame_bytes")

    def __init__(self, max_frame_bytes: Callable[[], int] = _no_cap) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._length = -1  # a parsed header's length, not yet checked against the cap
        self._need = -1  # body bytes still expected; -1 = reading headers
        self._discard = 0  # bytes of an oversized body still to drop
        # A large body (``DIRECT_BYTES``), once half of it is here, is read straight into a
        # buffer of its size, which is then the frame: no buffer that grows by copies to the
        # end, no copy handed over.
        self._body: bytearray | None = None
        self._filled = 0

    def feed(self, data: bytes) -> None:
        if self._discard:
            if len(data) <= self._discard:
                self._discard -= len(data)
                return
            data = data[self._discard :]
            self._discard = 0
        body = self._body
        if body is not None and self._filled < len(body):
            take = min(len(data), len(body) - self._filled)
            body[self._filled : self._filled + take] = memoryview(data)[:take]
            self._filled += take
            if take == len(data):
                return
            data = data[take:]
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes held (an oversized body is dropped as it streams in, never held)."""
        return len(self._buf) + self._filled

    @property
    def inside_frame(self) -> str | None:
        """What a stream ending now would cut short (``None``: it ends between frames)."""
        if self._need >= 0:
            return f"a {self._need}-byte frame body"
        if self._discard:
            return "an oversized frame"
        if self._buf.strip():
            return "a header block"
        return None

    def next(self) -> Body | FrameError | None:
        """The next frame body, a ``FrameError`` to report, or ``None``: more bytes needed."""
        buf = self._buf
        while True:
            if self._need < 0:
                if self._length < 0:
                    end = buf.find(b"\r\n\r\n")
                    if end < 0:
                        if len(buf) > MAX_HEADER_BYTES:
                            buf.clear()
                            return FrameError(ErrorCode.PARSE_ERROR, "header block exceeds 64 KiB")
                        return None
                    header = bytes(buf[:end])
                    del buf[: end + 4]
                    try:
                        self._length = _content_length(header)
                    except FrameError as err:
                        found = _resync(header)
                        if found is None:
                            if header.strip():
                                return err
                            continue
                        self._length = found
                        if header[: header.lower().find(b"content-length")].strip():
                            junk = header[:80]
                            return FrameError(
                                ErrorCode.PARSE_ERROR, f"skipped junk before a header: {junk!r}"
                            )
                length, self._length = self._length, -1
                cap = self.max_frame_bytes()
                if length > cap:
                    drop = min(length, len(buf))
                    del buf[:drop]
                    self._discard = length - drop
                    return FrameError(
                        ErrorCode.INVALID_REQUEST,
                        f"frame of {length} bytes exceeds the limit of {cap} bytes "
                        "(config server.maxFrameBytes)",
                    )
                self._need = length
            need = self._need
            if self._body is None and need >= DIRECT_BYTES and need // 2 <= len(buf) < need:
                # Half the body is here: the rest is read straight into a buffer of its size.
                # (Not at the header: a header alone, however long the body it announces,
                # makes the daemon hold nothing.)
                self._body = bytearray(need)
                self._filled = len(buf)
                self._body[: self._filled] = buf
                buf = self._buf = bytearray()
            if self._body is not None:
                if self._filled < len(self._body):
                    return None
                direct, self._body, self._filled, self._need = self._body, None, 0, -1
                return direct
            if len(buf) < self._need:
                return None
            if len(buf) == self._need:
                # The usual end of a large frame: its body is all there is. A new buffer
                # then, so this one (as large as the frame) is freed with its copy made.
                body = bytes(buf)
                self._buf = bytearray()
            else:
                with memoryview(buf) as view:  # no slice copy besides the body itself
                    body = bytes(view[: self._need])
                del buf[: self._need]
            self._need = -1
            return body


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
            raise FrameError(ErrorCode.PARSE_ERROR, f"malformed header line {line[:80]!r}")
        if name.strip().lower() == b"content-length":
            text = value.strip()
            if not text.isdigit():
                raise FrameError(
                    ErrorCode.PARSE_ERROR,
                    f"Content-Length is not a non-negative integer: {text!r}",
                )
            length = int(text)
    if length is None:
        raise FrameError(ErrorCode.PARSE_ERROR, "missing Content-Length header")
    return length


class FrameReader(asyncio.Protocol):
    """The daemon's side: frames parsed in ``data_received``, with backpressure.

    While the peer has not read enough of what we sent (``should_hold``), its next frames wait
    unread (``held``), so its own requests cannot grow what we buffer for it.

    End of input (EOF on a pipe or file, a socket's peer shutting its write side) is not the
    end of the connection: ``on_eof`` is called once every frame read before it has been
    dispatched (held frames included), and the caller answers them before closing. A socket
    stays open for our replies (``eof_received`` returns true); on stdio, where the read side
    is a transport of its own, its ``connection_lost`` is that end of input too.
    """

    def __init__(
        self,
        on_frame: Callable[[Body], None],
        on_error: Callable[[FrameError], None],
        on_close: Callable[[], None],
        max_frame_bytes: Callable[[], int],
        on_open: Callable[[asyncio.BaseTransport], None] | None = None,
        on_read_end: Callable[[], None] | None = None,
        on_eof: Callable[[], None] | None = None,
        *,
        duplex: bool = False,
    ) -> None:
        self._on_open = on_open
        self._on_eof = on_eof
        self._duplex = duplex
        self._eof = False
        self._ended = False
        self._on_read_end = on_read_end
        self._on_frame = on_frame
        self._on_error = on_error
        self._on_close = on_close
        self._parser = FrameParser(max_frame_bytes)
        self._transport: asyncio.BaseTransport | None = None
        self.should_hold: Callable[[], bool] = lambda: False
        # A duplex transport drained: what is held for the peer can go on (``feed``).
        self.on_writable: Callable[[], None] = lambda: None
        self.held = False

    @property
    def buffered(self) -> int:
        return self._parser.buffered

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        if self._on_open is not None:
            self._on_open(transport)

    def data_received(self, data: bytes) -> None:
        self._parser.feed(data)
        self._process()

    def _process(self) -> None:
        parser = self._parser
        while not self.held:
            if self.should_hold():
                self._hold()
                break
            item = parser.next()
            if item is None:
                break
            if isinstance(item, FrameError):
                self._on_error(item)
            else:
                self._on_frame(item)
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
        self._end_if_read()

    def resume_writing(self) -> None:  # a duplex transport drained below its low-water mark
        self.on_writable()
        self.release()

    def eof_received(self) -> bool | None:
        self.input_ended()
        return True  # a socket stays open (half-closed) for the replies still to come

    def input_ended(self) -> None:
        """No more bytes will come; ``on_eof`` once the frames already read are dispatched."""
        self._eof = True
        self._end_if_read()

    def _end_if_read(self) -> None:
        if self._eof and not self.held and not self._ended:
            self._ended = True
            cut = self._parser.inside_frame
            if cut is not None:
                self._on_error(FrameError(ErrorCode.PARSE_ERROR, f"input ended inside {cut}"))
            if self._on_eof is not None:
                self._on_eof()
            else:
                self._on_close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._duplex or self._on_eof is None:
            self._on_close()  # a socket: the peer is gone (or we closed it)
        else:
            self.input_ended()  # stdio's read side: the input ended (or cannot be read)


class StreamFrames:
    """A client's side: frames from an ``asyncio.StreamReader`` (a pipe or a socket).

    Problems the parser reports go to ``on_error`` (by default raised) and reading goes on;
    a stream that ends inside a frame raises ``FrameError``.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        on_error: Callable[[FrameError], None] | None = None,
    ) -> None:
        self._reader = reader
        self._on_error = on_error
        self._parser = FrameParser()

    async def next(self) -> Body | None:
        """The next frame body, or ``None`` at a clean end of stream between frames."""
        parser = self._parser
        while True:
            item = parser.next()
            if item is None:
                data = await self._reader.read(READ_CHUNK)
                if not data:
                    cut = parser.inside_frame
                    if cut is not None:
                        raise FrameError(ErrorCode.PARSE_ERROR, f"stream ended inside {cut}")
                    return None
                parser.feed(data)
            elif isinstance(item, FrameError):
                if self._on_error is None:
                    raise item
                self._on_error(item)
            else:
                return item
