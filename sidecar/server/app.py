"""The daemon's shared state, built once: store, configuration, clients (``Hub``), engine."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sidecar.server.engine_host import EngineHost
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
    def connections(self) -> set[Connection]:
        return self.hub.connections

    async def close(self) -> None:
        await self._host.close()
        await self.store.close()
