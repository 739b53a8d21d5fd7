"""What the engine needs from whoever runs it (the server, or a test harness)."""

from __future__ import annotations

from typing import Any, Protocol

from sidecar.model.rpc import (
    CompactingHookResult,
    Event,
    SummarizerCompleteParams,
    SummarizerCompleteResult,
)


class Host(Protocol):
    def publish(self, session_id: str, event: Event, skip: object | None = None) -> None:
        """Send ``event`` to the session's subscribers (its type names the notification),
        all but ``skip``: the writer whose write it echoes, when it declared ``echo`` false."""
        ...

    def log(self, text: str) -> None:
        """Tell clients something they should know (``window/logMessage``)."""
        ...

    async def compacting_hook(self, session_id: str) -> list[CompactingHookResult]:
        """Ask capable clients for extra context or a replacement prompt."""
        ...

    def progress(self, session_id: str, token: str | int, value: dict[str, Any]) -> None:
        """Send one ``$/progress`` value (begin/report/end) for ``token``."""
        ...

    async def client_complete(self, params: SummarizerCompleteParams) -> SummarizerCompleteResult:
        """Run ``summarizer/complete`` on a client that declared ``capabilities.summarizer``."""
        ...
