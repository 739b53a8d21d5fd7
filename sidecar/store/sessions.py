"""Sessions and messages: their rows, written and read (``Store`` delegates here).

A session's ``updated`` column is raised by each message's ingest (``TOUCH_SESSION``), not in
its JSON: a read raises ``time.updated`` to it (``session_of``). Writes tell the window cache
exactly what they changed, or drop the session's entry when they cannot know.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec

from sidecar.errors import Conflict
from sidecar.model.messages import AssistantMessage, Message
from sidecar.model.parts import Part
from sidecar.model.session import Session
from sidecar.store.backend import Done, Statement
from sidecar.store.cache import Key
from sidecar.store.rows import (
    Tables,
    Write,
    decode_message,
    message_error,
    message_row,
    part_row,
    remembered,
    submit_then,
)
from sidecar.store.statements import DELETE_MESSAGE, TOUCH_SESSION, UPSERT_MESSAGE, UPSERT_PART

_session_decoder = msgspec.json.Decoder(Session)
_encoder = msgspec.json.Encoder()

#: A page of ``list_sessions`` holds at most this many sessions.
MAX_SESSIONS = 10_000

UPSERT_SESSION = (
    "INSERT INTO sessions (id, parent_id, created, updated, data) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
    "parent_id = excluded.parent_id, updated = excluded.updated, data = excluded.data"
)
_GET_SESSION = "SELECT data, updated FROM sessions WHERE id = ?"
_LIST_SESSIONS = "SELECT data, updated, created, id FROM sessions{where} "
_LIST_AFTER = " WHERE (created, id) < (?, ?)"
_LIST_ORDER = "ORDER BY created DESC, id DESC LIMIT ?"
_BY_ACTIVITY = "SELECT data, updated FROM sessions ORDER BY updated DESC, id DESC"
_BY_PREFIX = "SELECT data, updated FROM sessions WHERE id LIKE ? ESCAPE '\\' LIMIT ?"
_DELETE_SESSION = "DELETE FROM sessions WHERE id = ?"
_COUNT_SESSIONS = "SELECT count(*) FROM sessions"
_TALLY = (
    "SELECT count(*), coalesce(sum(summary_ok), 0), coalesce(max(created), 0) "
    "FROM messages WHERE session_id = ?"
)
_GET_MESSAGE = "SELECT data FROM messages WHERE id = ?"
_MESSAGE_KEY = "SELECT created, id FROM messages WHERE id = ?"
_KEYS_BETWEEN = (
    "SELECT created, id FROM messages WHERE session_id = ? "
    "AND (created, id) > (?, ?) AND (created, id) < (?, ?) ORDER BY created, id"
)
_DELETE_PARTS_FROM = "DELETE FROM parts WHERE message_id = ? AND id >= ?"
_DELETE_AFTER = "DELETE FROM messages WHERE session_id = ? AND (created, id) > (?, ?)"
_DELETE_FROM = "DELETE FROM messages WHERE session_id = ? AND (created, id) >= (?, ?)"


class Tally(NamedTuple):
    """What ``Store.tally`` counts of one session's messages."""

    messages: int
    summaries: int  # finished summaries: the compactions that took effect
    newest: int  # ``time.created`` of the newest message, 0 when there is none


# -- sessions ------------------------------------------------------------------------------------


def session_statement(session: Session) -> Statement:
    """The upsert of one session row (``put_session``, ``put_sessions_with``)."""
    row = (
        session.id,
        session.parent_id,
        session.time.created,
        session.time.updated,
        _encoder.encode(session).decode(),
    )
    return (UPSERT_SESSION, [row])


def session_of(data: str, updated: int) -> Session:
    """A stored session, its ``time.updated`` raised to the row's (a message's ingest touches
    the column, not the JSON)."""
    session = _session_decoder.decode(data)
    session.time.updated = max(session.time.updated, updated)
    return session


