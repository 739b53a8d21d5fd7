"""The daemon's shared state: store, configuration, subscriptions, engine, connections."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lsprotocol.types import LogMessageParams, MessageType

from sidecar.server.hub import Hub
from sidecar.server.protocol import Starting
from sidecar.server.settings import ConfigManager
from sidecar.store import Store

if TYPE_CHECKING:
    from sidecar.server.admin import Control
    from sidecar.server.connection import Connection

log = logging.getLogger("sidecar.app")

__all__ = ["App", "ConfigManager"]


class App:
    def __init__(self, store: Store, config: ConfigManager) -> None:
        self.store = store
        self.config = config
        store.max_read_bytes = config.current.server.max_reply_bytes
        self.hub = Hub()
        self.connections: set[Connection] = set()
        # How this daemon was started and is stopped (``daemon/status``, ``daemon/stop``, auth).
        self.control: Control | None = None
        # Requests of every connection still waiting for their first step: while there are
        # any, a write may be joined by theirs, so the store queues it for a group commit.
        self.starting = Starting()
        store.set_may_join(lambda: self.starting.count > 0)
        from sidecar.server.engine_host import EngineHost

        self.engine = EngineHost(self)

    def publish(self, session_id: str, method: str, params: Any) -> None:
        self.hub.publish(session_id, method, params)

    def log_message(self, text: str, level: MessageType = MessageType.Warning) -> None:
        """``window/logMessage`` to every connected client (and the daemon's own log)."""
        log.warning("%s", text)
        for conn in list(self.connections):
            conn.notify("window/logMessage", LogMessageParams(type=level, message=text))

    async def close(self) -> None:
        await self.engine.close()
        await self.store.close()
