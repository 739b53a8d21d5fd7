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
import stat
import struct
from collections.abc import Iterator
from pathlib import Path


class NotOurs(Exception):
    """A socket, its directory or the daemon behind it belongs to another user: talking to it
    would hand that user this user's sessions (or ``stop`` someone else's daemon)."""


def check_owner(sock: Path) -> None:
    """Refuse a socket whose directory or file another user owns (a missing file is fine:
    nothing answers there). Only a directory of ours keeps others from swapping the file."""
    if not hasattr(os, "getuid"):
        return
    uid = os.getuid()
    try:
        st = os.stat(sock.parent)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise NotOurs(f"{sock.parent}: {exc.strerror}") from None
    if st.st_uid != uid:
        raise NotOurs(f"{sock.parent} belongs to another user (uid {st.st_uid}); not using it")
    try:
        st = os.lstat(sock)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise NotOurs(f"{sock}: {exc.strerror}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise NotOurs(f"{sock} is not a socket; not using it")
    if st.st_uid != uid:
        raise NotOurs(f"{sock} belongs to another user (uid {st.st_uid}); not using it")


def check_peer(s: socket.socket, sock: Path) -> None:
    """Refuse a daemon that runs as another user (``SO_PEERCRED``, where the platform has it):
    the file's owner can be changed by root, the listening process's uid cannot be faked."""
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None or not hasattr(os, "getuid"):
        return
    creds = s.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    if uid != os.getuid():
        raise NotOurs(
            f"the daemon at {sock} runs as another user (uid {uid}, pid {pid}); not using it"
        )


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
    """Whether a daemon accepts connections at ``sock`` (a stale socket file refuses them).
    Whoever's it is: ``serve`` asks before binding; clients use ``connect``, which checks."""
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
    """A connected socket to this user's daemon at ``sock``, or ``None`` when none answers
    there; ``NotOurs`` when the socket, its directory or the daemon is another user's."""
    check_owner(sock)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(sock))
    except OSError as exc:
        s.close()
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
            return None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise NotOurs(f"{sock}: {exc.strerror} (another user's socket?)") from None
        raise
    try:
        check_peer(s, sock)
    except BaseException:
        s.close()
        raise
    return s
