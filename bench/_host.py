"""The engine's Host for in-process benchmarks: records what the engine publishes."""

from __future__ import annotations

from typing import Any

from sidecar.model.rpc import Event
from sidecar.protocol.methods import notification_method


class Host:
    """Records notifications and progress; a bench reads them after each check."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def publish(self, session_id: str, event: Event) -> None:
        self.events.append((notification_method(event), event))

    def log(self, text: str) -> None:
        self.events.append(("log", text))

    def progress(self, session_id: str, token: str | int, value: dict[str, Any]) -> None:
        self.events.append(("$/progress", value))

    async def compacting_hook(self, session_id: str) -> list[Any]:
        return []

    async def client_complete(self, params: Any) -> Any:
        raise RuntimeError("the bench uses the extractive writer")
