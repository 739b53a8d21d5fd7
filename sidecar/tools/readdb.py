"""Read-only access to a daemon's database, for the inspection commands.

A SQLite file is opened with ``mode=ro`` so that looking at a database can never change it,
even while a daemon writes to it (WAL lets a reader run beside the writer); a PostgreSQL URL
through ``pgread.PgReader`` (a read-only session, the same queries). Rows decode with the
store's own decoders, so what is read here is exactly what the engine reads.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import msgspec

from sidecar.engine.filter import filter_compacted
from sidecar.engine.window import cut_reverted
from sidecar.model.messages import WithParts
from sidecar.model.parts import Part
from sidecar.model.rpc import CompactionRecord
from sidecar.model.session import Session
from sidecar.store import Key
from sidecar.store.store import decode_message, decode_part
from sidecar.store.url import UnsupportedDatabase, is_postgres, redact, sqlite_path, unreachable

_session_decoder = msgspec.json.Decoder(Session)


class DatabaseError(Exception):
    """A failure reading the database (no such session...); the message says what."""


class CannotOpenDatabase(DatabaseError):
    """``--db`` names no usable database (missing, a directory, not ours, unreachable): a
    usage error, exit status 2, as ``serve`` gives for the same ``--db``."""


class Result(Iterable[Any], Protocol):
    def fetchall(self) -> list[Any]: ...
    def fetchone(self) -> Any: ...


class ReadConn(Protocol):
    """What the queries below use of a connection: ``sqlite3``'s surface."""

    def execute(self, sql: str, args: Sequence[Any] = ..., /) -> Result: ...
    def close(self) -> None: ...


def open_ro(db: str | Path) -> ReadConn:
    """A read-only connection to a SQLite file or a ``postgresql://`` database."""
    if is_postgres(db):
        return _open_pg(str(db))
    try:
        path = Path(sqlite_path(db))
    except UnsupportedDatabase as exc:
        raise CannotOpenDatabase(str(exc)) from None
    return _open_sqlite(path)


def _open_pg(url: str) -> ReadConn:
    from sidecar.tools.pgread import PgReader

    try:
        conn = PgReader(url)
    except Exception as exc:  # refused, unknown database, authentication...
        raise CannotOpenDatabase(
            f"{redact(url)}: cannot connect ({unreachable(url, exc)})"
        ) from None
    try:
        conn.execute("SELECT 1 FROM sessions LIMIT 1")
    except Exception as exc:
        conn.close()
        raise CannotOpenDatabase(
            f"{redact(url)}: not a compaction-sidecar database ({exc})"
        ) from None
    return conn


def _open_sqlite(path: Path) -> ReadConn:
    if not path.exists():
        raise CannotOpenDatabase(f"{path}: no such database")
    if not path.is_file():
        raise CannotOpenDatabase(f"{path}: not a database file")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise CannotOpenDatabase(f"{path}: cannot open ({exc})") from None
    try:
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute("SELECT 1 FROM sessions LIMIT 1").fetchall()
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise CannotOpenDatabase(f"{path}: not a compaction-sidecar database ({exc})") from None
    return conn


def list_sessions(conn: ReadConn) -> list[Session]:
    """Every session, most recently active first."""
    out: list[Session] = []
    for data, updated in conn.execute(
        "SELECT data, updated FROM sessions ORDER BY updated DESC, id DESC"
    ):
        session = _session_decoder.decode(data)
        session.time.updated = max(session.time.updated, updated)
        out.append(session)
    return out


def find_session(conn: ReadConn, ref: str) -> Session:
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


def load_history(conn: ReadConn, session: Session, start: Key | None = None) -> list[WithParts]:
    """Every visible message of ``session`` (from ``start`` on), chronological, revert applied
    (as the engine)."""
    cond = "session_id = ?"
    args: list[object] = [session.id]
    if start is not None:
        cond += " AND (created, id) >= (?, ?)"
        args += [start.created, start.id]
    msgs = conn.execute(
        f"SELECT id, data, created FROM messages WHERE {cond} ORDER BY created, id", args
    ).fetchall()
    by_message: dict[str, list[Part]] = {}
    for mid, data in conn.execute(
        f"SELECT p.message_id, p.data FROM parts p WHERE p.message_id IN "
        f"(SELECT id FROM messages WHERE {cond}) ORDER BY p.message_id, p.id",
        args,
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


def load_diagnostics(conn: ReadConn, session: Session) -> dict[str, CompactionRecord]:
    """Each compaction's stored diagnostics by summary message id (none in a database from
    before they were recorded)."""
    try:
        rows = conn.execute(
            "SELECT data FROM compactions WHERE session_id = ?", [session.id]
        ).fetchall()
    except Exception:  # a database older than schema v3: no table
        return {}
    records = [_record_decoder.decode(r[0]) for r in rows]
    return {r.message_id: r for r in records}


_record_decoder = msgspec.json.Decoder(CompactionRecord)


@dataclass(frozen=True)
class Overview:
    """What ``sessions`` shows of one session, read without its whole history."""

    window: list[WithParts]
    messages: int
    compactions: int
    last_activity: int


def overview(conn: ReadConn, session: Session) -> Overview:
    """The current window (from the newest marker whose summary finished, or the collapse
    tail it points back at: what ``window.load_window`` reads), plus counts from SQL."""
    start: Key | None = None
    if session.revert is None:  # with a revert point the cut needs the whole history
        row = conn.execute(
            "SELECT m.created, m.id, json_extract(p.data, '$.tailStartID') "
            "FROM parts p JOIN messages m ON m.id = p.message_id "
            "WHERE p.session_id = ? AND p.type = 'compaction' AND m.role = 'user' "
            "AND EXISTS (SELECT 1 FROM messages s WHERE s.parent_id = m.id "
            "AND s.summary_ok = 1 AND s.session_id = m.session_id) "
            "ORDER BY m.created DESC, m.id DESC LIMIT 1",
            (session.id,),
        ).fetchone()
        if row is not None:
            start = Key(row[0], row[1])
            if row[2]:
                tail = conn.execute(
                    "SELECT created, id FROM messages WHERE id = ? AND session_id = ?",
                    (row[2], session.id),
                ).fetchone()
                if tail is not None and Key(*tail) < start:
                    start = Key(*tail)
    window = filter_compacted(load_history(conn, session, start))
    count, summaries, newest = conn.execute(
        "SELECT count(*), coalesce(sum(summary_ok), 0), coalesce(max(created), 0) "
        "FROM messages WHERE session_id = ?",
        (session.id,),
    ).fetchone()
    last = max([session.time.updated, newest, *(m.info.time.completed or 0 for m in window)])
    return Overview(window, int(count), int(summaries), int(last))
