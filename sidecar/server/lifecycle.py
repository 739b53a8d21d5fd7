"""LSP lifecycle: ``initialize`` (capabilities, config), ``initialized``, ``shutdown``.

``exit`` is handled in the protocol itself, since it must work even after ``shutdown``.
"""

from __future__ import annotations

from typing import Any

from sidecar import __version__
from sidecar.model.rpc import Empty, InitializeParams, InitializeResult, ServerInfo
from sidecar.server.connection import Connection
from sidecar.server.routes import ROUTES, route

NOTIFICATIONS = [
    "session/compacted",
    "session/pruned",
    "session/status",
    "message/updated",
    "message/removed",
    "part/updated",
    "part/removed",
]


@route("initialize", InitializeParams, writes=True)
async def initialize(conn: Connection, params: InitializeParams) -> InitializeResult:
    if params.initialization_options:
        conn.config.apply_initialization(params.initialization_options)
    conn.capabilities = params.capabilities
    conn.protocol.initialized = True
    caps: dict[str, Any] = {
        "methods": sorted(m for m in ROUTES if m not in ("initialize", "initialized")),
        "notifications": NOTIFICATIONS,
        "contextFormats": ["parts", "openai", "anthropic"],
        "compactionMethods": ["standard", "collapse"],
        "summarizers": ["extractive", "openai", "anthropic", "client"],
        "maxFrameBytes": conn.config.current.server.max_frame_bytes,
    }
    return InitializeResult(
        server_info=ServerInfo(name="compaction-sidecar", version=__version__), capabilities=caps
    )


@route("initialized", Empty)
async def initialized(conn: Connection, params: Empty) -> None:
    return None


@route("shutdown", Empty, writes=True)
async def shutdown(conn: Connection, params: Empty) -> None:
    conn.protocol.shutting_down = True
    return None
