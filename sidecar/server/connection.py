"""One client connection: its protocol bound to the daemon's shared parts.

Each connection (the stdio peer, or each socket client of a shared daemon) has its own
protocol state — initialization, capabilities, in-flight requests — while the store, the
engine and the subscriptions live once in ``App`` (which this module never imports: it takes
the ``Shared`` parts). A ``Connection`` is the ``Context`` its handlers get.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any, Protocol, TypeVar

import msgspec

from sidecar.engine.service import Engine
from sidecar.model.rpc import ClientCapabilities, Event
from sidecar.protocol.framing import FrameError, FrameReader
from sidecar.protocol.methods import NOTIFICATION_OF
from sidecar.server.context import Control
from sidecar.server.hub import Hub
from sidecar.server.outbox import FEED_BYTES
from sidecar.server.protocol import SidecarProtocol, Starting, new_protocol
from sidecar.server.settings import ConfigManager
from sidecar.store import Store

log = logging.getLogger("sidecar.connection")
T = TypeVar("T")

_numbers = itertools.count(1)

#: The largest frame a TCP connection may send before it has authenticated (an
#: ``initialize`` fits with room to spare).
PRE_AUTH_FRAME_BYTES = 64 * 1024


class Shared(Protocol):
    """The daemon's parts every connection uses (``App`` has them)."""

    store: Store
    config: ConfigManager
    hub: Hub
    engine: Engine
    starting: Starting
    control: Control | None


