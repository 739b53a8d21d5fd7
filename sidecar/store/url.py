"""``--db`` as users write it: a SQLite file path, or a PostgreSQL connection URL.

``postgresql://`` and ``postgres://`` URLs go to the PostgreSQL backend in libpq's own syntax
(``postgresql://user@/db?host=/run/postgresql`` for a unix socket, ``?sslmode=``, a password
from ``~/.pgpass`` or ``PGPASSWORD``). Any other ``scheme://`` is an error rather than a
directory of that name: ``mysql://...`` must not quietly become a SQLite file.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

POSTGRES_SCHEMES = ("postgresql", "postgres")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


class UnsupportedDatabase(ValueError):
    """``--db`` names a kind of database this daemon does not store sessions in."""


class CannotOpen(Exception):
    """The database server refused (authentication, an unknown database, a permission the
    migration needs); the message is the server's."""


def is_postgres(db: str | Path) -> bool:
    return isinstance(db, str) and _scheme(db) in POSTGRES_SCHEMES


def _scheme(db: str) -> str | None:
    match = _SCHEME.match(db)
    if match is None or len(match.group(1)) == 1:  # ``C:\\...`` is a Windows path
        return None
    if not db[match.end() :].startswith("//") and match.group(1).lower() != "sqlite":
        return None  # ``notes:v2.db`` is a file name with a colon
    return match.group(1).lower()


def sqlite_path(db: str | Path) -> str:
    """The file a SQLite ``--db`` names (``sqlite:///abs/path`` or a plain path)."""
    if isinstance(db, Path):
        return str(db)
    scheme = _scheme(db)
    if scheme is None:
        return db
    if scheme == "sqlite":
        rest = db[len("sqlite:") :]
        if rest.startswith("///"):
            return rest[2:]
        if rest.startswith("//"):
            raise UnsupportedDatabase(
                f"--db {db!r}: a sqlite URL has no host: write sqlite:///path/to/file.db"
            )
        return rest
    if scheme in POSTGRES_SCHEMES:
        raise UnsupportedDatabase(f"--db {redact(db)!r} is a PostgreSQL URL, not a file")
    raise UnsupportedDatabase(
        f"--db {redact(db)!r}: unsupported database {scheme!r}; use a SQLite file path or a "
        "postgresql:// URL"
    )


def redact(url: str) -> str:
    """The URL without its password, for logs, errors and ``daemon/status``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def unreachable(url: str, exc: BaseException) -> str:
    """Why ``url`` could not be reached, naming the unix socket that was tried when that is
    the cause: a bare ``[Errno 2] No such file or directory`` does not say which directory."""
    detail = str(exc) or type(exc).__name__
    if not isinstance(exc, FileNotFoundError | ConnectionRefusedError):
        return detail
    sockets = _socket_files(url)
    if not sockets:
        return detail
    where = " or ".join(sockets)
    why = "no such socket" if isinstance(exc, FileNotFoundError) else "connection refused"
    return (
        f"{why}: {where} (is the PostgreSQL server running, and is that its socket "
        "directory? set it with ?host=/dir in the URL)"
    )


def _socket_files(url: str) -> list[str]:
    """The unix socket files a libpq-style ``url`` points at (``?host=/dir``, a ``%2F``-encoded
    host, or ``$PGHOST``), with the port (``?port=``, the URL's, ``$PGPORT`` or 5432)."""
    import os
    from urllib.parse import parse_qs, unquote

    try:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        port = parts.port
    except ValueError:
        return []
    hosts = query.get("host") or [unquote(parts.hostname or "")]
    if not any(h.startswith("/") for h in hosts):
        env_host = os.environ.get("PGHOST", "")
        hosts = env_host.split(",") if not parts.hostname and env_host else hosts
    number = (query.get("port") or [str(port or os.environ.get("PGPORT") or 5432)])[0]
    return [f"{h.rstrip('/')}/.s.PGSQL.{number}" for h in hosts if h.startswith("/")]
