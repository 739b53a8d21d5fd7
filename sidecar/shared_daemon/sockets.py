"""One daemon per unix socket path: a lock file beside the socket and a liveness probe.

Whoever looks at a socket path and may act on what it finds — ``connect`` deciding to start a
daemon, ``serve`` replacing a stale socket, a daemon removing its socket as it exits — holds
``lock(path)`` (an ``flock`` on ``PATH.lock``) across the look and the act, so several
editors starting at once end with one daemon. The lock file is never removed: removing it
would let two processes lock two different files.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path


def lock_path(sock: Path) -> Path:
    return sock.with_name(sock.name + ".lock")


class Lock:
    """The socket path's lock; ``acquire`` blocks (call it off the event loop when in one)."""

    def __init__(self, sock: Path) -> None:
        self.path = lock_path(sock)
        self._fd = -1

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the only descriptor releases the lock
            self._fd = -1


@contextlib.contextmanager
def lock(sock: Path) -> Iterator[None]:
    """Hold the socket path's lock for the duration of the ``with``."""
    held = Lock(sock)
    held.acquire()
    try:
        yield
    finally:
        held.release()


def probe(sock: Path) -> bool:
    """Whether a daemon accepts connections at ``sock`` (a stale socket file refuses them)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(sock))
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
            return False
        raise
    finally:
        s.close()
    return True


def connect(sock: Path) -> socket.socket | None:
    """A connected socket to the daemon at ``sock``, or ``None`` when none answers there."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(sock))
    except OSError as exc:
        s.close()
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
            return None
        raise
    return s
