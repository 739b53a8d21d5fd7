"""A client that writes the summaries itself (the daemon sends it ``summarizer/complete``), for
the end-to-end tests that hold a compaction in flight."""

from __future__ import annotations

import asyncio
from typing import Any

# Spawn or connect options: a client that can write summaries, and a daemon that asks it to.
CLIENT_WRITER: dict[str, Any] = {
    "capabilities": {"summarizer": True},
    "initialization_options": {"summarizer": {"provider": "client"}},
}


class HeldWriter:
    """A ``summarizer/complete`` handler that answers only once ``release`` is set, so a test
    can act while the compaction waits for its summary (``asked`` is set when it does)."""

    def __init__(self, text: str = "summary") -> None:
        self.text = text
        self.asked = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, params: Any) -> dict[str, Any]:
        self.asked.set()
        await self.release.wait()
        return {"text": self.text}
