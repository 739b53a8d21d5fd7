"""The daemon's shared state, built once: store, configuration, clients (``Hub``), engine."""

from __future__ import annotations

import logging
from typing import Any

from lsprotocol.types import MessageType

from sidecar.model.rpc import ProgressParams
from sidecar.server.connection import Connection
from sidecar.server.context import Control
from sidecar.server.engine_host import EngineHost
from sidecar.server.hub import Hub, Peer
from sidecar.server.protocol import Starting
from sidecar.server.settings import ConfigManager
from sidecar.store import Store

log = logging.getLogger("sidecar.app")

#: The ``$/progress`` token of the first-open indexing of stored history.
HISTORY_PROGRESS = "history-index"

__all__ = ["App", "ConfigManager"]


class App:
    def __init__(self, store: Store, config: ConfigManager) -> None:
        self.store = store
        self.config = config
        store.max_read_bytes = config.current.server.max_reply_bytes
        if store.indexer is not None:
            store.indexer.delay = config.current.history.index_delay_ms / 1000
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
        store.on_backfill = self._history_progress
        self._host = EngineHost(store, self.hub, config)
        self.engine = self._host.engine

    def _history_progress(self, indexed: int, total: int) -> None:
        """The first-open indexing of stored history, as ``$/progress`` to every client (token
        ``"history-index"``) and a log line when it begins and ends."""
        value: dict[str, Any]
        if indexed == 0:
            text = f"indexing {total} stored parts for history search"
            value = {"kind": "begin", "title": "History index", "message": text, "percentage": 0}
            self.hub.log_message(text, MessageType.Info)
        elif indexed < total:
            value = {
                "kind": "report",
                "message": f"{indexed} of {total} parts",
                "percentage": indexed * 100 // total,
            }
        else:
            value = {"kind": "end", "message": f"{total} parts indexed"}
            self.hub.log_message(f"history index: {total} stored parts indexed", MessageType.Info)
        params = ProgressParams(token=HISTORY_PROGRESS, value=value)
        for conn in list(self.hub.connections):
            conn.notify("$/progress", params)

    @property
    def connections(self) -> set[Peer]:
        return self.hub.connections

    def connect(self) -> Connection:
        """A new client connection on this daemon's parts."""
        return Connection(self)

    async def close(self) -> None:
        await self._host.close()
        await self.store.close()
