"""Placeholder until the engine service lands."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sidecar.model.messages import Message

if TYPE_CHECKING:
    from sidecar.server.app import App


class EngineHost:
    def __init__(self, app: App) -> None:
        self.app = app

    def message_stored(self, info: Message) -> None:
        return None

    async def close(self) -> None:
        return None
