"""The ``session/messages`` page, typed: the daemon's own message and part Structs.

Messages and parts decode into ``sidecar.model``'s tagged unions, so a client reads the same
snake_case attributes the daemon writes with (``info.session_id``, ``part.call_id``); fields
this version does not know are skipped. The stored JSON, unknown fields and all, is what a
raw ``client.request("session/messages", ...)`` returns.
"""

from __future__ import annotations

import msgspec

from sidecar.model import rpc
from sidecar.model.base import wire_name
from sidecar.model.messages import WithParts


class MessagesPage(msgspec.Struct, kw_only=True, rename=wire_name):
    """A ``session/messages`` page; ``next_cursor`` (wire ``nextCursor``) continues it."""

    messages: list[WithParts]
    next_cursor: str | None = None


class ContextResult(rpc.ContextResult, kw_only=True):
    """A ``session/context`` reply; without ``since`` its ``delta`` and ``start`` are None
    (not a delta, nothing to keep) rather than absent."""

    def __post_init__(self) -> None:
        if self.delta is msgspec.UNSET:
            self.delta = self.start = None