class Connection:
    def __init__(self, app: Shared) -> None:
        self.app = app
        self.number = next(_numbers)
        self.protocol: SidecarProtocol = new_protocol(self)
        self.protocol.on_exit = self._on_exit
        self.protocol.starting = app.starting
        daemon = app.config  # the limits are the daemon's, never a client's
        self.protocol.max_depth = lambda: daemon.current.server.max_depth
        self.protocol.out.max_outgoing = lambda: daemon.current.server.max_outgoing_bytes
        self.protocol.max_reply = lambda: daemon.current.server.max_reply_bytes
        self.protocol.out.on_stalled = self._on_stalled
        self.config = app.config.for_connection()
        # What handlers use (they never reach through the App): plain attributes, since the
        # ingest path reads them on every request.
        self.engine: Engine = app.engine
        self.store: Store = app.store
        self.hub: Hub = app.hub
        self.capabilities = ClientCapabilities()
        self.closed = asyncio.Event()
        # Set once what was written to the peer has left (stdio: stdout flushed and closed).
        self.flushed = asyncio.Event()
        self.exit_requested = False
        self._ending: asyncio.Future[None] | None = None
        # A TCP connection must authenticate (``initialize`` with the token) first: until it
        # has, its frames are small and its time is limited (``require_auth``).
        self.needs_auth = False
        self._auth_timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._reader: FrameReader | None = None

    # -- the handlers' Context --------------------------------------------------------------

    @property
    def control(self) -> Control | None:
        return self.app.control

    def publish(self, session_id: str, event: Event) -> None:
        """A typed notification to the session's subscribers."""
        self.hub.publish(session_id, NOTIFICATION_OF[type(event)], event)

    def subscribe(self, session_id: str) -> None:
        self.hub.subscribe(self, session_id)

    @property
    def echo(self) -> bool:
        return self.capabilities.echo

    def unsubscribe(self, session_id: str) -> None:
        self.hub.unsubscribe(self, session_id)

    def client_count(self) -> int:
        return len(self.hub.connections)

    def mark_initialized(self) -> None:
        self.protocol.initialized = True

    def mark_shutting_down(self) -> None:
        self.protocol.shutting_down = True

    def reader(self, *, duplex: bool = False) -> FrameReader:
        """The asyncio protocol that feeds this connection's frames.

        With ``duplex`` (sockets) the same transport also carries our replies.
        """
        reader = FrameReader(
            self.protocol.handle_frame,
            self._frame_error,
            self._on_lost,
            self._max_frame_bytes,
            on_open=(lambda t: self.attach(t, t)) if duplex else None,
            # The frames of one read form one group commit, made before the loop moves on.
            on_read_end=self.app.store.commit_queued,
            on_eof=self.end_of_input,
            duplex=duplex,
        )
        # Backpressure (the peer's own requests) before the stalled-reader cut (everything).
        out = self.protocol.out
        reader.should_hold = lambda: out.backlog_over_hold()
        out.on_drained = reader.release
        reader.on_writable = out.feed
        self._reader = reader
        return reader

    def require_auth(self, timeout: float) -> None:
        """Until ``initialize`` succeeds: frames of at most ``PRE_AUTH_FRAME_BYTES``, and
        closed after ``timeout`` seconds, so a peer that cannot authenticate holds neither
        memory nor a connection slot for long."""
        self.needs_auth = True
        self._auth_timer = asyncio.get_running_loop().call_later(timeout, self._auth_expired)

    def _unauthenticated(self) -> bool:
        return self.needs_auth and not self.protocol.initialized

    def _auth_expired(self) -> None:
        self._auth_timer = None
        if self._unauthenticated() and not self.closed.is_set():
            timeout = self.app.config.current.server.auth_timeout
            log.warning(
                "closing a TCP connection that did not authenticate within %gs "
                "(config server.authTimeout)",
                timeout,
            )
            self.close()

    def _max_frame_bytes(self) -> int:
        cap = self.app.config.current.server.max_frame_bytes
        return min(cap, PRE_AUTH_FRAME_BYTES) if self._unauthenticated() else cap

    def _frame_error(self, err: FrameError) -> None:
        self.protocol.frame_error(err)
        if self._unauthenticated():
            log.warning("closing an unauthenticated TCP connection: %s", err.message)
            self.close()

    def write_side(self) -> asyncio.Protocol:
        """The protocol of a separate write transport (stdio): its drain releases the reader."""
        return _WriteSide(self)

    def attach(self, transport: asyncio.BaseTransport, writer: Any) -> None:
        self._transport = transport
        self.protocol.set_writer(writer)
        low = self.protocol.out.low_water()
        set_limits = getattr(writer, "set_write_buffer_limits", None)
        if set_limits is not None:
            # Told (``resume_writing``) once the peer has read us down to the low-water mark,
            # and at most ``FEED_BYTES`` before all it holds is read (the rest of a large
            # reply is held back until then; ``SidecarProtocol.feed``).
            mark = min(low, FEED_BYTES)
            set_limits(high=mark, low=mark)
        self.app.hub.connections.add(self)

    def notify(self, method: str, params: Any) -> None:
        self.protocol.notify(method, params)

    async def request(self, method: str, params: Any, result: type[T], timeout: float) -> T:
        """Ask the client something; the reply is validated into ``result``."""
        raw = await asyncio.wait_for(self.protocol.send_request_async(method, params), timeout)
        return msgspec.convert(raw, result)

    def end_of_input(self) -> None:
        """The client sends nothing more (EOF, a half-closed socket, ``exit``): answer every
        request it sent before, then close. Its writes are committed before their replies
        (a reply means committed), so once all are answered nothing acknowledged is pending.
        """
        if self._ending is None and not self.closed.is_set():
            self._ending = asyncio.ensure_future(self._finish())

    async def _finish(self) -> None:
        # Our own requests to the client (hooks, ``summarizer/complete``) will get no answer
        # now: fail them at once rather than at their timeouts.
        self.protocol.fail_outgoing_requests(ConnectionResetError("the client's input ended"))
        await self.protocol.answered()
        self.close()

    def close(self) -> None:
        """Close after flushing what is queued for the peer (its transport drains the rest)."""
        self.protocol.ended = True  # nothing more is read
        self.protocol.out.flush_now()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.close()
        if transport is None or not hasattr(transport, "get_write_buffer_size"):
            self.flushed.set()  # nothing buffered beyond what was already written
        self._on_lost()

    def _on_stalled(self) -> None:
        """The client stopped reading: drop it (and what it had not read) at once."""
        transport = self._transport
        if transport is not None and not transport.is_closing():
            abort = getattr(transport, "abort", None)
            (abort or transport.close)()
        self._on_lost()

    def _on_exit(self) -> None:
        self.exit_requested = True
        self.end_of_input()

    def _on_lost(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        self.app.hub.drop(self)
        self.protocol.drop_held()
        self.protocol.cancel_requests()


class _WriteSide(asyncio.Protocol):
    """stdout's protocol: reports the peer catching up to the connection's reader."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def resume_writing(self) -> None:
        self._conn.protocol.out.feed()
        if self._conn._reader is not None:
            self._conn._reader.release()

    def connection_lost(self, exc: Exception | None) -> None:
        """stdout is flushed and closed, or its reader is gone: nothing more can be sent."""
        self._conn.flushed.set()
        self._conn._on_lost()
