"""Read-only access to a daemon's database, for the inspection commands.

Reads go through a ``Store`` opened ``readonly`` (a SQLite file with ``mode=ro``, a read-only
PostgreSQL session: looking can never change a database, even while a daemon writes to it),
with the engine's own window loading, so what is read here is exactly what the engine reads,
on either backend. The commands are synchronous: ``Reader`` runs the store on a private loop.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from sidecar.engine import window
from sidecar.model.messages import WithParts
from sidecar.model.rpc import CompactionRecord
from sidecar.model.session import Session
from sidecar.store import CannotOpen, Store, UnsupportedDatabase

T = TypeVar("T")


class DatabaseError(Exception):
    """A failure reading the database (no such session...); the message says what."""


class CannotOpenDatabase(DatabaseError):
    """``--db`` names no usable database (missing, a directory, not ours, unreachable, another
    schema version): a usage error, exit status 2, as ``serve`` gives for the same ``--db``."""


async def open_store(db: str | Path) -> Store:
    """The read-only store a command reads ``db`` through (from async code: ``replay``)."""
    try:
        store = await Store.open(db, readonly=True)
    except (CannotOpen, UnsupportedDatabase) as exc:
        raise CannotOpenDatabase(str(exc)) from None
    # No reply to fit: a command reads a whole history, as the engine's summaries may.
    store.max_read_bytes = sys.maxsize
    return store


class Reader:
    """A read-only ``Store`` and the event loop it runs on, in a thread of its own: callable
    from plain code (the commands) and from code that runs in an event loop (tests)."""

    def __init__(self, db: str | Path) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="readdb", daemon=True)
        self._thread.start()
        try:
            self.store = self.run(open_store(db))
        except BaseException:
            self._stop()
            raise

    def run(self, aw: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(aw, self._loop).result()

    def close(self) -> None:
        try:
            self.run(self.store.close())
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


def open_ro(db: str | Path) -> Reader:
    """A read-only reader of a SQLite file or a ``postgresql://`` database."""
    return Reader(db)


def list_sessions(conn: Reader) -> list[Session]:
    """Every session, most recently active first."""
    return conn.run(conn.store.sessions_by_activity())


def find_session(conn: Reader, ref: str) -> Session:
    """A session by id, a unique id prefix (ids are long to type), or its title."""
    return conn.run(_find_session(conn.store, ref))


async def _find_session(store: Store, ref: str) -> Session:
    session = await store.get_session(ref)
    if session is not None:
        return session
    found = await store.sessions_by_prefix(ref, limit=2)
    if len(found) > 1:
        raise DatabaseError(f"session {ref!r} is ambiguous: give more of its id")
    if not found:  # a title, or the start of one, when it names one session
        every = await store.sessions_by_activity()
        found = [s for s in every if s.title == ref] or [
            s for s in every if s.title.startswith(ref)
        ]
        if len(found) > 1:
            raise DatabaseError(f"{ref!r} names more than one session: give its id")
    if not found:
        raise DatabaseError(f"no session {ref!r}")
    return found[0]


def load_history(conn: Reader, session: Session) -> list[WithParts]:
    """Every visible message of ``session``, chronological, revert applied (as the engine)."""
    return conn.run(window.load_history(conn.store, session))


def load_diagnostics(conn: Reader, session: Session) -> dict[str, CompactionRecord]:
    """Each compaction's stored diagnostics by summary message id (``session/compactions``'
    rows; a database from before they were recorded is at an older schema, refused on open)."""
    records = [_record_decoder.decode(r) for r in conn.run(conn.store.compactions(session.id))]
    return {r.message_id: r for r in records}


_record_decoder = msgspec.json.Decoder(CompactionRecord)


def load_pinned(conn: Reader, session: Session) -> frozenset[str]:
    """The session's pinned part ids (``session/pins``)."""
    return conn.run(conn.store.pinned_ids(session.id))


@dataclass(frozen=True)
class Overview:
    """What ``sessions`` shows of one session, read without its whole history."""

    window: list[WithParts]
    messages: int
    compactions: int
    last_activity: int


def overview(conn: Reader, session: Session) -> Overview:
    """The current window (``window.load_window``: from the newest marker whose summary
    finished, or the collapse tail it points back at), plus counts from SQL."""
    msgs = conn.run(window.load_window(conn.store, session))
    tally = conn.run(conn.store.tally(session.id))
    last = max([session.time.updated, tally.newest, *(m.info.time.completed or 0 for m in msgs)])
    return Overview(msgs, tally.messages, tally.summaries, last)
