"""Wire types of the daemon's own extension requests (``daemon/status``, ``daemon/stop``)."""

from __future__ import annotations

from sidecar.model.base import Dense


class DaemonStatus(Dense, kw_only=True):
    """What ``compaction-sidecar status`` shows about a running daemon."""

    pid: int
    version: str
    #: ``stdio``, ``unix:PATH`` or ``tcp://HOST:PORT``.
    listen: str
    #: The unix socket's path (``None`` on stdio and TCP).
    socket: str | None
    db: str
    #: Connected clients, this one included.
    clients: int
    sessions: int
    #: Seconds since the daemon started.
    uptime: float
    #: Seconds a daemon started with ``--idle-exit`` waits with no client before it exits.
    idle_exit: float | None
    #: Output tokens of every summary this daemon's writers produced (prepared ones included).
    summary_tokens: int = 0
    #: Of those, the tokens of summaries prepared in the background (``compaction.prepare``)
    #: and then discarded unused: what zero-wait compaction cost extra.
    prepared_discarded_tokens: int = 0
    #: Summaries being prepared in the background whose writer failed (or whose summary was
    #: rejected): dropped, never written offline; their overflow compacted as usual.
    prepared_failed: int = 0
