"""The connected clients: who is connected, who is subscribed to what, and fan-out."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import attrs
import msgspec
from lsprotocol.types import LogMessageParams, MessageType

from sidecar.model.buffers import Shared
from sidecar.model.rpc import ClientCapabilities
from sidecar.protocol.shared import as_raw
from sidecar.store import part_ref

T = TypeVar("T")

ALL = "*"
log = logging.getLogger("sidecar.hub")


class Peer(Protocol):
    """A connected client, as the hub needs it (``Connection`` is one)."""

    capabilities: ClientCapabilities

    def notify(self, method: str, params: Any) -> None: ...

    async def request(self, method: str, params: Any, result: type[T], timeout: float) -> T:
        """Ask the client something; the reply is validated into ``result``."""
        ...

    def close(self) -> None: ...


class Hub:
    def __init__(self) -> None:
        self._by_session: dict[str, set[Peer]] = {}
        self.connections: set[Peer] = set()
        # Where this daemon's events also go: the other daemons on a shared database.
        self.relay: Callable[[str, str, bytes], None] | None = None

    def log_message(self, text: str, level: MessageType = MessageType.Warning) -> None:
        """``window/logMessage`` to every connected client (and the daemon's own log)."""
        log.warning("%s", text)
        for conn in list(self.connections):
            conn.notify("window/logMessage", LogMessageParams(type=level, message=text))

    def subscribe(self, conn: Peer, session_id: str) -> None:
        self._by_session.setdefault(session_id, set()).add(conn)

    def unsubscribe(self, conn: Peer, session_id: str) -> None:
        subs = self._by_session.get(session_id)
        if subs is not None:
            subs.discard(conn)
            if not subs:
                del self._by_session[session_id]

    def drop(self, conn: Peer) -> None:
        """A connection is gone: no longer connected, subscribed to nothing."""
        self.connections.discard(conn)
        for sid in list(self._by_session):
            self.unsubscribe(conn, sid)

    def subscribers(self, session_id: str) -> set[Peer]:
        """A copy: callers may iterate while connections come and go."""
        subs = self._by_session.get(session_id, set())
        everyone = self._by_session.get(ALL)
        return subs | everyone if everyone else set(subs)  # union only when "*" is watched

    def publish(
        self, session_id: str, method: str, params: Any, skip: object | None = None
    ) -> None:
        """To this daemon's subscribers but ``skip`` (a writer that asked for no echo of
        its own writes), and to the other daemons' through ``relay``."""
        self.deliver(session_id, method, params, skip)
        if self.relay is not None:
            part = getattr(params, "part", None)
            if isinstance(part, Shared) and part.large and part.part_id:
                # Named, not copied: the other daemons read the stored part (``part_ref``).
                self.relay(session_id, method, part_ref(part.part_id))
            else:
                self.relay(session_id, method, _json(params))

    def deliver(
        self, session_id: str, method: str, params: Any, skip: object | None = None
    ) -> None:
        """To this daemon's subscribers only (an event another daemon relayed here)."""
        for conn in self.subscribers(session_id):
            if conn is not skip:
                conn.notify(method, params)

    def deliver_relayed(self, session_id: str, method: str, params: bytes) -> None:
        self.deliver(session_id, method, msgspec.Raw(params))


def _json(params: Any) -> bytes:
    """Params as their wire JSON (lsprotocol's attrs classes through its converter, built on
    first use: only a shared database relays, and building one costs start-up time)."""
    if attrs.has(type(params)):
        params = _converter().unstructure(params)
    return msgspec.json.encode(params, enc_hook=as_raw)  # a ``Shared`` part is copied in


@functools.cache
def _converter() -> Any:
    from lsprotocol.converters import get_converter

    return get_converter()
