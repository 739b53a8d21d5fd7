"""Start the daemon: open the store, load configuration, serve a transport until told to stop.

A shared daemon (``--listen``) stops on SIGTERM/SIGINT, on ``daemon/stop``, or — with
``--idle-exit`` — once no client has been connected for that long. However it stops, it
closes its listener, removes its unix socket and TCP token file, then closes the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import secrets
import signal
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from sidecar.model.buffers import LARGE_BYTES
from sidecar.model.config import user_config_path
from sidecar.model.cpu import SPLIT
from sidecar.server.app import App, ConfigManager
from sidecar.server.connection import Connection
from sidecar.server.context import Control
from sidecar.server.transport import Listener, ListenError, run_stdio, serve_socket
from sidecar.shared_daemon import paths, sockets
from sidecar.store import CannotOpen, Store, UnsupportedDatabase, redact, unreachable

log = logging.getLogger("sidecar.daemon")

TOKEN_ENV = "COMPACTION_SIDECAR_TOKEN"


class StartError(Exception):
    """The daemon cannot start (e.g. its database cannot be opened); the message says why."""


@dataclass(frozen=True)
class Options:
    db: str | Path  # a SQLite file or a postgresql:// URL
    config_file: Path | None = None
    listen: str | None = None  # None: stdio
    synchronous: str = "NORMAL"
    idle_exit: float | None = None
    token_file: Path | None = None
    #: Set by ``connect``, which holds the socket's lock until "ready" is written here.
    ready_fd: int | None = None


def tune_malloc() -> None:
    """Keep the daemon's memory in one glibc arena, and its large blocks out of the heap.

    glibc gives a thread that allocates while another does an arena of its own, and memory
    freed in one arena is not reused by another: a 10 MB part's row, copied by SQLite on the
    writer's thread, then stays resident beside the event loop's memory and the next copy
    goes elsewhere (``bench/depth_check.py``: the daemon's peak 6.8x a 10 MiB frame with
    per-thread arenas, 3.0x with one). The GIL already serialises most of the daemon's
    allocations, so one arena costs little.

    glibc also raises its mmap threshold to the largest block freed (up to 32 MiB): after
    one 10 MB part, the next one's copies come from the heap, stay resident once freed
    (~20 MiB for good) and fragment it (the peak 2.5x the frame, not 2.0x). A fixed
    threshold of ``LARGE_BYTES`` keeps every block of a large part mapped on its own and
    unmapped when freed. ``MALLOC_ARENA_MAX`` / ``MALLOC_MMAP_THRESHOLD_`` in the
    environment win; elsewhere than glibc this does nothing."""
    if sys.platform != "linux":
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return
    if "MALLOC_ARENA_MAX" not in os.environ:
        mallopt(_M_ARENA_MAX, 1)
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        mallopt(_M_MMAP_THRESHOLD, LARGE_BYTES)


_M_ARENA_MAX = -8  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3


def tune_gc() -> None:
    """Take what start-up built out of the cyclic garbage collector's walks.

    Start-up leaves ~56,000 tracked objects (pygls, lsprotocol's types, the engine), none of
    them ever garbage. Each full collection walked them all: in ``bench/ingest.py`` (pipelined)
    collections took ~15% of the daemon's CPU and the p99 reply ~21 ms; frozen, ~3% and ~3 ms.
    What is made after (windows, requests, their cycles) is collected as before. No collection
    first: after the imports it finds ~4 objects and costs ~30 ms of start-up."""
    gc.freeze()


async def run(opts: Options) -> int:
    tune_malloc()
    files = [user_config_path()]
    if opts.config_file is not None:
        files.append(opts.config_file)
    try:
        config = ConfigManager(files)
    except (ValueError, msgspec.ValidationError, msgspec.DecodeError) as exc:
        # ValidationError and DecodeError are ValueErrors; the message names file or key.
        raise StartError(f"config: {exc}") from None
    store = await open_store(opts)
    app = App(store, config)
    tune_gc()
    # The configured summary writer's HTTP client, built beside the first requests rather
    # than by the first compaction (a no-op for the offline writer).
    warming = asyncio.ensure_future(app.engine.writers.warm(config.current))
    try:
        if opts.listen is None:
            app.control = Control(db=store.path, listen="stdio", stop=lambda: _close_all(app))
            return await run_stdio(app)
        return await _serve_shared(app, opts)
    finally:
        with contextlib.suppress(Exception):
            await warming  # (its client is closed with the writers)
        await app.close()
        SPLIT.report()  # ``--cpu-split``: the last line, once the store is closed


async def open_store(opts: Options) -> Store:
    """The store ``--db`` names, or a ``StartError`` saying why it cannot be opened."""
    shown = redact(str(opts.db))
    try:
        return await Store.open(opts.db, synchronous=opts.synchronous)
    except UnsupportedDatabase as exc:
        raise StartError(str(exc)) from None
    except (OSError, sqlite3.Error, TimeoutError, CannotOpen) as exc:
        raise StartError(
            f"cannot open the database {shown}: {unreachable(str(opts.db), exc)}"
        ) from None


async def _serve_shared(app: App, opts: Options) -> int:
    assert opts.listen is not None
    stopping = asyncio.Event()
    token = _token() if opts.listen.startswith("tcp://") else None
    control = Control(
        db=app.store.path,
        listen=opts.listen,
        stop=stopping.set,
        token=token,
        idle_exit=opts.idle_exit,
    )
    app.control = control
    idle = IdleExit(app, opts.idle_exit, stopping.set) if opts.idle_exit is not None else None
    listener = await serve_socket(
        app,
        opts.listen,
        on_connection=idle.opened if idle is not None else None,
        locked=opts.ready_fd is not None,
    )
    control.listen = listener.address
    token_file: Path | None = None
    try:
        note = ""
        if token is not None and os.environ.get(TOKEN_ENV) is None:
            token_file = opts.token_file or paths.default_token_path(listener.port)
            _write_secret(token_file, token, private=opts.token_file is None)
            note = f"; token in {token_file}"
        # A status line for whoever started it (and the log file connect gives a daemon it
        # starts), not a warning: the log has it at INFO.
        print(f"compaction-sidecar listening on {listener.address}{note}", file=sys.stderr)
        log.info("serving %s%s", listener.address, note)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stopping.set)
        if opts.ready_fd is not None:
            with contextlib.suppress(OSError):
                os.write(opts.ready_fd, b"ready\n")
            os.close(opts.ready_fd)
        if idle is not None:
            idle.start(listener)
        await stopping.wait()
        log.warning("compaction-sidecar stopping (%s)", idle.reason if idle else "asked to")
    finally:
        listener.close()
        await asyncio.to_thread(listener.remove_socket)
        _close_all(app)
        if token_file is not None:
            with contextlib.suppress(OSError):
                token_file.unlink()
    return 0


def _close_all(app: App) -> None:
    for conn in list(app.connections):
        conn.close()


def _token() -> str:
    """The TCP listener's token: ``$COMPACTION_SIDECAR_TOKEN``, else a fresh random one."""
    given = os.environ.get(TOKEN_ENV)
    if given is None:
        return secrets.token_urlsafe(32)
    if len(given) < 16:
        raise ListenError(f"{TOKEN_ENV} must be at least 16 characters")
    return given


def _write_secret(path: Path, text: str, *, private: bool) -> None:
    """Write ``text`` to ``path`` as a 0600 file, atomically (never readable by others)."""
    if private:
        paths.private_dir(path.parent)
    else:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, text.encode() + b"\n")
    finally:
        os.close(fd)
    os.replace(tmp, path)


