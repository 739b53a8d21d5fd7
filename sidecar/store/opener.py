"""Open the backend ``--db`` names: the top of the store's backends, below ``Store``.

``Store.open`` imports this lazily, so a SQLite daemon never loads asyncpg, and the
backends never import ``Store`` (the statements they share live in ``statements.py``).
"""

from __future__ import annotations

from pathlib import Path

from sidecar.store.backend import Backend
from sidecar.store.url import is_postgres, sqlite_path


async def open_backend(
    db: str | Path, *, synchronous: str = "NORMAL", readonly: bool = False
) -> Backend:
    """The backend for ``--db``; raises ``UnsupportedDatabase`` for another kind of URL,
    ``OSError``/``TimeoutError`` when the database cannot be reached, ``CannotOpen`` when its
    server refuses, and ``sqlite3.Error`` for a file that is not a database. ``readonly``:
    one that only reads an existing database at this schema version (``CannotOpen`` for any
    database it cannot read as it is, with what is wrong)."""
    if is_postgres(db):
        if readonly:
            from sidecar.store.postgres import PostgresReader

            return await PostgresReader.open(str(db))
        from sidecar.store.postgres import PostgresBackend

        return await PostgresBackend.open(str(db))
    if readonly:
        from sidecar.store.sqlite import SqliteReader

        return await SqliteReader.open(sqlite_path(db))
    from sidecar.store.sqlite import SqliteBackend

    return await SqliteBackend.open(sqlite_path(db), synchronous=synchronous)
