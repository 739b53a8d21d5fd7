"""The daemon's shared state, built once: store, configuration, clients (``Hub``), engine."""

from __future__ import annotations

import logging

from sidecar.server.connection import Connection
from sidecar.server.context import Control
from sidecar.server.engine_host import EngineHost
from sidecar.server.hub import Hub, Peer
from sidecar.server.protocol import Starting
from sidecar.server.settings import ConfigManager
from sidecar.store import Store

log = logging.getLogger("sidecar.app")

__all__ = ["App", "ConfigManager"]


class App:
    def __init__(self, store: Store, config: ConfigManager) -> None:
        self.store = store
        self.config = config
        store.max_read_bytes = config.current.server.max_reply_bytes
        self.hub = Hub()
        if store.backend.shares_events:  # PostgreSQL: subscribers hear every daemon's writes
            self.hub.relay = store.backend.relay
            store.backend.on_event = self.hub.deliver_relayed
        # How this daemon was started and is stopped (``daemon/status``, ``daemon/stop``, auth).
        self.control: Control | None = None
        # Requests of every connection still waiting for their first step: while there are
        # any, a write may be joined by theirs, so the store queues it for a group commit.
        self.starting = Starting()
        store.set_may_join(lambda: self.starting.count > 0)
        self._host = EngineHost(store, self.hub, config)
        self.engine = self._host.engine

    @property
    def connections(self) -> set[Peer]:
        return self.hub.connections

    def connect(self) -> Connection:
        """A new client connection on this daemon's parts."""
        return Connection(self)

    async def close(self) -> None:
        await self._host.close()
        await self.store.close()
