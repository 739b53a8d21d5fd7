"""Start the daemon: open the store, load configuration, serve a transport."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path

from sidecar.model.config import user_config_path
from sidecar.server.app import App, ConfigManager
from sidecar.server.transport import run_stdio, serve_socket
from sidecar.store import Store

log = logging.getLogger("sidecar.daemon")


def default_db_path() -> Path:
    import os

    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "compaction-sidecar" / "sessions.db"


async def run(
    db: Path, config_file: Path | None, listen: str | None, synchronous: str = "NORMAL"
) -> int:
    files = [user_config_path()]
    if config_file is not None:
        files.append(config_file)
    config = ConfigManager(files)
    store = await Store.open(db, synchronous=synchronous)
    app = App(store, config)
    try:
        if listen is None:
            return await run_stdio(app)
        server = await serve_socket(app, listen)
        addrs = ", ".join(str(s.getsockname()) for s in server.sockets)
        log.warning("compaction-sidecar listening on %s", addrs)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        async with server:
            await stop.wait()
        return 0
    finally:
        await app.close()
