"""A session's window kept assembled from ``session/context`` deltas (``since``)."""

from __future__ import annotations

from typing import Any

from sidecar.model.rpc import ContextFormat
from sidecar_client._methods import Methods
from sidecar_client._types import ContextResult


class ContextWindow:
    """One session's window in one format, kept assembled: each ``refresh`` asks
    ``session/context`` with ``since`` the last ``revision`` and applies a delta reply (keep
    the first ``start`` messages, append the rest), so only what changed crosses the wire."""

    def __init__(self, client: Methods, session_id: str, format: ContextFormat = "parts") -> None:
        self.client = client
        self.session_id = session_id
        self.format = format
        self.messages: list[Any] = []
        self.revision: str | None = None

    async def refresh(self, *, wait: bool = True, fit: bool = True) -> ContextResult:
        """The current window; the returned result's ``messages`` is the whole window."""
        # The window ``since`` names: a refresh that lands meanwhile must not become its base.
        base = self.messages
        result = await self.client.context(
            self.session_id, self.format, wait=wait, fit=fit, since=self.revision
        )
        if result.delta:
            self.messages = base[: result.start or 0] + list(result.messages)
        else:
            self.messages = list(result.messages)
        self.revision = result.revision or None
        result.messages = self.messages
        return result
