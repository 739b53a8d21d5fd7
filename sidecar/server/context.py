"""What a handler gets: a narrow ``Context`` (store, engine, the caller's config, publish).

Handlers (``sidecar.server.handlers``) import this module and the layers below the server,
never the connection or the app, so the server's modules form a tree: ``Connection``
implements ``Context`` structurally. ``Control`` is what the process that started the daemon
(``sidecar.server.daemon``) tells the handlers about it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from sidecar.model.rpc import ClientCapabilities, Event

if TYPE_CHECKING:
    from sidecar.engine.service import Engine
    from sidecar.server.settings import ConnectionConfig
    from sidecar.store import Store


@dataclass
class Control:
    """How this daemon was started and is stopped (``daemon/status``, ``daemon/stop``, auth)."""

    db: str
    listen: str  # "stdio", "unix:PATH" or "tcp://HOST:PORT"
    stop: Callable[[], None]
    #: The token ``initialize.params.authToken`` must carry (TCP listeners only).
    token: str | None = None
    idle_exit: float | None = None
    started: float = field(default_factory=time.monotonic)

    def __repr__(self) -> str:  # never show the token
        return f"Control(listen={self.listen!r}, db={self.db!r})"


class Context(Protocol):
    """One client's view of the daemon, as its handlers see it."""

    engine: Engine
    store: Store
    #: The caller's config: the daemon's, overlaid with what this client set.
    config: ConnectionConfig
    capabilities: ClientCapabilities

    @property
    def control(self) -> Control | None: ...

    def publish(self, session_id: str, event: Event) -> None:
        """A typed notification to the session's subscribers (this daemon's and others')."""

    def subscribe(self, session_id: str) -> None: ...

    @property
    def echo(self) -> bool:
        """False: this client's own writes are not echoed back to it (``capabilities.echo``)."""

    def unsubscribe(self, session_id: str) -> None: ...

    def client_count(self) -> int: ...

    def mark_initialized(self) -> None: ...

    def mark_shutting_down(self) -> None: ...

    def close(self) -> None: ...


def after_reply(action: Callable[[], None]) -> None:
    """Run ``action`` once the current request's reply has been written.

    A handler's reply is queued as its task finishes and flushed by a callback scheduled
    then; the task's own done-callbacks are scheduled after that one.
    """
    task = asyncio.current_task()
    assert task is not None
    task.add_done_callback(lambda _t: action())
