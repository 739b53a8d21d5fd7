"""Where the daemon keeps things by default: the platform's per-user directories.

``platformdirs`` knows each platform's conventions (XDG on Linux, ``~/Library`` on macOS), so
the database goes in the user data dir, the shared daemon's socket and TCP token in the user
runtime dir, and the background daemon's log in the user state dir. No pygls here: ``connect``
and ``status`` import this on their fast path.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import platformdirs

APP = "compaction-sidecar"


class UnsafeDirectory(Exception):
    """A directory that should be ours alone is owned by someone else or open to others."""


def data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP, appauthor=False))


def state_dir() -> Path:
    return Path(platformdirs.user_state_dir(APP, appauthor=False))


def runtime_dir() -> Path:
    with warnings.catch_warnings():
        # Without XDG_RUNTIME_DIR platformdirs falls back to /tmp/runtime-$UID and warns;
        # ``private_dir`` makes that fallback safe to use.
        warnings.simplefilter("ignore")
        return Path(platformdirs.user_runtime_dir(APP, appauthor=False))


def default_db_path() -> Path:
    return data_dir() / "sessions.db"


def default_socket_path() -> Path:
    return runtime_dir() / "daemon.sock"


def default_log_path() -> Path:
    return state_dir() / "daemon.log"


def default_token_path(port: int) -> Path:
    return runtime_dir() / f"tcp-{port}.token"


def private_dir(path: Path) -> Path:
    """Create ``path`` (0700) if needed and check that only this user can use it.

    The runtime dir may fall back to a guessable name under /tmp; a directory another user
    made there could hand us their socket, so it is refused rather than trusted.
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise UnsafeDirectory(f"{path} belongs to another user")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise UnsafeDirectory(f"{path} is open to other users (mode {stat.S_IMODE(st.st_mode):o})")
    return path


def split_address(spec: str, error: type[ValueError], usage: str) -> tuple[str, str, str | None]:
    """``unix:PATH`` -> ("unix", PATH, None), ``tcp://HOST:PORT`` -> ("tcp", HOST, PORT) (PORT
    None without a colon): the one address grammar the daemon's ``--listen`` and the client's
    ``connect`` read. HOST and PORT are each end's to check (the daemon allows only loopback);
    an empty unix path, or no known scheme (``error(usage)``), is refused at both."""
    if spec.startswith("unix:"):
        path = spec[len("unix:") :]
        if not path:
            raise error("unix: needs a path")
        return "unix", path, None
    if spec.startswith("tcp://"):
        host, colon, port = spec[len("tcp://") :].rpartition(":")
        return "tcp", host, port if colon else None
    raise error(usage)
