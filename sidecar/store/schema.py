"""Schema and forward-only migrations.

``schema_version`` holds one row; each migration runs in its own transaction and bumps it, so a
crash mid-upgrade leaves the database at a consistent earlier version.
"""

from __future__ import annotations

from sidecar.store.url import CannotOpen

MIGRATIONS: list[str] = [
    # 1: sessions, messages, parts
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        parent_id TEXT,
        created INTEGER NOT NULL,
        updated INTEGER NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX sessions_by_updated ON sessions (updated, id);

    CREATE TABLE messages (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        created INTEGER NOT NULL,
        role TEXT NOT NULL,
        parent_id TEXT,
        summary_ok INTEGER NOT NULL DEFAULT 0,
        data TEXT NOT NULL
    );
    CREATE INDEX messages_by_time ON messages (session_id, created, id);
    CREATE INDEX messages_summaries ON messages (parent_id) WHERE summary_ok = 1;

    CREATE TABLE parts (
        id TEXT PRIMARY KEY,
        message_id TEXT NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
        session_id TEXT NOT NULL,
        type TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX parts_by_message ON parts (message_id, id);
    CREATE INDEX parts_compaction ON parts (session_id) WHERE type = 'compaction';
    """,
    # 2: integrity (PROTOCOL.md): an id belongs to one session, a part to one message, and a
    # part's session is its message's. Raised inside the statement, so the writer fails
    # exactly the offending op (``Store`` maps the messages to wire errors).
    """
    CREATE TRIGGER messages_one_session BEFORE UPDATE OF session_id ON messages
    WHEN NEW.session_id IS NOT OLD.session_id
    BEGIN SELECT RAISE(ABORT, 'sidecar:message-session'); END;

    CREATE TRIGGER parts_one_message BEFORE UPDATE OF message_id ON parts
    WHEN NEW.message_id IS NOT OLD.message_id
    BEGIN SELECT RAISE(ABORT, 'sidecar:part-message'); END;

    CREATE TRIGGER parts_session_is_message_session BEFORE INSERT ON parts
    WHEN NEW.session_id <> (SELECT session_id FROM messages WHERE id = NEW.message_id)
    BEGIN SELECT RAISE(ABORT, 'sidecar:part-session'); END;

    CREATE TABLE leases (
        name TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires INTEGER NOT NULL
    );
    """,
    # 3: steering compaction (PROTOCOL.md "Steering compaction"): pins and each compaction's
    # diagnostics are the daemon's own data, not the client's JSON. Both go with the row they
    # belong to (a pin with its part, diagnostics with their summary message).
    """
    CREATE TABLE pins (
        part_id TEXT PRIMARY KEY REFERENCES parts (id) ON DELETE CASCADE,
        message_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        created INTEGER NOT NULL
    );
    CREATE INDEX pins_by_session ON pins (session_id);

    CREATE TABLE compactions (
        message_id TEXT PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
        session_id TEXT NOT NULL,
        created INTEGER NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX compactions_by_session ON compactions (session_id, created, message_id);
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)


def check_readable(display: str, version: int | None) -> None:
    """Refuse to read a database at another schema version (``Store.open(readonly=True)``):
    a read-only open cannot migrate it, and reading it as this version's would misread it."""
    if version is None:
        raise CannotOpen(f"{display}: not a compaction-sidecar database (no schema version)")
    if version < SCHEMA_VERSION:
        raise CannotOpen(
            f"{display}: database schema v{version} is older than this version's "
            f"(v{SCHEMA_VERSION}): open it once with `compaction-sidecar serve` to migrate it"
        )
    if version > SCHEMA_VERSION:
        raise CannotOpen(
            f"{display}: database schema v{version} is newer than this version's "
            f"(v{SCHEMA_VERSION}): read it with a newer compaction-sidecar"
        )
