"""The daemon's own extension requests: ``daemon/status`` and ``daemon/stop``.

``Control`` is what the process that started the daemon (``sidecar.server.daemon``) tells
the handlers about it: where it listens, which database, its TCP token, how to stop it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sidecar import __version__
from sidecar.model.daemon import DaemonStatus
from sidecar.model.rpc import Empty
from sidecar.server.connection import Connection
from sidecar.server.routes import route


@dataclass
class Control:
    db: str
    listen: str  # "stdio", "unix:PATH" or "tcp://HOST:PORT"
    stop: Callable[[], None]
    #: The token ``initialize.params.authToken`` must carry (TCP listeners only).
    token: str | None = None
    idle_exit: float | None = None
    started: float = field(default_factory=time.monotonic)

    def __repr__(self) -> str:  # never show the token
        return f"Control(listen={self.listen!r}, db={self.db!r})"


def after_reply(conn: Connection, action: Callable[[], None]) -> None:
    """Run ``action`` once the current request's reply has been written.

    A handler's reply is queued as its task finishes and flushed by a callback scheduled
    then; the task's own done-callbacks are scheduled after that one.
    """
    task = asyncio.current_task()
    assert task is not None
    task.add_done_callback(lambda _t: action())


def _control(conn: Connection) -> Control:
    control = conn.app.control
    if control is None:  # an App built without a daemon around it (in-process tests)
        return Control(db=conn.store.path, listen="stdio", stop=conn.close)
    return control


@route("daemon/status", Empty)
async def status(conn: Connection, params: Empty) -> DaemonStatus:
    control = _control(conn)
    kind, _, where = control.listen.partition(":")
    return DaemonStatus(
        pid=os.getpid(),
        version=__version__,
        listen=control.listen,
        socket=where if kind == "unix" else None,
        db=control.db,
        clients=len(conn.hub.connections),
        sessions=await conn.store.count_sessions(),
        uptime=round(time.monotonic() - control.started, 3),
        idle_exit=control.idle_exit,
    )


@route("daemon/stop", Empty)
async def stop(conn: Connection, params: Empty) -> None:
    """Answered first, then the daemon stops: listener closed, clients closed, store closed."""
    after_reply(conn, _control(conn).stop)
    return None
