"""Subscriptions and fan-out of notifications to connected clients."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sidecar.server.connection import Connection

ALL = "*"


class Hub:
    def __init__(self) -> None:
        self._by_session: dict[str, set[Connection]] = {}

    def subscribe(self, conn: Connection, session_id: str) -> None:
        self._by_session.setdefault(session_id, set()).add(conn)

    def unsubscribe(self, conn: Connection, session_id: str) -> None:
        subs = self._by_session.get(session_id)
        if subs is not None:
            subs.discard(conn)
            if not subs:
                del self._by_session[session_id]

    def drop(self, conn: Connection) -> None:
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
