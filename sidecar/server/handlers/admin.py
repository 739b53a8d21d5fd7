"""The daemon's own extension requests: ``daemon/status`` and ``daemon/stop``."""

from __future__ import annotations

import os
import time

from sidecar import __version__
from sidecar.model.daemon import DaemonStatus
from sidecar.model.rpc import Empty
from sidecar.server.context import Context, Control, after_reply


def _control(ctx: Context) -> Control:
    control = ctx.control
    if control is None:  # an App built without a daemon around it (in-process tests)
        return Control(db=ctx.store.path, listen="stdio", stop=ctx.close)
    return control


async def status(ctx: Context, params: Empty) -> DaemonStatus:
    control = _control(ctx)
    kind, _, where = control.listen.partition(":")
    return DaemonStatus(
        pid=os.getpid(),
        version=__version__,
        listen=control.listen,
        socket=where if kind == "unix" else None,
        db=control.db,
        clients=ctx.client_count(),
        sessions=await ctx.store.count_sessions(),
        uptime=round(time.monotonic() - control.started, 3),
        idle_exit=control.idle_exit,
        summary_tokens=ctx.engine.tally.summary_tokens,
        prepared_discarded_tokens=ctx.engine.tally.prepared_discarded_tokens,
        prepared_failed=ctx.engine.tally.prepared_failed,
    )


async def stop(ctx: Context, params: Empty) -> None:
    """Answered first, then the daemon stops: listener closed, clients closed, store closed."""
    after_reply(_control(ctx).stop)
    return None
