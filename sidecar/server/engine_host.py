"""The server side of the engine's ``Host``: notifications, client hooks, progress."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from sidecar.engine.service import Engine
from sidecar.model.rpc import (
    CompactingHookParams,
    CompactingHookResult,
    Event,
    ProgressParams,
    SummarizerCompleteParams,
    SummarizerCompleteResult,
)
from sidecar.protocol.methods import notification_method
from sidecar.server.hub import Hub
from sidecar.server.settings import ConfigManager
from sidecar.store import Store
from sidecar.summarizers.base import SummaryError

log = logging.getLogger("sidecar.host")

HOOK_TIMEOUT = 30.0


class EngineHost:
    """Gets only what the engine's side needs: the store, the clients, the daemon's config."""

    def __init__(self, store: Store, hub: Hub, config: ConfigManager) -> None:
        self._hub = hub
        self._config = config
        self.engine = Engine(store, self, lambda: config.current)

    async def close(self) -> None:
        await self.engine.close()

    # -- Host ------------------------------------------------------------------------------

    def publish(self, session_id: str, event: Event, skip: object | None = None) -> None:
        self._hub.publish(session_id, notification_method(event), event, skip)

    def log(self, text: str) -> None:
        self._hub.log_message(text)

    def progress(self, session_id: str, token: str | int, value: dict[str, Any]) -> None:
        self._hub.publish(session_id, "$/progress", ProgressParams(token=token, value=value))

    async def compacting_hook(self, session_id: str) -> list[CompactingHookResult]:
        """Ask every client subscribed to the session that declared ``compactingHook``."""
        conns = [c for c in self._hub.subscribers(session_id) if c.capabilities.compacting_hook]
        if not conns:
            return []
        params = CompactingHookParams(session_id=session_id)
        replies = await asyncio.gather(
            *(
                c.request("compaction/compacting", params, CompactingHookResult, HOOK_TIMEOUT)
                for c in conns
            ),
            return_exceptions=True,
        )
        out: list[CompactingHookResult] = []
        for reply in replies:
            if isinstance(reply, CompactingHookResult):
                out.append(reply)
            elif isinstance(reply, BaseException):
                log.warning("compaction/compacting hook failed: %s", type(reply).__name__)
        return out

    async def client_complete(self, params: SummarizerCompleteParams) -> SummarizerCompleteResult:
        conns = [c for c in self._hub.connections if c.capabilities.summarizer]
        if not conns:
            raise SummaryError("no connected client declared capabilities.summarizer")
        deadline = self._config.current.summarizer.deadline
        try:
            return await conns[0].request(
                "summarizer/complete", params, SummarizerCompleteResult, deadline
            )
        except TimeoutError:
            raise SummaryError(
                "the client's summarizer/complete timed out", retryable=True
            ) from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise SummaryError(f"the client's summarizer/complete failed: {exc}") from None