async def put_session(t: Tables, session: Session) -> None:
    await t.backend.submit([session_statement(session)])
    t.cache.session_written(session.id)


async def get_session(t: Tables, session_id: str) -> Session | None:
    """Read several times a turn: ``remembered`` until its row is written (a message raises
    its ``updated``)."""

    async def read() -> tuple[Session | None, tuple[str, ...]]:
        rows = await t.backend.query_point(_GET_SESSION, (session_id,))
        return (session_of(*rows[0]) if rows else None), ()

    return await remembered(t, session_id, "session", read)


async def list_sessions(
    t: Tables, limit: int | None, cursor: str | None
) -> tuple[list[Session], str | None]:
    limit = min(limit or MAX_SESSIONS, MAX_SESSIONS)
    args: list[Any] = []
    where = ""
    if cursor:
        key = Key.parse(cursor)
        where = _LIST_AFTER
        args += [key.created, key.id]
    sql = _LIST_SESSIONS.format(where=where) + _LIST_ORDER
    rows = list(await t.backend.query(sql, [*args, limit + 1]))
    more = len(rows) > limit
    rows = rows[:limit]
    sessions = [session_of(data, updated) for data, updated, _, _ in rows]
    nxt = Key(rows[-1][2], rows[-1][3]).cursor() if more and rows else None
    return sessions, nxt


async def sessions_by_activity(t: Tables) -> list[Session]:
    rows = await t.backend.query(_BY_ACTIVITY)
    return [session_of(data, updated) for data, updated in rows]


async def sessions_by_prefix(t: Tables, prefix: str, limit: int) -> list[Session]:
    like = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = await t.backend.query(_BY_PREFIX, (like, limit))
    return [session_of(data, updated) for data, updated in rows]


async def delete_session(t: Tables, session_id: str) -> bool:
    counts = await t.backend.submit([(_DELETE_SESSION, [(session_id,)])], needs_counts=True)
    t.cache.invalidate(session_id)
    return counts[0] > 0


async def count_sessions(t: Tables) -> int:
    rows = await t.backend.query(_COUNT_SESSIONS)
    return int(rows[0][0])


async def tally(t: Tables, session_id: str) -> Tally:
    rows = await t.backend.query(_TALLY, (session_id,))
    count, summaries, newest = rows[0]
    return Tally(int(count), int(summaries), int(newest))


# -- messages ------------------------------------------------------------------------------------


def _message_op(t: Tables, info: Message, raw: bytes | str) -> Write:
    row = message_row(info, raw)
    touch = (info.time.created, info.session_id, info.time.created)
    statements: list[Statement] = [(UPSERT_MESSAGE, [row]), (TOUCH_SESSION, [touch])]
    return statements, functools.partial(_message_written, t, info, row)


def moves(info: Message) -> bool:
    """Can this message's write move its session's compaction boundary by what it is (a user
    message may be a marker, a summary may finish)? (A rewrite of a boundary's own marker or
    summary as anything else is watched by id: ``WindowCache.remember``.)"""
    return not isinstance(info, AssistantMessage) or bool(info.summary)


def _message_written(t: Tables, info: Message, row: tuple[Any, ...], counts: list[int]) -> None:
    if counts[0] > 0:
        key = Key(info.time.created, info.id)
        t.cache.message_written(info.session_id, key, row[-1], moves=moves(info), touched=True)
    else:  # merged with others: which rows applied is unknown
        t.cache.invalidate(info.session_id)


async def put_message(t: Tables, info: Message, raw: bytes | str) -> None:
    statements, written = _message_op(t, info, raw)
    written(await t.backend.submit(statements, on_integrity=message_error(info)))


def put_message_then(t: Tables, info: Message, raw: bytes | str, then: Done[None]) -> None:
    op = functools.partial(_message_op, t, info, raw)
    submit_then(t.backend, op, message_error(info), then)


