"""Open the backend ``--db`` names: the top of the store's backends, below ``Store``.

``Store.open`` imports this lazily, so a SQLite daemon never loads asyncpg, and the
backends never import ``Store`` (the statements they share live in ``statements.py``).
"""

from __future__ import annotations

from pathlib import Path

from sidecar.store.backend import Backend
from sidecar.store.url import is_postgres, sqlite_path


async def open_backend(db: str | Path, *, synchronous: str = "NORMAL") -> Backend:
    """The backend for ``--db``; raises ``UnsupportedDatabase`` for another kind of URL,
    ``OSError``/``TimeoutError`` when the database cannot be reached, ``CannotOpen`` when its
    server refuses, and ``sqlite3.Error`` for a file that is not a database."""
    if is_postgres(db):
        from sidecar.store.postgres import PostgresBackend

        return await PostgresBackend.open(str(db))
    from sidecar.store.sqlite import SqliteBackend

    return await SqliteBackend.open(sqlite_path(db), synchronous=synchronous)
