"""The statements more than one module runs, written once.

The ingest statements both backends run (PostgreSQL folds a batch of them into one
server-side function call; SQLite runs them as they are), and the few that two feature
modules share. Every other statement lives in the one module that runs it.
"""

UPSERT_MESSAGE = (
    "INSERT INTO messages (id, session_id, created, role, parent_id, summary_ok, data) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
    "created = excluded.created, role = excluded.role, parent_id = excluded.parent_id, "
    "summary_ok = excluded.summary_ok, data = excluded.data, session_id = excluded.session_id"
)


# Setting ``session_id``/``message_id`` again lets the schema's triggers refuse an id reused
# elsewhere: the statement fails, so the writer fails that op alone (never a silent no-op).
def upsert_part(data: str, z: str | None = None) -> str:
    """A part's upsert with ``data`` the SQL of its JSON: ``?`` as a rule; a large part's
    backends write it otherwise (``SqliteBackend.large_part``, ``PostgresBackend.large_part``).
    ``z``: the SQL of its deflated JSON, on SQLite (``packed``)."""
    columns, values, sets = "", "", ""
    if z is not None:
        columns, values, sets = ", z", f", {z}", ", z = excluded.z"
    return (
        f"INSERT INTO parts (id, message_id, session_id, type, data{columns}) "
        f"VALUES (?, ?, ?, ?, {data}{values}) "
        f"ON CONFLICT (id) DO UPDATE SET type = excluded.type, data = excluded.data{sets}, "
        "message_id = excluded.message_id, session_id = excluded.session_id"
    )


UPSERT_PART = upsert_part("?")
TOUCH_SESSION = "UPDATE sessions SET updated = ? WHERE id = ? AND updated < ?"
# Read back by id: the parts a prune marked (``compaction.mark_compacted``) or unmarked
# (``steer.unmark_compacted``).
PARTS_BY_IDS = "SELECT id, data FROM part_json WHERE id IN ({ids}) ORDER BY id"
# JSON patched in Python (``steer.unmark_compacted``; PostgreSQL's ``mark_compacted``).
SET_PART_DATA = "UPDATE parts SET data = ? WHERE id = ?"
#: A part's JSON by id (``parts``; a large part relayed by reference, ``postgres``).
PART_DATA = "SELECT data FROM part_json WHERE id = ?"
DELETE_MESSAGE = "DELETE FROM messages WHERE id = ? AND session_id = ?"
