"""Result types the daemon's own model does not provide in a client-friendly form.

``session/messages`` returns messages exactly as stored, unknown fields included, so they are
kept as plain dicts here rather than decoded into the typed model (which would drop them).
"""

from __future__ import annotations

from typing import Any

import msgspec

from sidecar.model.base import wire_name


class StoredMessage(msgspec.Struct, kw_only=True):
    """``{info, parts}``: one message and its parts (in id order) as plain JSON objects."""

    info: dict[str, Any]
    parts: list[dict[str, Any]] = msgspec.field(default_factory=list)


class MessagesPage(msgspec.Struct, kw_only=True, rename=wire_name):
    """A ``session/messages`` page; ``next_cursor`` (wire ``nextCursor``) continues it."""

    messages: list[StoredMessage]
    next_cursor: str | None = None
