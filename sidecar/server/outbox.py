"""What a connection sends, on its way to the peer: frames batched into few writes, large
bodies handed over as the peer reads them, a stalled reader cut off, backpressure on a peer
that sends faster than it reads.

The protocol (``sidecar.server.protocol``) encodes frames; an ``Outbox`` only moves their bytes
and keeps the daemon's memory bounded: a reply is never copied into a frame beside its body
(``_UNCOPIED``), and what a peer leaves unread past ``server.maxOutgoingBytes`` drops it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from sidecar.model.buffers import Buffer
from sidecar.model.cpu import charged
from sidecar.protocol.framing import frame_header

log = logging.getLogger("sidecar.rpc")


class Outbox:
    """One connection's outgoing bytes; ``writer`` is its transport (None: nowhere to send)."""

    def __init__(self) -> None:
        self.writer: Any = None
        # Bytes sent and still unread by the peer (in the transport's buffer after a flush)
        # past which it is a stalled reader: ``on_stalled`` drops the connection so the
        # daemon's memory stays bounded. ``None``: no limit. Below ``low_water`` again,
        # ``on_drained`` lets a reader held for backpressure go on.
        self.max_outgoing: Callable[[], int | None] = lambda: None
        self.on_stalled: Callable[[], None] = lambda: None
        self.on_drained: Callable[[], None] = lambda: None
        self._out: list[Buffer] = []
        self._out_bytes = 0
        # Large frames (``_LARGE`` bytes or more) in the batch being queued, as (offset in
        # the batch, length, is a reply), and those handed to the transport and maybe still
        # unread, as (start, end, is a reply) in ``_sent`` bytes since the connection began.
        self._large_out: list[tuple[int, int, bool]] = []
        self._large: deque[tuple[int, int, bool]] = deque()
        self._sent = 0
        # What is sent but not yet handed to the transport: a body of ``_UNCOPIED`` bytes or
        # more, and what queued behind it. The transport gets it ``FEED_BYTES`` at a time as
        # the peer reads (``feed``): given at once, it would copy all the rest of the body
        # into its own buffer, a second copy of a large reply while the peer reads it.
        self._held_out: deque[memoryview] = deque()
        self.held_bytes = 0
        self._hold_at = _NO_LIMIT  # set at each flush (``backlog_over_hold``)
        self._flush_scheduled = False

    def flush_now(self) -> None:
        """Write what is queued now, held output included (closing: the loop may not run the
        scheduled flush, and the transport drains only what it was given)."""
        if self._out:
            self.flush()
        try:
            self.feed(everything=True)
        except (BrokenPipeError, ConnectionError, RuntimeError):
            self.drop()

    @charged("encode")
    def write(self, body: list[Buffer], *, reply: bool = False, length: int = -1) -> None:
        """Queue a frame whose body is ``body``'s buffers (``length`` bytes, when the caller
        knows); what is queued in one loop iteration goes out in one write, except that a
        buffer of ``_UNCOPIED`` bytes or more is written on its own: joined to the rest, it
        would be one more copy of a reply beside its result and its body (and a ``Shared``
        one, a copy per frame that carries it)."""
        if self.writer is None:
            return
        if length < 0:
            length = size_of(body)
        header = frame_header(length)
        size = len(header) + length
        if size >= _LARGE:
            self._large_out.append((self._out_bytes, size, reply))
        if length < _UNCOPIED:  # no piece that large: one buffer, as most frames are
            self._out.append(b"".join((header, *body)))
        else:
            self._out.extend(_coalesced([header, *body]))
        self._out_bytes += size
        if not self._flush_scheduled:
            self._flush_scheduled = True
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no running loop (unit tests): write at once
                self.flush()

    def flush(self) -> None:
        self._flush_scheduled = False
        writer, out = self.writer, self._out
        if writer is None or not out:
            return
        base = self._sent
        if self._large_out:
            for offset, length, reply in self._large_out:
                self._large.append((base + offset, base + offset + length, reply))
            self._large_out = []
        self._sent = base + self._out_bytes
        self._out, self._out_bytes = [], 0
        held = self._held_out
        try:
            for piece in _coalesced(out):
                if held or len(piece) >= _UNCOPIED:
                    held.append(memoryview(piece))
                    self.held_bytes += len(piece)
                else:
                    writer.write(piece)  # any bytes-like object
            if held:
                self.feed()
        except (BrokenPipeError, ConnectionError, RuntimeError):
            log.info("peer is gone; dropping outgoing messages")
            self.drop()
            return
        cap = self.max_outgoing()
        unread = self._unread(writer)
        large = self._large
        if large:  # forget the large frames the peer has read
            done = self._sent - unread
            while large and large[0][1] <= done:
                large.popleft()
        if cap is not None and unread > cap and unread - self._being_read(unread) > cap:
            # What one loop iteration queues is bounded by what the peer sent in it; what
            # piles up unread across iterations is a stalled reader.
            log.warning(
                "a client stopped reading: %d bytes wait for it (limit %d, config "
                "server.maxOutgoingBytes); disconnecting it",
                unread,
                cap,
            )
            self.writer = None  # nothing more is queued for a peer that is being dropped
            self.drop()
            self.on_stalled()
            return
        low = self.low_water()
        # Until the next flush, more than this queued here means the peer is held.
        self._hold_at = 2 * low - unread
        if unread <= low:
            self.on_drained()

    def feed(self, everything: bool = False) -> None:
        """Hand the transport what is held here (``_held_out``) while it holds at most
        ``FEED_BYTES`` unread, so it pauses us and ``feed`` is called again once the peer has
        read (``resume_writing``); ``everything``: all of it now (closing)."""
        writer, held = self.writer, self._held_out
        while held and writer is not None and (everything or _buffered(writer) <= FEED_BYTES):
            piece = held[0]
            if len(piece) <= FEED_BYTES or everything:
                held.popleft()
            else:
                held[0], piece = piece[FEED_BYTES:], piece[:FEED_BYTES]
            self.held_bytes -= len(piece)
            writer.write(piece)  # asyncio's transports take any bytes-like object

    def drop(self) -> None:
        self._held_out.clear()
        self.held_bytes = 0

    def _unread(self, writer: Any) -> int:
        """Bytes sent that the peer has not read: the transport's and those held here."""
        return _buffered(writer) + self.held_bytes

    def _being_read(self, unread: int) -> int:
        """The unread bytes the stalled-reader rule does not count: the rest of the frame the
        peer is reading now, and of every large reply. A reply is at most
        ``server.maxReplyBytes`` and answers the peer's own request, whose next requests wait
        unread meanwhile (backpressure); so a client slowly reading a large reply is never
        taken for one that stopped reading. Notifications it does not read still count."""
        done = self._sent - unread  # what the peer has read so far
        exempt = 0
        for start, end, reply in self._large:
            if end <= done:
                continue
            if reply or start <= done:
                exempt += end - max(start, done)
        return exempt

    def backlog_over_hold(self) -> bool:
        """Should the peer's next frame wait (backpressure)? Asked before every frame, so the
        common answer is two attribute reads; the threshold is set at each flush from the
        transport's backlog, and checked against the transport again before a "yes"."""
        if self._out_bytes <= self._hold_at:
            return False
        # The threshold may be stale (the transport drained since the flush): ask it.
        unread = self._unread(self.writer) if self.writer is not None else 0
        self._hold_at = 2 * self.low_water() - unread
        return self._out_bytes > self._hold_at

    def low_water(self) -> int:
        """Below this backlog a peer held for backpressure is read again."""
        cap = self.max_outgoing()
        return _NO_LIMIT if cap is None else cap // 8


