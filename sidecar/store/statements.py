"""The ingest statements both backends run, written once (PostgreSQL folds a batch of them
into one server-side function call; SQLite runs them as they are)."""

UPSERT_MESSAGE = (
    "INSERT INTO messages (id, session_id, created, role, parent_id, summary_ok, data) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
    "created = excluded.created, role = excluded.role, parent_id = excluded.parent_id, "
    "summary_ok = excluded.summary_ok, data = excluded.data, session_id = excluded.session_id"
)
# Setting ``session_id``/``message_id`` again lets the schema's triggers refuse an id reused
# elsewhere: the statement fails, so the writer fails that op alone (never a silent no-op).
UPSERT_PART = (
    "INSERT INTO parts (id, message_id, session_id, type, data) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET type = excluded.type, data = excluded.data, "
    "message_id = excluded.message_id, session_id = excluded.session_id"
)
TOUCH_SESSION = "UPDATE sessions SET updated = ? WHERE id = ? AND updated < ?"
