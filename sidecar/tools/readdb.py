"""Read-only access to a daemon's SQLite database, for the inspection commands.

Opened with ``mode=ro`` so that looking at a database can never change it, even while a
daemon writes to it (WAL lets a reader run beside the writer). Rows decode with the store's
own decoders, so what is read here is exactly what the engine reads.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import msgspec

from sidecar.engine.window import cut_reverted
from sidecar.model.messages import WithParts
from sidecar.model.parts import Part
from sidecar.model.session import Session
from sidecar.store import Key
from sidecar.store.store import decode_message, decode_part

_session_decoder = msgspec.json.Decoder(Session)


class DatabaseError(Exception):
    """The database is missing or not one of ours; the message says which file."""


@dataclass(frozen=True)
class SessionRow:
    session: Session
    messages: int


def open_ro(path: Path) -> sqlite3.Connection:
    if not path.exists():
        raise DatabaseError(f"{path}: no such database")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute("SELECT 1 FROM sessions LIMIT 1").fetchall()
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise DatabaseError(f"{path}: not a compaction-sidecar database ({exc})") from None
    return conn


def list_sessions(conn: sqlite3.Connection) -> list[SessionRow]:
    """Every session, most recently active first, with its message count."""
    rows = conn.execute(
        "SELECT s.data, s.updated, (SELECT count(*) FROM messages m WHERE m.session_id = s.id) "
        "FROM sessions s ORDER BY s.updated DESC, s.id DESC"
    ).fetchall()
    out: list[SessionRow] = []
    for data, updated, count in rows:
        session = _session_decoder.decode(data)
        session.time.updated = max(session.time.updated, updated)
        out.append(SessionRow(session, int(count)))
    return out


def find_session(conn: sqlite3.Connection, ref: str) -> Session:
    """A session by id, a unique id prefix (ids are long to type), or its title."""
    rows = conn.execute("SELECT data, updated FROM sessions WHERE id = ?", (ref,)).fetchall()
    if not rows:
        like = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = conn.execute(
            "SELECT data, updated FROM sessions WHERE id LIKE ? ESCAPE '\\' LIMIT 2", (like,)
        ).fetchall()
        if len(rows) > 1:
            raise DatabaseError(f"session {ref!r} is ambiguous: give more of its id")
    if not rows:  # a title, or the start of one, when it names one session
        rows = (
            conn.execute(
                "SELECT data, updated FROM sessions WHERE json_extract(data, '$.title') = ? "
                "LIMIT 2",
                (ref,),
            ).fetchall()
            or conn.execute(
                "SELECT data, updated FROM sessions "
                "WHERE substr(json_extract(data, '$.title'), 1, ?) = ? LIMIT 2",
                (len(ref), ref),
            ).fetchall()
        )
        if len(rows) > 1:
            raise DatabaseError(f"{ref!r} names more than one session: give its id")
    if not rows:
        raise DatabaseError(f"no session {ref!r}")
    session = _session_decoder.decode(rows[0][0])
    session.time.updated = max(session.time.updated, rows[0][1])
    return session


def load_history(conn: sqlite3.Connection, session: Session) -> list[WithParts]:
    """Every visible message of ``session``, chronological, revert applied (as the engine)."""
    msgs = conn.execute(
        "SELECT id, data, created FROM messages WHERE session_id = ? ORDER BY created, id",
        (session.id,),
    ).fetchall()
    by_message: dict[str, list[Part]] = {}
    for mid, data in conn.execute(
        "SELECT message_id, data FROM parts WHERE session_id = ? ORDER BY message_id, id",
        (session.id,),
    ):
        by_message.setdefault(mid, []).append(decode_part(data))
    history = [
        WithParts(info=decode_message(data), parts=by_message.get(mid, [])) for mid, data, _ in msgs
    ]
    rkey: Key | None = None
    if session.revert is not None:
        rkey = next(
            (Key(c, i) for i, _, c in msgs if i == session.revert.message_id),
            None,
        )
    return cut_reverted(history, session, rkey)