_NO_LIMIT = 1 << 62
# Frames at least this large are tracked for the stalled-reader rule (``_being_read``); a
# smaller one the peer is in the middle of is within any ``server.maxOutgoingBytes``.
_LARGE = 4096


# A body this large is written after its header instead of being copied into one frame, and
# handed to the transport ``FEED_BYTES`` at a time as the peer reads it (``feed``).
_UNCOPIED = 1 << 20
FEED_BYTES = 1 << 20


def size_of(body: list[Buffer]) -> int:
    return sum(map(len, body))


def _coalesced(out: list[Buffer]) -> list[Buffer]:
    """``out`` in as few writes as possible, none copying a body of ``_UNCOPIED`` bytes."""
    pieces: list[Buffer] = []
    run: list[Buffer] = []
    for piece in out:
        if len(piece) < _UNCOPIED:
            run.append(piece)
            continue
        if run:
            pieces.append(run[0] if len(run) == 1 else b"".join(run))
            run = []
        pieces.append(piece)
    if run:
        pieces.append(run[0] if len(run) == 1 else b"".join(run))
    return pieces


def _buffered(writer: Any) -> int:
    """Bytes the transport holds for a peer that has not read them yet."""
    size = getattr(writer, "get_write_buffer_size", None)
    return int(size()) if size is not None else 0
