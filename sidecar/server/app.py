"""The daemon's shared state: store, configuration, subscriptions, engine, connections."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from lsprotocol.types import LogMessageParams, MessageType

from sidecar.model import config as cfgmod
from sidecar.model.config import Config
from sidecar.server.hub import Hub
from sidecar.server.protocol import Starting
from sidecar.store import Store

if TYPE_CHECKING:
    from sidecar.server.connection import Connection

log = logging.getLogger("sidecar.app")


class ConfigManager:
    """Holds the layers of DESIGN §6 and the validated result.

    Environment always wins, so ``OPENCODE_DISABLE_AUTOCOMPACT`` cannot be undone by a client.
    """

    def __init__(self, files: list[Path], env: dict[str, str] | None = None) -> None:
        self._file_layers = [cfgmod.read_layer(p) for p in files]
        self._init_layer: dict[str, Any] = {}
        self._runtime_layer: dict[str, Any] = {}
        self._env_layer = cfgmod.env_layer(env)
        self.current: Config = self._build(self._init_layer, self._runtime_layer)

    def _build(self, init: dict[str, Any], runtime: dict[str, Any]) -> Config:
        return cfgmod.build([*self._file_layers, init, runtime, self._env_layer])

    def apply_initialization(self, options: dict[str, Any]) -> Config:
        layer = cfgmod.deep_merge(self._init_layer, options)
        self.current = self._wrap(
            "initializationOptions", lambda: self._build(layer, self._runtime_layer)
        )
        self._init_layer = layer
        return self.current

    def update(self, patch: dict[str, Any]) -> Config:
        layer = cfgmod.deep_merge(self._runtime_layer, patch)
        self.current = self._wrap("config", lambda: self._build(self._init_layer, layer))
        self._runtime_layer = layer
        return self.current

    @staticmethod
    def _wrap(where: str, fn: Any) -> Config:
        try:
            return fn()
        except msgspec.ValidationError as exc:
            # Re-root msgspec's path at the params field the client filled in.
            raise msgspec.ValidationError(str(exc).replace("`$", f"`$.{where}")) from None


class App:
    def __init__(self, store: Store, config: ConfigManager) -> None:
        self.store = store
        self.config = config
        self.hub = Hub()
        self.connections: set[Connection] = set()
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
