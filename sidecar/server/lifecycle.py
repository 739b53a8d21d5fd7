"""LSP lifecycle: ``initialize`` (capabilities, config), ``initialized``, ``shutdown``.

``exit`` is handled in the protocol itself, since it must work even after ``shutdown``.
"""

from __future__ import annotations

import hmac
from typing import Any

from sidecar import __version__
from sidecar.errors import Unauthorized
from sidecar.model.rpc import Empty, InitializeParams, InitializeResult, ServerInfo
from sidecar.protocol.methods import SESSION_EVENTS
from sidecar.server.admin import after_reply
from sidecar.server.connection import Connection
from sidecar.server.routes import ROUTES, route


@route("initialize", InitializeParams, writes=True)
async def initialize(conn: Connection, params: InitializeParams) -> InitializeResult:
    control = conn.app.control
    if control is not None and control.token is not None:
        _authenticate(conn, control.token, params.auth_token)
    if params.initialization_options:
        conn.config.apply_initialization(params.initialization_options)
    conn.capabilities = params.capabilities
    conn.protocol.initialized = True
    caps: dict[str, Any] = {
        "methods": sorted(m for m in ROUTES if m not in ("initialize", "initialized")),
        "notifications": list(SESSION_EVENTS),
        "contextFormats": ["parts", "openai", "anthropic"],
        "compactionMethods": ["standard", "collapse"],
        "summarizers": ["extractive", "openai", "anthropic", "client"],
        "maxFrameBytes": conn.config.current.server.max_frame_bytes,
    }
    return InitializeResult(
        server_info=ServerInfo(name="compaction-sidecar", version=__version__), capabilities=caps
    )


def _authenticate(conn: Connection, token: str, given: str | None) -> None:
    """A TCP listener's check (PROTOCOL.md): the wrong token gets an error and a closed socket."""
    if given is not None and hmac.compare_digest(given.encode(), token.encode()):
        return
    after_reply(conn, conn.close)
    raise Unauthorized(
        "initialize: params.authToken is missing or wrong; this TCP listener requires the "
        "token from its --token-file (or COMPACTION_SIDECAR_TOKEN)"
    )


@route("initialized", Empty)
async def initialized(conn: Connection, params: Empty) -> None:
    return None


@route("shutdown", Empty, writes=True)
async def shutdown(conn: Connection, params: Empty) -> None:
    conn.protocol.shutting_down = True
    return None
