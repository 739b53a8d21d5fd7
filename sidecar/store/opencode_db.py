"""OpenCode's own database (>= 1.2, ``opencode.db``), read by ``import``: a foreign schema
(tables ``session``, ``message``, ``part``; ids in columns, the rest of MessageV2 in ``data``),
opened read-only and never written. Its SQL lives here with the rest of the daemon's; the
importer (``tools/importers/opencode.py``) turns the rows into sessions. A database that is
not OpenCode's fails with ``sqlite3.DatabaseError`` when a generator is first read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_SESSIONS = (
    "SELECT id, parent_id, title, directory, revert, time_created, time_updated "
    "FROM session ORDER BY time_created, id"
)
_MESSAGES = "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id"
_PARTS = "SELECT id, message_id, data FROM part WHERE session_id = ? ORDER BY id"


def open_readonly(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)


def sessions(conn: sqlite3.Connection) -> Iterator[Any]:
    """``(id, parent_id, title, directory, revert, time_created, time_updated)``, oldest
    first."""
    yield from conn.execute(_SESSIONS)


def messages(conn: sqlite3.Connection, session_id: str) -> Iterator[Any]:
    """``(id, data)`` of a session's messages, oldest first."""
    yield from conn.execute(_MESSAGES, (session_id,))


def parts(conn: sqlite3.Connection, session_id: str) -> Iterator[Any]:
    """``(id, message_id, data)`` of a session's parts, by id."""
    yield from conn.execute(_PARTS, (session_id,))
