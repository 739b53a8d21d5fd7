"""LSP lifecycle: ``initialize`` (capabilities, config), ``initialized``, ``shutdown``.

``exit`` is handled in the protocol itself, since it must work even after ``shutdown``.
"""

from __future__ import annotations

import hmac
from typing import Any

from sidecar import __version__
from sidecar.errors import Unauthorized
from sidecar.model.rpc import Empty, InitializeParams, InitializeResult, ServerInfo
from sidecar.protocol.methods import SERVED, SESSION_EVENTS
from sidecar.server.context import Context, after_reply

_LIFECYCLE = ("initialize", "initialized")


async def initialize(ctx: Context, params: InitializeParams) -> InitializeResult:
    control = ctx.control
    if control is not None and control.token is not None:
        _authenticate(ctx, control.token, params.auth_token)
    if params.initialization_options:
        ctx.config.apply_initialization(params.initialization_options)
    ctx.capabilities = params.capabilities
    ctx.mark_initialized()
    caps: dict[str, Any] = {
        "methods": sorted(s.method for s in SERVED if s.method not in _LIFECYCLE),
        "notifications": list(SESSION_EVENTS),
        "contextFormats": ["parts", "openai", "anthropic"],
        "compactionMethods": ["standard", "collapse"],
        "summarizers": ["extractive", "openai", "anthropic", "client"],
        "maxFrameBytes": ctx.config.current.server.max_frame_bytes,
    }
    return InitializeResult(
        server_info=ServerInfo(name="compaction-sidecar", version=__version__), capabilities=caps
    )


def _authenticate(ctx: Context, token: str, given: str | None) -> None:
    """A TCP listener's check (PROTOCOL.md): the wrong token gets an error and a closed socket."""
    if given is not None and hmac.compare_digest(given.encode(), token.encode()):
        return
    after_reply(ctx.close)
    raise Unauthorized(
        "initialize: params.authToken is missing or wrong; this TCP listener requires the "
        "token from its --token-file (or COMPACTION_SIDECAR_TOKEN)"
    )


_LIFECYCLE = ("initialize", "initialized")


async def initialized(ctx: Context, params: Empty) -> None:
    return None


async def shutdown(ctx: Context, params: Empty) -> None:
    ctx.mark_shutting_down()
    return None
