"""``config/get`` and ``config/update`` (partial, deep-merged, validated as a whole)."""

from __future__ import annotations

from sidecar.model.config import Config
from sidecar.model.rpc import ConfigUpdateParams, Empty
from sidecar.server.connection import Connection
from sidecar.server.routes import route


@route("config/get", Empty)
async def get(conn: Connection, p: Empty) -> Config:
    return conn.app.config.current


@route("config/update", ConfigUpdateParams)
async def update(conn: Connection, p: ConfigUpdateParams) -> Config:
    return conn.app.config.update(p.config)