class IdleExit:
    """Stops the daemon once no client has been connected for ``seconds``.

    The last look happens under the socket's lock (``connect`` holds it from its probe until
    its socket is connected), after any connection already accepted has reached us and with
    none waiting in the backlog, and the socket is removed before the lock is released: a
    client either arrives in time to keep this daemon or finds no socket and starts another.
    """

    def __init__(self, app: App, seconds: float, stop: Callable[[], None]) -> None:
        self.app = app
        self.seconds = seconds
        self._stop = stop
        self._listener: Listener | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._arrivals = 0
        self._watchers: set[asyncio.Task[None]] = set()
        self.reason = "asked to"

    def start(self, listener: Listener) -> None:
        self._listener = listener
        self._rearm()

    def opened(self, conn: Connection) -> None:
        self._arrivals += 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task = asyncio.ensure_future(self._watch(conn))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _watch(self, conn: Connection) -> None:
        await conn.closed.wait()
        self._rearm()

    def _rearm(self) -> None:
        if self._listener is None or self.app.connections or self._timer is not None:
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.seconds, self._fire)

    def _fire(self) -> None:
        self._timer = None
        task = asyncio.ensure_future(self._check())
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _check(self) -> None:
        listener = self._listener
        assert listener is not None
        seen = self._arrivals
        held = sockets.Lock(listener.path) if listener.path is not None else None
        if held is not None:
            await asyncio.to_thread(held.acquire)
        try:
            await asyncio.sleep(0)  # an accepted connection reaches ``opened`` in this step
            if self.app.connections or self._arrivals != seen or listener.pending():
                return  # a client came; its leaving re-arms the timer
            listener.close()
            listener.remove_socket(locked=True)
            self.reason = f"no client for {self.seconds:g}s"
            self._stop()
        finally:
            if held is not None:
                held.release()
