"""The connected clients: who is connected, who is subscribed to what, and fan-out."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lsprotocol.types import LogMessageParams, MessageType

if TYPE_CHECKING:
    from sidecar.server.connection import Connection

ALL = "*"
log = logging.getLogger("sidecar.hub")


class Hub:
    def __init__(self) -> None:
        self._by_session: dict[str, set[Connection]] = {}
        self.connections: set[Connection] = set()

    def log_message(self, text: str, level: MessageType = MessageType.Warning) -> None:
        """``window/logMessage`` to every connected client (and the daemon's own log)."""
        log.warning("%s", text)
        for conn in list(self.connections):
            conn.notify("window/logMessage", LogMessageParams(type=level, message=text))

    def subscribe(self, conn: Connection, session_id: str) -> None:
        self._by_session.setdefault(session_id, set()).add(conn)

    def unsubscribe(self, conn: Connection, session_id: str) -> None:
        subs = self._by_session.get(session_id)
        if subs is not None:
            subs.discard(conn)
            if not subs:
                del self._by_session[session_id]

    def drop(self, conn: Connection) -> None:
        """A connection is gone: no longer connected, subscribed to nothing."""
        self.connections.discard(conn)
        for sid in list(self._by_session):
            self.unsubscribe(conn, sid)

    def subscribers(self, session_id: str) -> set[Connection]:
        """A copy: callers may iterate while connections come and go."""
        subs = self._by_session.get(session_id, set())
        everyone = self._by_session.get(ALL)
        return subs | everyone if everyone else set(subs)  # union only when "*" is watched

    def publish(self, session_id: str, method: str, params: Any) -> None:
        for conn in self.subscribers(session_id):
            conn.notify(method, params)
