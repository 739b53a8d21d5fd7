"""Who may set what: daemon-level configuration and each connection's own overlay.

The isolation model (PROTOCOL.md "Configuration and isolation"):

* The daemon's config comes from its files, command line and environment only. ``server.*``
  (the daemon's limits) can be set nowhere else.
* Each connection has its own overlay (``initializationOptions`` < ``config/update``) on top of
  the daemon's config, below the environment. It changes nothing for other clients: the
  automatic work a write causes runs under the config of the connection that wrote it.
* Credentials (``summarizer.apiKeyEnv`` and configured ``headers``) travel only to the endpoint
  configured beside them. An overlay may not name an environment variable of the daemon, and
  an overlay that changes the summarizer's ``provider`` or ``baseURL`` does not inherit the
  daemon's key or headers, so no client can make the daemon send its credentials to an
  endpoint of the client's choosing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from sidecar.errors import InvalidParams
from sidecar.model import config as cfgmod
from sidecar.model.config import Config

_DAEMON_ONLY = ("server", "history", "mcp")
_CREDENTIALS = ("apiKeyEnv", "headers")
_ENDPOINT = ("provider", "baseURL")


class ConfigManager:
    """The daemon's layers (PROTOCOL.md): files, then the environment, which always wins."""

    def __init__(self, files: list[Path], env: dict[str, str] | None = None) -> None:
        self._file_layers = [cfgmod.read_layer(p) for p in files]
        self._env_layer = cfgmod.env_layer(env)
        self.current: Config = self.build([])

    def build(self, overlay: list[dict[str, Any]]) -> Config:
        """The daemon's config with a connection's overlay layers applied (already checked)."""
        files = self._file_layers
        if any(_sets_endpoint(layer) for layer in overlay):
            files = [_without_credentials(layer) for layer in files]
        return cfgmod.build([*files, *overlay, self._env_layer])

    def for_connection(self) -> ConnectionConfig:
        return ConnectionConfig(self)


class ConnectionConfig:
    """One connection's effective config: the daemon's plus what this client set."""

    def __init__(self, daemon: ConfigManager) -> None:
        self._daemon = daemon
        self._init: dict[str, Any] = {}
        self._runtime: dict[str, Any] = {}
        self._built: Config | None = None

    @property
    def current(self) -> Config:
        """Rebuilt when asked after a change, so the daemon's own layers stay in force."""
        if self._built is None:
            self._built = self._daemon.build([self._init, self._runtime])
        return self._built

    def apply_initialization(self, options: dict[str, Any]) -> Config:
        layer = cfgmod.deep_merge(self._init, _checked(options, "initializationOptions"))
        built = _rerooted("initializationOptions", self._daemon.build, [layer, self._runtime])
        self._init, self._built = layer, built
        return built

    def update(self, patch: dict[str, Any]) -> Config:
        layer = cfgmod.deep_merge(self._runtime, _checked(patch, "config"))
        built = _rerooted("config", self._daemon.build, [self._init, layer])
        self._runtime, self._built = layer, built
        return built


def _checked(layer: dict[str, Any], where: str) -> dict[str, Any]:
    """Refuse what a client may not set; the message names the key and where it belongs."""
    for section in _DAEMON_ONLY:
        if section not in layer:
            continue
        value = layer[section]
        key = f"{section}.{next(iter(value))}" if isinstance(value, dict) and value else section
        raise InvalidParams(
            f"invalid params: `$.{where}.{key}` is the daemon's own configuration; set it in "
            "the daemon's config file (serve --config)"
        )
    summarizers: list[tuple[str, Any]] = [("summarizer", layer.get("summarizer"))]
    comp = layer.get("compaction")
    if isinstance(comp, dict):
        for key in ("promptFile", "systemFile"):
            if key in comp:
                raise InvalidParams(
                    f"invalid params: `$.{where}.compaction.{key}` names a file of the daemon; "
                    f"set it in the daemon's config file, or send the text as "
                    f"`compaction.{key[:-4]}`"
                )
        overrides = comp.get("overrides")
        if isinstance(overrides, list):
            summarizers += [
                (f"compaction.overrides[{i}].summarizer", o.get("summarizer"))
                for i, o in enumerate(overrides)
                if isinstance(o, dict)
            ]
    for path, summarizer in summarizers:
        if isinstance(summarizer, dict) and "apiKeyEnv" in summarizer:
            raise InvalidParams(
                f"invalid params: `$.{where}.{path}.apiKeyEnv` names an environment variable "
                'of the daemon; set it in the daemon\'s config file, or use provider "client" '
                "to summarize with your own credentials"
            )
    return layer


def _sets_endpoint(layer: dict[str, Any]) -> bool:
    summarizer = layer.get("summarizer")
    return isinstance(summarizer, dict) and any(k in summarizer for k in _ENDPOINT)


def _without_credentials(layer: dict[str, Any]) -> dict[str, Any]:
    summarizer = layer.get("summarizer")
    if not isinstance(summarizer, dict):
        return layer
    kept = {k: v for k, v in summarizer.items() if k not in _CREDENTIALS}
    return {**layer, "summarizer": kept}


def _rerooted(where: str, build: Any, layers: list[dict[str, Any]]) -> Config:
    try:
        result: Config = build(layers)
    except msgspec.ValidationError as exc:
        # Re-root msgspec's path at the params field the client filled in.
        text = str(exc)
        if "`$" not in text:
            text += " - at `$`"
        raise msgspec.ValidationError(text.replace("`$", f"`$.{where}")) from None
    return result