def _rows_of(
    messages: Sequence[tuple[Message, bytes | str]], parts: Sequence[tuple[Part, bytes | str]]
) -> list[Statement]:
    """The upserts of these messages and parts (none for an empty list)."""
    statements: list[Statement] = []
    if messages:
        statements.append((UPSERT_MESSAGE, [message_row(m, r) for m, r in messages]))
    if parts:
        statements.append((UPSERT_PART, [part_row(p, r) for p, r in parts]))
    return statements


async def put_many(
    t: Tables,
    messages: Sequence[tuple[Message, bytes | str]],
    parts: Sequence[tuple[Part, bytes | str]],
) -> None:
    statements = _rows_of(messages, parts)
    if not statements:
        return
    counts = await t.backend.submit(statements)
    if any(n != len(rows) for n, (_, rows) in zip(counts, statements, strict=True)):
        # merged with others, and some row did not apply: which is unknown
        for sid in {m.session_id for m, _ in messages} | {p.session_id for p, _ in parts}:
            t.cache.invalidate(sid)
        return
    # Every row applied: the cache takes them as it takes single writes (a compaction's
    # marker and summary no longer send the next read of the window to SQLite).
    rows = [row for _, stmt_rows in statements for row in stmt_rows]
    for (info, _), row in zip(messages, rows[: len(messages)], strict=True):
        key = Key(info.time.created, info.id)
        t.cache.message_written(info.session_id, key, row[-1], moves=moves(info))
    for (part, _), row in zip(parts, rows[len(messages) :], strict=True):
        t.cache.part_written(part.session_id, part.message_id, part.id, row[-1], row[3])


async def put_sessions_with(
    t: Tables,
    batch: Sequence[
        tuple[Session, Sequence[tuple[Message, bytes | str]], Sequence[tuple[Part, bytes | str]]]
    ],
) -> None:
    statements: list[Statement] = []
    for session, messages, parts in batch:
        statements.append(session_statement(session))
        statements += _rows_of(messages, parts)
    ids = ", ".join(repr(s.id) for s, _, _ in batch[:3]) + (", ..." if len(batch) > 3 else "")
    await t.backend.submit(
        statements,
        on_integrity=lambda exc: Conflict(f"session {ids} not stored: {exc}"),
        needs_counts=True,
    )
    for session, _, _ in batch:
        t.cache.invalidate(session.id)


async def get_message(t: Tables, message_id: str) -> tuple[Message, str] | None:
    if "\x00" in message_id:  # no stored id holds one (``rows._nul_in``)
        return None
    rows = await t.backend.query(_GET_MESSAGE, (message_id,))
    return (decode_message(rows[0][0]), rows[0][0]) if rows else None


async def message_key(t: Tables, message_id: str) -> Key | None:
    if "\x00" in message_id:
        return None
    rows = await t.backend.query_point(_MESSAGE_KEY, (message_id,))
    return Key(*rows[0]) if rows else None


async def keys_between(t: Tables, session_id: str, after: Key, before: Key) -> list[Key]:
    rows = await t.backend.query_point(
        _KEYS_BETWEEN, (session_id, after.created, after.id, before.created, before.id)
    )
    return [Key(created, mid) for created, mid in rows]


async def remove_message(t: Tables, session_id: str, message_id: str) -> bool:
    counts = await t.backend.submit(
        [(DELETE_MESSAGE, [(message_id, session_id)])], needs_counts=True
    )
    if counts[0]:
        t.cache.message_removed(session_id, message_id)
    return counts[0] > 0


async def delete_from(
    t: Tables, session_id: str, start: Key, part_cut: tuple[str, str] | None
) -> int:
    statements: list[Statement] = []
    if part_cut is not None:
        statements.append((_DELETE_PARTS_FROM, [part_cut]))
        statements.append((_DELETE_AFTER, [(session_id, start.created, start.id)]))
    else:
        statements.append((_DELETE_FROM, [(session_id, start.created, start.id)]))
    counts = await t.backend.submit(statements, needs_counts=True)
    t.cache.invalidate(session_id)
    return counts[-1]
