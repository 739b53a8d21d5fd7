"""The server side of the engine's ``Host``: notifications, client hooks, progress."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sidecar.engine.service import Engine
from sidecar.model.config import Config
from sidecar.model.messages import Message
from sidecar.model.rpc import (
    CompactingHookParams,
    CompactingHookResult,
    Event,
    ProgressParams,
    SummarizerCompleteParams,
    SummarizerCompleteResult,
)
from sidecar.protocol.methods import notification_method
from sidecar.summarizers.base import SummaryError

if TYPE_CHECKING:
    from sidecar.server.app import App

log = logging.getLogger("sidecar.host")

HOOK_TIMEOUT = 30.0


class EngineHost:
    def __init__(self, app: App) -> None:
        self.app = app
        self.engine = Engine(app.store, self, lambda: app.config.current)

    def message_stored(self, info: Message, cfg: Config) -> None:
        self.engine.message_stored(info, cfg)

    def will_store(self, info: Message, cfg: Config) -> Callable[[bool], None] | None:
        """See ``Engine.will_store``: call before queueing the write, then with the outcome."""
        return self.engine.will_store(info, cfg)

    async def close(self) -> None:
        await self.engine.close()

    # -- Host ------------------------------------------------------------------------------

    def publish(self, session_id: str, event: Event) -> None:
        self.app.publish(session_id, notification_method(event), event)

    def log(self, text: str) -> None:
        self.app.log_message(text)

    def progress(self, session_id: str, token: str | int, value: dict[str, Any]) -> None:
        self.app.publish(session_id, "$/progress", ProgressParams(token=token, value=value))

    async def compacting_hook(self, session_id: str) -> list[CompactingHookResult]:
        """Ask every client subscribed to the session that declared ``compactingHook``."""
        conns = [c for c in self.app.hub.subscribers(session_id) if c.capabilities.compacting_hook]
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
        conns = [c for c in self.app.connections if c.capabilities.summarizer]
        if not conns:
            raise SummaryError("no connected client declared capabilities.summarizer")
        deadline = self.app.config.current.summarizer.deadline
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
