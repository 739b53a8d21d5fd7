"""``compaction-sidecar connect``: what an editor spawns to share one background daemon.

It finds the daemon at the socket, or starts one (``serve --listen unix:PATH --idle-exit N``,
detached, logging to the state dir), then copies bytes both ways between its stdio and the
socket, unchanged: the editor speaks to the daemon exactly as over ``serve``'s stdio.

Probe, start and connect happen under the socket's lock (``sockets``), so editors
that start together end with one daemon and every bridge attaches to it; the spawned daemon
inherits no lock of its own and writes to a pipe once it listens, which is what the holder
waits for. No pygls here: this path runs on every editor start.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from sidecar.shared_daemon import paths, sockets

#: Seconds a starting daemon may take to listen before ``connect`` gives up.
START_TIMEOUT = 60.0
CHUNK = 1 << 16


class BridgeError(Exception):
    """The daemon could not be reached or started; the message says why. ``status`` is
    connect's exit status: the daemon's own 2 (usage or config error) passes through."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Target:
    socket: Path
    db: str | None = None  # a SQLite file or a postgresql:// URL
    config: Path | None = None
    idle_exit: float = 300.0
    log_level: str = "WARNING"
    log_file: Path | None = None


def socket_dir(path: Path, *, default: bool) -> None:
    """The default socket's directory must be ours alone; a chosen one is only created."""
    if default:
        paths.private_dir(path.parent)
    else:
        sockets.check_owner(path)  # before creating anything in another user's directory
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        sockets.check_owner(path)


def attach(target: Target) -> socket.socket:
    """A socket connected to the daemon at ``target.socket``, started first if none answers."""
    with sockets.lock(target.socket):
        conn = sockets.connect(target.socket)
        if conn is not None:
            return conn
        start(target)
        conn = sockets.connect(target.socket)
    if conn is None:
        raise BridgeError(f"the daemon started but does not answer at {target.socket}")
    return conn


def absolute_db(db: str) -> str:
    """``--db`` for a daemon started elsewhere: a file made absolute, a URL as it is."""
    from sidecar.store import is_postgres

    return db if is_postgres(db) else str(Path(db).resolve())


def serve_command(target: Target, ready_fd: int, log_file: Path) -> list[str]:
    cmd = [sys.executable, "-m", "sidecar", "serve", "--listen", f"unix:{target.socket}"]
    cmd += ["--idle-exit", f"{target.idle_exit:g}", "--ready-fd", str(ready_fd)]
    cmd += ["--log-level", target.log_level, "--log-file", str(log_file)]
    if target.db is not None:
        cmd += ["--db", absolute_db(target.db)]
    if target.config is not None:
        cmd += ["--config", str(target.config.resolve())]
    return cmd


def start(target: Target) -> None:
    """Start the daemon detached (its own session, stdio away from ours) and wait until it
    listens. The caller holds the socket's lock."""
    log_file = target.log_file or paths.default_log_path()
    log_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    ready_r, ready_w = os.pipe()
    try:
        with open(log_file, "ab") as log:
            offset = log.tell()
            proc = subprocess.Popen(
                serve_command(target, ready_w, log_file),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                pass_fds=(ready_w,),
                start_new_session=True,
                cwd="/",
            )
        os.close(ready_w)
        ready_w = -1
        said = _read_line(ready_r, START_TIMEOUT)
    finally:
        os.close(ready_r)
        if ready_w >= 0:
            os.close(ready_w)
    if said == b"ready\n":
        return
    try:
        # Without "ready" the pipe closes only as the daemon exits.
        code = proc.wait(timeout=START_TIMEOUT if said is not None else 0)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise BridgeError(
            f"the daemon did not start within {START_TIMEOUT:g}s; see {log_file}"
        ) from None
    raise BridgeError(
        f"the daemon exited with status {code} before listening:\n"
        f"{_tail(log_file, offset)}(log: {log_file})",
        status=2 if code == 2 else 1,
    )


def _read_line(fd: int, timeout: float) -> bytes | None:
    """One line from ``fd`` (less if its writer closes it first); ``None`` after ``timeout``."""
    data = b""
    while not data.endswith(b"\n"):
        if not select.select([fd], [], [], timeout)[0]:
            return None
        chunk = os.read(fd, 64)
        if not chunk:
            break
        data += chunk
    return data


def _tail(path: Path, offset: int) -> str:
    with contextlib.suppress(OSError), open(path, "rb") as f:
        f.seek(offset)
        text = f.read()[-4000:].decode("utf-8", "replace")
        return text if text.endswith("\n") or not text else text + "\n"
    return ""


def bridge(conn: socket.socket, in_fd: int = 0, out_fd: int = 1) -> int:
    """Copy ``in_fd`` -> socket and socket -> ``out_fd`` until the daemon closes the socket.

    EOF on our stdin is passed on as a half-close (``SHUT_WR``): the daemon answers every
    request it had read, then closes its side, which ends the copy back, so
    ``cat requests | compaction-sidecar connect`` relays every reply before it exits.
    """

    def upstream() -> None:
        try:
            while data := os.read(in_fd, CHUNK):
                conn.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)

    threading.Thread(target=upstream, name="stdin->daemon", daemon=True).start()
    try:
        while data := conn.recv(CHUNK):
            view = memoryview(data)
            while view:
                view = view[os.write(out_fd, view) :]
    except BrokenPipeError:
        return 0  # the editor is gone
    except OSError:
        return 1  # the daemon broke the connection
    except KeyboardInterrupt:
        return 130
    finally:
        conn.close()
    return 0


def main(target: Target, *, default_socket: bool) -> int:
    try:
        socket_dir(target.socket, default=default_socket)
        conn = attach(target)
    except (BridgeError, paths.UnsafeDirectory, sockets.NotOurs, OSError) as exc:
        print(f"compaction-sidecar connect: {exc}", file=sys.stderr)
        return exc.status if isinstance(exc, BridgeError) else 1
    return bridge(conn)
