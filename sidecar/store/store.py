"""The session store: sessions, messages and parts, over a SQLite or PostgreSQL ``Backend``.

Stored ``data`` is the client's JSON as given (plus the ids and times the daemon
filled in), so fields this version does not model survive a round trip; indexed columns are
copied out of it. Messages order by ``(time.created, id)`` — a ``Key`` — never by id alone.
No compaction logic lives here: the store answers range queries the engine asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import msgspec

import sidecar.store.holder as holder
from sidecar.errors import (
    Conflict,
    InvalidParams,
    TooLarge,
    Unavailable,
    UnknownMessage,
    UnknownSession,
)
from sidecar.model.config import DEFAULT_MAX_REPLY_BYTES
from sidecar.model.conversation import is_finished_summary
from sidecar.model.jsonguard import flatten_deep
from sidecar.model.messages import AssistantMessage, Message, UserMessage, WithParts
from sidecar.model.parts import Part, ToolCompleted, ToolPart
from sidecar.model.rpc import StoredMessage
from sidecar.model.session import Session
from sidecar.store.backend import Backend, Done, OnIntegrity, Row, Statement
from sidecar.store.cache import Decoded, Key, PageCursor, WindowCache
from sidecar.store.history import Found, backfill, search
from sidecar.store.indexer import Indexer
from sidecar.store.statements import TOUCH_SESSION, UPSERT_MESSAGE, UPSERT_PART

log = logging.getLogger("sidecar.store")

_message_decoder = msgspec.json.Decoder(Message)
_part_decoder = msgspec.json.Decoder(Part)
_session_decoder = msgspec.json.Decoder(Session)
_encoder = msgspec.json.Encoder()
T = TypeVar("T")

# Rows nested deeper than any frame the daemon now accepts (``server.maxDepth`` is at most
# this) were written before the door checked depth. What the daemon stored itself is never
# checked again: a row is decoded as it is, and only one whose decoding recursed too deep (such
# an old row) is decoded again with its over-deep values as null.
STORED_MAX_DEPTH = 512

# Rows fetched per round trip when the store walks a session backwards.
PAGE = 128
# ``mark_compacted`` reads back at most this many parts on the loop (``query_point``).
INLINE_READ_BACK = 16
# A ``session/messages`` page holds at most this many messages and parts (PROTOCOL.md).
MAX_PAGE_MESSAGES = 10_000
MAX_PAGE_PARTS = 10_000


class _Budget:
    """Bytes a read may still load before it is refused as too large to serve."""

    __slots__ = ("left", "limit", "session_id")

    def __init__(self, limit: int, session_id: str) -> None:
        self.left = self.limit = limit
        self.session_id = session_id

    def spend(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise TooLarge(
                f"the context window of session {self.session_id!r} is over {self.limit} bytes "
                "(config server.maxReplyBytes): compact it (session/compact), or read its "
                "history a page at a time with session/messages {limit, partLimit, cursor}"
            )


class Boundary(NamedTuple):
    """The latest compaction marker whose summary finished without error."""

    marker: Key
    tail_start_id: str | None


class Tally(NamedTuple):
    """What ``Store.tally`` counts of one session's messages."""

    messages: int
    summaries: int  # finished summaries: the compactions that took effect
    newest: int  # ``time.created`` of the newest message, 0 when there is none


is_summary_ok = is_finished_summary  # the column the boundary query reads


def shallow_json(raw: str | bytes | msgspec.Raw) -> bytes:
    """An old over-deep row's JSON with values nested past ``STORED_MAX_DEPTH`` as null: what
    a read decodes once decoding the row as it is recursed too deep (``decode_stored``)."""
    data = raw.encode() if isinstance(raw, str) else bytes(raw)
    return flatten_deep(data, STORED_MAX_DEPTH)


def decode_stored(decoder: msgspec.json.Decoder[T], raw: str | bytes | msgspec.Raw) -> T:
    """A stored row, decoded with no check first (the door checked what the daemon stored);
    only a row older than that check can recurse too deep, and is read flattened."""
    try:
        return decoder.decode(raw)
    except RecursionError:
        return decoder.decode(shallow_json(raw))


# Ids of the old over-deep rows met so far (``decode_stored`` flattened them): served from
# their decoded Structs, not as stored, so a client decodes them too. Only such rows land here.
_flattened: set[str] = set()


def _decode_row(decoder: msgspec.json.Decoder[T], raw: str | bytes) -> T:
    try:
        return decoder.decode(raw)
    except RecursionError:
        row = decoder.decode(shallow_json(raw))
        _flattened.add(row.id)  # type: ignore[attr-defined]  # messages and parts have ids
        return row


def served(raw: str) -> msgspec.Raw:
    """Stored JSON as the daemon serves it: as stored (the row's own str when it can be, no
    copy: an ASCII str's data is its UTF-8), never scanned again."""
    return msgspec.Raw(raw)


def decode_message(raw: str | bytes) -> Message:
    message: Message = _decode_row(_message_decoder, raw)
    return message


def decode_part(raw: str | bytes) -> Part:
    part: Part = _decode_row(_part_decoder, raw)
    return part


def may_keep_prune_mark(part: Part) -> bool:
    """A completed tool output written without ``state.time.compacted``: if the stored part
    was pruned and has the same output, the write keeps its mark (``Store.prune_mark_of``)."""
    return (
        isinstance(part, ToolPart)
        and isinstance(part.state, ToolCompleted)
        and not part.state.time.compacted
        and bool(part.id)
    )


def _text(raw: bytes | str) -> str:
    return raw if isinstance(raw, str) else raw.decode()


def _nul_in(what: str, ids: Mapping[str, str | None]) -> InvalidParams:
    """Ids are columns; PostgreSQL's text cannot hold U+0000 and no client means one. Checked
    by the store on the ingest path (a plain ``in``) rather than by a pattern on the Struct (a
    regex per id field costs more than the rest of the decode); this names the field."""
    field = next(k for k, v in ids.items() if v and "\x00" in v)
    return InvalidParams(
        f"invalid params: `$.{what}.{field}` holds the character U+0000, which an id may not"
    )


def message_row(info: Message, raw: bytes | str) -> tuple[Any, ...]:
    parent = info.parent_id if isinstance(info, AssistantMessage) else None
    if "\x00" in info.id or "\x00" in info.session_id or (parent and "\x00" in parent):
        raise _nul_in("message", {"id": info.id, "sessionID": info.session_id, "parentID": parent})
    return (
        info.id,
        info.session_id,
        info.time.created,
        "user" if isinstance(info, UserMessage) else "assistant",
        parent,
        1 if is_summary_ok(info) else 0,
        _text(raw),
    )


class PartKey(NamedTuple):
    """What the store needs of a part besides its JSON: a large part's decoded Struct (its
    text, its output) need not stay alive while its row is written (``part_key``)."""

    id: str
    message_id: str
    session_id: str
    tag: Any


def part_key(part: Part) -> PartKey:
    return PartKey(part.id, part.message_id, part.session_id, type(part).__struct_config__.tag)


def part_row(part: Part | PartKey, raw: bytes | str) -> tuple[Any, ...]:
    if "\x00" in part.id or "\x00" in part.session_id or "\x00" in part.message_id:
        ids = {"id": part.id, "sessionID": part.session_id, "messageID": part.message_id}
        raise _nul_in("part", ids)
    tag = part.tag if isinstance(part, PartKey) else type(part).__struct_config__.tag
    return (part.id, part.message_id, part.session_id, tag, _text(raw))


def _session_statement(session: Session) -> Statement:
    """The upsert of one session row (``put_session``, ``put_session_with``)."""
    return (
        "INSERT INTO sessions (id, parent_id, created, updated, data) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
        "parent_id = excluded.parent_id, updated = excluded.updated, data = excluded.data",
        [
            (
                session.id,
                session.parent_id,
                session.time.created,
                session.time.updated,
                _encoder.encode(session).decode(),
            )
        ],
    )


#: An op's statements, and what its commit's row counts are told to (the cache's update).
_Write = tuple[list[Statement], Callable[[list[int]], None]]


def message_error(info: Message) -> Callable[[Exception], Exception]:
    """What a client sees when ``info``'s row breaks an integrity rule."""

    def mapped(exc: Exception) -> Exception:
        if "sidecar:message-session" in str(exc):
            return Conflict(f"message id {info.id!r} belongs to another session")
        return UnknownSession(info.session_id)

    return mapped


def part_error(part: Part | PartKey) -> Callable[[Exception], Exception]:
    """What a client sees when ``part``'s row breaks an integrity rule."""

    def mapped(exc: Exception) -> Exception:
        text = str(exc)
        if "sidecar:part-message" in text:
            return Conflict(f"part id {part.id!r} belongs to another message")
        if "sidecar:part-session" in text:
            return InvalidParams(
                f"invalid params: `$.part.sessionID` {part.session_id!r} is not the session "
                f"of message {part.message_id!r}"
            )
        return UnknownMessage(part.message_id)

    return mapped


class Store:
    """Async façade over the database; safe to share between all connections of the daemon.

    The queries live here, once; a ``Backend`` (SQLite or PostgreSQL) runs them.
    """

    def __init__(self, backend: Backend) -> None:
        self._db = backend
        self.cache = WindowCache()
        backend.watch(self.cache)
        # The largest window or page a read loads (the server sets ``server.maxReplyBytes``).
        self.max_read_bytes = DEFAULT_MAX_REPLY_BYTES
        # The first-open indexing of history (``start_history_backfill``), and who hears its
        # progress ``(indexed, total)`` (the server: ``$/progress`` to every client).
        self._backfill: asyncio.Future[None] | None = None
        self.on_backfill: Callable[[int, int], None] | None = None
        # The history index's background batch (none for a read-only store): told of every
        # commit that stored a write; a search catches it up first.
        self.indexer: Indexer | None = None
        if backend.history_batch:
            self.indexer = Indexer(backend.submit_background, backend.history_batch)
            backend.on_commit = self.indexer.written

    @property
    def backend(self) -> Backend:
        return self._db

    @property
    def path(self) -> str:
        """The database as ``daemon/status`` shows it (a file, or a URL without password)."""
        return self._db.display

    # -- lifecycle -----------------------------------------------------------------------------

    @classmethod
    async def open(
        cls, db: str | Path, *, synchronous: str = "NORMAL", readonly: bool = False
    ) -> Store:
        """Open a SQLite file, or a ``postgresql://`` URL (creating and migrating as needed).

        ``synchronous`` is SQLite's durability setting (``NORMAL``: durable against a crash of
        the process; ``FULL``: also against power loss); PostgreSQL commits are durable.
        ``readonly`` (the look-at commands): an existing database at this schema version, read
        without a writer, a migration or a checkpoint (``mode=ro``, a read-only PostgreSQL
        session); ``url.CannotOpen`` says what is wrong with any other, and writes raise
        ``backend.ReadOnlyStore``.
        """
        from sidecar.store.opener import open_backend

        store = cls(await open_backend(db, synchronous=synchronous, readonly=readonly))
        if not readonly:
            store.start_history_backfill()
            if store.indexer is not None:
                store.indexer.written()  # what a crash left noted is indexed soon
        return store

    async def close(self) -> None:
        task = self._backfill
        if task is not None and not task.done():
            task.cancel()  # how far it got is stored: the next open resumes there
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.indexer is not None:
            await self.indexer.close()
        await self._db.close()

    def start_history_backfill(self) -> None:
        """Index, in the background, the parts a database upgraded to the search index held
        (``history.backfill``); searches wait for it, so they never see a partial index."""
        self._backfill = asyncio.ensure_future(self._run_backfill())

    async def _run_backfill(self) -> None:
        started = time.monotonic()

        def report(indexed: int, total: int) -> None:
            if self.on_backfill is not None:
                self.on_backfill(indexed, total)

        try:
            total = await backfill(self._db, report)
        except Exception as exc:
            if isinstance(exc, Unavailable):
                log.warning("history index: backfill stopped (%s); the next open resumes", exc)
            else:
                log.exception("history index: backfill failed; the next open resumes")
            return
        if total:
            log.warning(
                "history index: indexed %d stored parts in %.1f s",
                total,
                time.monotonic() - started,
            )

    @property
    def commits(self) -> int:
        return self._db.commits

    def commit_queued(self) -> None:
        """Commit the writes queued so far now rather than on the next loop iteration."""
        self._db.commit_queued()

    def set_may_join(self, probe: Callable[[], bool]) -> None:
        """Tell the writer whether another write could still join one submitted now."""
        self._db.may_join = probe

    # -- sessions ------------------------------------------------------------------------------

    async def put_session(self, session: Session) -> None:
        await self._db.submit([_session_statement(session)])

    async def get_session(self, session_id: str) -> Session | None:
        rows = await self._db.query_point(
            "SELECT data, updated FROM sessions WHERE id = ?", (session_id,)
        )
        return _session_of(*rows[0]) if rows else None

    async def require_session(self, session_id: str) -> Session:
        session = await self.get_session(session_id)
        if session is None:
            raise UnknownSession(session_id)
        return session

    async def list_sessions(
        self, limit: int | None = None, cursor: str | None = None
    ) -> tuple[list[Session], str | None]:
        """Newest first by ``(created, id)``; ``nextCursor`` continues after the last one. A
        page holds at most ``MAX_PAGE_MESSAGES`` sessions."""
        limit = min(limit or MAX_PAGE_MESSAGES, MAX_PAGE_MESSAGES)
        sql = "SELECT data, updated, created, id FROM sessions"
        args: list[Any] = []
        if cursor:
            key = Key.parse(cursor)
            sql += " WHERE (created, id) < (?, ?)"
            args += [key.created, key.id]
        sql += " ORDER BY created DESC, id DESC LIMIT ?"
        rows = list(await self._db.query(sql, [*args, limit + 1]))
        more = len(rows) > limit
        rows = rows[:limit]
        sessions = [_session_of(data, updated) for data, updated, _, _ in rows]
        nxt = Key(rows[-1][2], rows[-1][3]).cursor() if more and rows else None
        return sessions, nxt

    async def sessions_by_activity(self) -> list[Session]:
        """Every session, most recently active first (the ``sessions`` command)."""
        rows = await self._db.query(
            "SELECT data, updated FROM sessions ORDER BY updated DESC, id DESC"
        )
        return [_session_of(data, updated) for data, updated in rows]

    async def sessions_by_prefix(self, prefix: str, limit: int) -> list[Session]:
        """At most ``limit`` sessions whose id starts with ``prefix`` (ids are long to type)."""
        like = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = await self._db.query(
            "SELECT data, updated FROM sessions WHERE id LIKE ? ESCAPE '\\' LIMIT ?",
            (like, limit),
        )
        return [_session_of(data, updated) for data, updated in rows]

    async def delete_session(self, session_id: str) -> bool:
        counts = await self._db.submit(
            [("DELETE FROM sessions WHERE id = ?", [(session_id,)])], needs_counts=True
        )
        self.cache.invalidate(session_id)
        return counts[0] > 0

    # -- messages and parts --------------------------------------------------------------------

    def _message_op(self, info: Message, raw: bytes | str) -> _Write:
        row = message_row(info, raw)
        touch = (info.time.created, info.session_id, info.time.created)
        statements: list[Statement] = [(UPSERT_MESSAGE, [row]), (TOUCH_SESSION, [touch])]
        return statements, functools.partial(self._message_written, info, row)

    async def put_message(self, info: Message, raw: bytes | str) -> None:
        statements, written = self._message_op(info, raw)
        written(await self._db.submit(statements, on_integrity=message_error(info)))

    def put_message_then(self, info: Message, raw: bytes | str, then: Done[None]) -> None:
        """``put_message`` for callers without a task (see ``put_part_then``)."""
        self._submit_then(functools.partial(self._message_op, info, raw), message_error(info), then)

    def _message_written(self, info: Message, row: tuple[Any, ...], counts: list[int]) -> None:
        if counts[0] > 0:
            self.cache.message_written(info.session_id, Key(info.time.created, info.id), row[-1])
        else:  # merged with others: which rows applied is unknown
            self.cache.invalidate(info.session_id)

    def _part_op(self, part: Part | PartKey, raw: bytes | str) -> _Write:
        row = part_row(part, raw)
        return [(UPSERT_PART, [row])], functools.partial(self._part_written, part, row)

    async def put_part(self, part: Part, raw: bytes | str) -> None:
        statements, written = self._part_op(part, raw)
        written(await self._db.submit(statements, on_integrity=part_error(part)))

    def put_part_then(self, part: Part | PartKey, raw: bytes | str, then: Done[None]) -> None:
        """``put_part`` for callers without a task: ``then(None, None)`` once the part is
        committed, ``then(None, exc)`` if it could not be (``backend.Done``). Called from the
        writer, right after the commit."""
        self._submit_then(functools.partial(self._part_op, part, raw), part_error(part), then)

    def _submit_then(
        self, op: Callable[[], _Write], on_integrity: OnIntegrity, then: Done[None]
    ) -> None:
        """``submit_then`` of ``op()``: a row that cannot be stored (``InvalidParams``) fails at
        once; after a commit the row counts go to the op's own callback, then ``then``."""
        try:
            statements, written = op()
        except InvalidParams as exc:
            then(None, exc)
            return

        def committed(counts: list[int], exc: BaseException | None) -> None:
            if exc is None:
                written(counts)
            then(None, exc)

        self._db.submit_then(statements, committed, on_integrity)

    def _part_written(self, part: Part | PartKey, row: tuple[Any, ...], counts: list[int]) -> None:
        if counts[0] > 0:
            self.cache.part_written(part.session_id, part.message_id, part.id, row[-1])
        else:  # merged with others: which rows applied is unknown
            self.cache.invalidate(part.session_id)

    async def put_many(
        self,
        messages: Sequence[tuple[Message, bytes | str]],
        parts: Sequence[tuple[Part, bytes | str]],
    ) -> None:
        """Several messages and parts in one transaction (markers, summaries, forks)."""
        statements: list[Statement] = []
        if messages:
            statements.append((UPSERT_MESSAGE, [message_row(m, r) for m, r in messages]))
        if parts:
            statements.append((UPSERT_PART, [part_row(p, r) for p, r in parts]))
        if statements:
            await self._db.submit(statements)
        for sid in {m.session_id for m, _ in messages} | {p.session_id for p, _ in parts}:
            self.cache.invalidate(sid)

    async def put_session_with(
        self,
        session: Session,
        messages: Sequence[tuple[Message, bytes | str]],
        parts: Sequence[tuple[Part, bytes | str]],
    ) -> None:
        """A whole session in one transaction (import): either all of it is stored or none."""
        await self.put_sessions_with([(session, messages, parts)])

    async def put_sessions_with(
        self,
        batch: Sequence[
            tuple[
                Session,
                Sequence[tuple[Message, bytes | str]],
                Sequence[tuple[Part, bytes | str]],
            ]
        ],
    ) -> None:
        """Several whole sessions in one transaction (an import of several files): all of
        them are stored or none, so a failed or interrupted import leaves nothing behind."""
        statements: list[Statement] = []
        for session, messages, parts in batch:
            statements.append(_session_statement(session))
            if messages:
                statements.append((UPSERT_MESSAGE, [message_row(m, r) for m, r in messages]))
            if parts:
                statements.append((UPSERT_PART, [part_row(p, r) for p, r in parts]))
        ids = ", ".join(repr(s.id) for s, _, _ in batch[:3]) + (", ..." if len(batch) > 3 else "")
        await self._db.submit(
            statements,
            on_integrity=lambda exc: Conflict(f"session {ids} not stored: {exc}"),
            needs_counts=True,
        )
        for session, _, _ in batch:
            self.cache.invalidate(session.id)

    async def get_message(self, message_id: str) -> tuple[Message, str] | None:
        if "\x00" in message_id:  # no stored id holds one (``_nul_in``)
            return None
        rows = await self._db.query("SELECT data FROM messages WHERE id = ?", (message_id,))
        return (decode_message(rows[0][0]), rows[0][0]) if rows else None

    async def get_part(self, part_id: str) -> tuple[Part, str] | None:
        if "\x00" in part_id:
            return None
        rows = await self._db.query("SELECT data FROM parts WHERE id = ?", (part_id,))
        return (decode_part(rows[0][0]), rows[0][0]) if rows else None

    async def prune_mark_of(self, part: Part) -> int | None:
        """The prune mark a write of ``part`` (``may_keep_prune_mark``) keeps: the stored
        part's ``state.time.compacted`` when it has one and the same output. A mirror that
        re-sends what its agent stored (after a restart, say) knows nothing of the daemon's
        prunes; only a changed output, or ``session/uncompact``, makes a pruned output new."""
        if not isinstance(part, ToolPart) or not isinstance(part.state, ToolCompleted):
            return None
        if "\x00" in part.id:
            return None
        rows = await self._db.query_point("SELECT data FROM parts WHERE id = ?", (part.id,))
        if not rows:
            return None
        try:  # only the fields needed: a sixth of a whole part's decode
            old = decode_stored(_mark_decoder, rows[0][0])
        except (msgspec.DecodeError, msgspec.ValidationError):  # a row no write would make now
            return None
        state = old.state
        if (
            old.type == "tool"
            and old.messageID == part.message_id
            and state is not None
            and state.status == "completed"
            and state.time is not None
            and state.time.compacted
            and state.output == part.state.output
        ):
            return state.time.compacted
        return None

    async def message_key(self, message_id: str) -> Key | None:
        if "\x00" in message_id:
            return None
        rows = await self._db.query_point(
            "SELECT created, id FROM messages WHERE id = ?", (message_id,)
        )
        return Key(*rows[0]) if rows else None

    async def remove_message(self, session_id: str, message_id: str) -> bool:
        counts = await self._db.submit(
            [
                (
                    "DELETE FROM messages WHERE id = ? AND session_id = ?",
                    [(message_id, session_id)],
                )
            ],
            needs_counts=True,
        )
        if counts[0]:
            self.cache.message_removed(session_id, message_id)
        return counts[0] > 0

    async def remove_part(self, session_id: str, message_id: str, part_id: str) -> bool:
        counts = await self._db.submit(
            [
                (
                    "DELETE FROM parts WHERE id = ? AND message_id = ? AND session_id = ?",
                    [(part_id, message_id, session_id)],
                )
            ],
            needs_counts=True,
        )
        if counts[0]:
            self.cache.part_removed(session_id, message_id, part_id)
        return counts[0] > 0

    async def mark_compacted(self, part_ids: Sequence[str], ts: int) -> list[str]:
        """Set ``state.time.compacted`` in place (concurrent edits and unknown fields are
        kept) for completed tool outputs; returns the updated parts' JSON."""
        if not part_ids:
            return []
        await self._db.mark_compacted(part_ids, ts)
        # A turn's prune marks a part or two: read them back on the loop (a thread hop costs
        # more than the read); a large prune reads off the loop.
        read = self._db.query_point if len(part_ids) <= INLINE_READ_BACK else self._db.query
        got = await rows_in(
            read, "SELECT id, data FROM parts WHERE id IN ({ids}) ORDER BY id", part_ids
        )
        out = [raw for _, raw in got]
        for pid, raw in got:
            part = _cached_part(pid, raw)
            self.cache.part_written(part.session_id, part.message_id, part.id, raw)
        return out

    async def delete_from(
        self, session_id: str, start: Key, part_cut: tuple[str, str] | None
    ) -> int:
        """Delete every message at or after ``start`` (revert cleanup). With ``part_cut =
        (message_id, part_id)`` that message itself is kept and only its parts from ``part_id``
        on are deleted."""
        statements: list[Statement] = []
        if part_cut is not None:
            mid, pid = part_cut
            statements.append(("DELETE FROM parts WHERE message_id = ? AND id >= ?", [(mid, pid)]))
            statements.append(
                (
                    "DELETE FROM messages WHERE session_id = ? AND (created, id) > (?, ?)",
                    [(session_id, start.created, start.id)],
                )
            )
        else:
            statements.append(
                (
                    "DELETE FROM messages WHERE session_id = ? AND (created, id) >= (?, ?)",
                    [(session_id, start.created, start.id)],
                )
            )
        counts = await self._db.submit(statements, needs_counts=True)
        self.cache.invalidate(session_id)
        return counts[-1]

    # -- history (search, expand) -------------------------------------------------------------

    async def search_history(
        self,
        session_id: str | None,
        query: str,
        limit: int,
        before: Key | None = None,
        kinds: Sequence[str] | None = None,
        *,
        include_recall: bool = False,
        budget: float = 2.0,
    ) -> Found:
        """The parts of one session (``None``: all) matching ``query``, best first (after the
        first-open indexing, if one is running), found within ``budget`` seconds."""
        task = self._backfill
        if task is not None and not task.done():
            await asyncio.shield(task)
        if self.indexer is not None:
            await self.indexer.catch_up()  # read-your-writes: what committed before this
        return await search(
            self._db,
            session_id,
            query,
            limit,
            before,
            kinds,
            include_recall=include_recall,
            budget=budget,
        )

    async def part_rows(self, message_id: str) -> list[tuple[str, str]]:
        """``(part id, JSON)`` of a message's parts, in order."""
        rows = await self._db.query(
            "SELECT id, data FROM parts WHERE message_id = ? ORDER BY id", (message_id,)
        )
        return [(r[0], r[1]) for r in rows]

    async def barrier(self) -> None:
        """Return once every write queued before this call has committed (or failed): an
        empty op behind them in the group commit, which keeps its order."""
        await self._db.submit([])

    # -- leases ----------------------------------------------------------------------------------

    async def acquire_lease(self, name: str, owner: str, ttl_ms: int) -> bool:
        """Take (or renew) a named lease for ``ttl_ms`` unless another owner holds one that has
        not expired: what keeps two daemons on one database from compacting a session twice.
        A daemon that dies holding one loses it when it expires, or at once to a daemon on the
        same machine that sees its process is gone (``holder.gone``)."""
        now = await self._db.now_ms()
        counts = await self._db.submit(
            [
                (
                    "INSERT INTO leases (name, owner, expires) VALUES (?, ?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, "
                    "expires = excluded.expires "
                    "WHERE leases.expires < ? OR leases.owner = excluded.owner",
                    [(name, owner, now + ttl_ms, now)],
                )
            ],
            needs_counts=True,
        )
        if counts[0] > 0:
            return True
        # Held by another owner: take it over at once if that holder provably no longer runs
        # (killed mid-compaction), rather than blocking the session until the row expires.
        rows = await self._db.query("SELECT owner FROM leases WHERE name = ?", [name])
        if not rows or not holder.gone(str(rows[0][0])):
            return False
        counts = await self._db.submit(
            [
                (
                    "UPDATE leases SET owner = ?, expires = ? WHERE name = ? AND owner = ?",
                    [(owner, now + ttl_ms, name, rows[0][0])],
                )
            ],
            needs_counts=True,
        )
        if counts[0] > 0:
            log.info("lease %s taken over from %s, which no longer runs", name, rows[0][0])
        return counts[0] > 0

    async def release_lease(self, name: str, owner: str) -> None:
        await self._db.submit(
            [("DELETE FROM leases WHERE name = ? AND owner = ?", [(name, owner)])]
        )

    # -- range reads ---------------------------------------------------------------------------

    async def boundary(self, session_id: str, before: Key | None = None) -> Boundary | None:
        """The latest marker (before ``before``, if given) with a finished, error-free summary."""
        sql = (
            "SELECT m.created, m.id, p.data "
            "FROM parts p JOIN messages m ON m.id = p.message_id "
            "WHERE p.session_id = ? AND p.type = 'compaction' AND m.role = 'user' "
            "AND EXISTS (SELECT 1 FROM messages s WHERE s.parent_id = m.id AND s.summary_ok = 1 "
            "AND s.session_id = m.session_id"
        )
        args: list[Any] = [session_id]
        if before is not None:
            sql += " AND (s.created, s.id) < (?, ?)) AND (m.created, m.id) < (?, ?)"
            args += [before.created, before.id, before.created, before.id]
        else:
            sql += ")"
        sql += " ORDER BY m.created DESC, m.id DESC LIMIT 1"
        rows = await self._db.query_point(sql, args)
        if not rows:
            return None
        created, mid, data = rows[0]
        return Boundary(Key(created, mid), _tail_start(data))

    async def window(
        self,
        session_id: str,
        start: Key | None = None,
        end: Key | None = None,
        raws: dict[str, str] | None = None,
    ) -> list[WithParts]:
        """Messages with ``start <= key < end`` and their parts, chronological; one query.

        ``raws``, when given, is filled with each message's and part's stored JSON by id. The
        window from ``start`` to the end is served from ``WindowCache`` when it can be.
        """
        await self._db.fresh(self.cache)
        await self._verify(session_id)
        if end is None and raws is None:
            if (window := self.cache.assembled(session_id, start, _assemble_one)) is not None:
                return window
        elif end is None and (cached := self.cache.get(session_id, start)) is not None:
            return _assemble(cached[0], cached[1], raws)
        version = self.cache.version(session_id)
        cond = "m.session_id = ?"
        args: list[Any] = [session_id]
        if start is not None:
            cond += " AND (m.created, m.id) >= (?, ?)"
            args += [start.created, start.id]
        if end is not None:
            cond += " AND (m.created, m.id) < (?, ?)"
            args += [end.created, end.id]
        budget = _Budget(self.max_read_bytes, session_id)
        # One statement, so one snapshot: as two (messages, then their parts), a commit made
        # between them by another daemon on the database (a compaction's marker and summary)
        # gave parts of messages the first never saw, and a window no state ever had.
        # Each message's row (kind 0) comes before its parts (kind 1), in part id order.
        rows = await self._fetch(
            f"SELECT m.created, m.id, 0, '', m.data FROM messages m WHERE {cond} "
            "UNION ALL "
            f"SELECT m.created, m.id, 1, p.id, p.data FROM messages m JOIN parts p "
            f"ON p.message_id = m.id WHERE {cond} ORDER BY 1, 2, 3, 4",
            [*args, *args],
            budget,
            4,
        )
        msg_rows = [(created, mid, data) for created, mid, kind, _, data in rows if kind == 0]
        parts = [(mid, pid, data) for _, mid, kind, pid, data in rows if kind == 1]
        msgs = [(mid, data) for _, mid, data in msg_rows]
        window = _assemble(msgs, parts, raws)
        if end is None:
            self.cache.put(
                session_id,
                start,
                version,
                [(Key(created, mid), data) for created, mid, data in msg_rows],
                [(mid, pid, data) for mid, pid, data in parts],
            )
        return window

    async def _fetch(self, sql: str, args: list[Any], budget: _Budget, data: int) -> list[Any]:
        """Rows in chunks, stopping as soon as their JSON (column ``data``) passes the read
        budget: a window too large to serve never sits in memory whole."""
        out: list[Any] = []
        async with self._db.stream(sql, args) as chunks:
            async for chunk in chunks:
                budget.spend(sum(len(row[data]) for row in chunk))
                out.extend(chunk)
        return out

    async def _parts_between(self, session_id: str, first: Key, last: Key) -> Any:
        """``(message id, part id, JSON)`` of the parts of messages ``first <= key <= last``."""
        return await self._db.query(
            "SELECT p.message_id, p.id, p.data FROM messages m JOIN parts p ON p.message_id = m.id "
            "WHERE m.session_id = ? AND (m.created, m.id) >= (?, ?) "
            "AND (m.created, m.id) <= (?, ?) ORDER BY p.message_id, p.id",
            [session_id, first.created, first.id, last.created, last.id],
        )

    async def newest_first(
        self, session_id: str, end: Key | None = None, page: int = PAGE
    ) -> AsyncIterator[list[WithParts]]:
        """Pages of messages walking backwards from ``end`` (exclusive); each page newest first."""
        cursor = end
        while True:
            cond, args = _older_than(session_id, cursor)
            msgs = list(
                await self._db.query(
                    f"SELECT m.id, m.data, m.created FROM messages m WHERE {cond} "
                    "ORDER BY m.created DESC, m.id DESC LIMIT ?",
                    [*args, page],
                )
            )
            if not msgs:
                return
            oldest = Key(msgs[-1][2], msgs[-1][0])
            newest = Key(msgs[0][2], msgs[0][0])
            parts = await self._parts_between(session_id, oldest, newest)
            yield _assemble([(r[0], r[1]) for r in msgs], parts)
            if len(msgs) < page:
                return
            cursor = oldest

    def cached_newest_first(self, session_id: str) -> tuple[Key | None, Iterator[WithParts]] | None:
        """The window the cache holds for a session: its start and its messages newest first,
        decoded as they are read (cheap: the cached texts are the same objects each time), or
        None. Call ``fresh`` first, and read it before the next await."""
        cached = self.cache.newest_first(session_id)
        if cached is None:
            return None
        start, rows = cached
        msgs = (
            WithParts(
                info=_cached_message(mid, data),
                parts=[_cached_part(pid, raw) for pid, raw in parts],
            )
            for mid, data, parts in rows
        )
        return start, msgs

    async def fresh(self, session_id: str) -> None:
        """Drop what the cache holds when another process wrote (see ``Backend.fresh``), and
        what it cannot vouch for of the session about to be read (``_verify``)."""
        await self._db.fresh(self.cache)
        await self._verify(session_id)

    async def _verify(self, session_id: str) -> None:
        """Check the cached window's unverified messages (``WindowCache.verify``): one indexed
        count of their parts."""
        ids = self.cache.unverified(session_id)
        if not ids:
            return
        version = self.cache.version(session_id)
        rows = await rows_in(
            self._db.query_point,
            "SELECT message_id, count(*) FROM parts WHERE message_id IN ({ids}) "
            "GROUP BY message_id",
            ids,
        )
        stored = {mid: int(n) for mid, n in rows}
        self.cache.verify(session_id, version, stored)

    async def light_newest_first(
        self, session_id: str, end: Key | None = None, page: int = PAGE
    ) -> AsyncIterator[list[LightMessage]]:
        """Pages of ``LightMessage`` walking backwards from ``end`` (exclusive), each newest
        first: what a prune decides on, computed in the database, so an output already pruned
        (or not a completed tool call's) never leaves it."""
        light: tuple[str, str] | None = _LIGHT_SQL.get(self._db.kind)
        cursor = end
        while True:
            cond, args = _older_than(session_id, cursor)
            if light is None:  # a backend without the JSON functions: decode the rows
                async for decoded in self.newest_first(session_id, cursor, page):
                    yield [_light_of(m) for m in decoded]
                return
            msg_sql, part_sql = light
            msgs = list(await self._db.query(msg_sql.replace("{cond}", cond), [*args, page]))
            if not msgs:
                return
            oldest = Key(msgs[-1][1], msgs[-1][0])
            newest = Key(msgs[0][1], msgs[0][0])
            try:
                rows = await self._db.query(
                    part_sql, [session_id, oldest.created, oldest.id, newest.created, newest.id]
                )
            except Exception:
                # A row the JSON functions refuse (nested too deep for them, written before
                # the door checked depth): decode the rows, as ``decode_stored`` makes safe.
                light = None
                continue
            by_message: dict[str, list[LightPart]] = {}
            for mid, pid, tool, compacted, output in rows:
                by_message.setdefault(mid, []).append(
                    LightPart(pid, tool, _truthy(compacted), output)
                )
            yield [
                LightMessage(
                    Key(created, mid),
                    role == "user",
                    _truthy(summary),
                    by_message.get(mid, []),
                )
                for mid, created, role, summary in msgs
            ]
            if len(msgs) < page:
                return
            cursor = oldest

    async def page_messages(
        self,
        session_id: str,
        limit: int | None,
        cursor: str | None,
        part_limit: int | None = None,
    ) -> tuple[list[StoredMessage], str | None]:
        """One page of the history, chronological, as stored (``session/messages``).

        A page ends after ``limit`` messages (at most ``MAX_PAGE_MESSAGES``), ``part_limit``
        parts (at most ``MAX_PAGE_PARTS``), or once its JSON reaches ``max_read_bytes``; a
        message whose parts do not all fit continues on the next page (the cursor points
        inside it, and the page repeats its ``info``). With neither limit the whole history
        is asked for: ``TooLarge`` when it does not fit one page. Memory follows the page, not the
        history: rows stream from SQLite and reading stops where the page ends.
        """
        start = PageCursor.parse(cursor) if cursor else None
        max_msgs = min(limit or MAX_PAGE_MESSAGES, MAX_PAGE_MESSAGES)
        max_parts = min(part_limit or MAX_PAGE_PARTS, MAX_PAGE_PARTS)
        cond = "m.session_id = ?"
        args: list[Any] = [session_id]
        if start is not None:
            cond += " AND (m.created, m.id) " + (">=" if start.inside else ">") + " (?, ?)"
            args += [start.key.created, start.key.id]
        # The messages' ids and sizes first: their JSON is read once the page has ended, for
        # the messages on it (a page of 10,000 parts may hold a few hundred of 10,000 listed).
        msgs = list(
            await self._db.query(
                f"SELECT m.id, m.created, length(m.data) FROM messages m WHERE {cond} "
                "ORDER BY m.created, m.id LIMIT ?",
                [*args, max_msgs + 1],
            )
        )
        more_msgs = len(msgs) > max_msgs
        msgs = msgs[:max_msgs]
        if not msgs:
            return [], None
        if more_msgs and limit is None and part_limit is None:
            raise _history_too_large(session_id, self.max_read_bytes)
        last = Key(msgs[-1][1], msgs[-1][0])
        parts_sql = (
            f"SELECT p.message_id, p.id, p.data FROM messages m JOIN parts p "
            f"ON p.message_id = m.id WHERE {cond} AND (m.created, m.id) <= (?, ?) "
            "AND (m.id != ? OR p.id > ?) ORDER BY m.created, m.id, p.id"
        )
        resume = (start.key.id, start.after_part or "") if start and start.inside else ("", "")
        page = _Page(msgs, self.max_read_bytes, max_parts)
        async with self._db.stream(parts_sql, [*args, last.created, last.id, *resume]) as chunks:
            async for chunk in chunks:
                for mid, pid, data in chunk:
                    if not page.add_part(mid, pid, data):
                        break
                if page.cursor is not None:
                    break
        if page.cursor is None:
            page.join_until(len(msgs))
        nxt = page.cursor or (PageCursor(last) if more_msgs else None)
        if nxt is not None and limit is None and part_limit is None:
            # No limit asked: the client expects the whole history, so a cut is an error
            # that says how to page, never a silently partial answer.
            raise _history_too_large(session_id, self.max_read_bytes)
        rows = await rows_in(
            self._db.query, "SELECT id, data FROM messages WHERE id IN ({ids})", page.message_ids
        )
        infos = {mid: data for mid, data in rows}
        return page.filled(infos), (nxt.encode() if nxt is not None else None)

    async def page_raw(
        self, session_id: str, limit: int | None, cursor: str | None
    ) -> tuple[list[StoredMessage], str | None]:
        """Full history, chronological, as stored; ``limit=None`` returns everything (forks:
        what the daemon itself copies, not what a client reads)."""
        cond = "m.session_id = ?"
        args: list[Any] = [session_id]
        if cursor:
            key = Key.parse(cursor)
            cond += " AND (m.created, m.id) > (?, ?)"
            args += [key.created, key.id]
        sql = (
            f"SELECT m.id, m.data, m.created FROM messages m WHERE {cond} ORDER BY m.created, m.id"
        )
        if limit is not None:
            sql += " LIMIT ?"
        rows = list(await self._db.query(sql, [*args, limit + 1] if limit else args))
        more = limit is not None and len(rows) > limit
        if limit is not None:
            rows = rows[:limit]
        if not rows:
            return [], None
        first, last = Key(rows[0][2], rows[0][0]), Key(rows[-1][2], rows[-1][0])
        parts = await self._parts_between(session_id, first, last)
        by_message: dict[str, list[msgspec.Raw]] = {}
        for mid, _, data in parts:
            by_message.setdefault(mid, []).append(msgspec.Raw(data))
        out = [
            StoredMessage(info=msgspec.Raw(data), parts=by_message.get(mid, []))
            for mid, data, _ in rows
        ]
        return out, (last.cursor() if more else None)

    async def summary_texts(self, session_id: str, limit: int) -> list[str]:
        """Texts of the newest ``limit`` finished summaries, oldest first."""
        rows = await self._db.query(
            "SELECT id FROM messages WHERE session_id = ? AND summary_ok = 1 "
            "ORDER BY created DESC, id DESC LIMIT ?",
            (session_id, limit),
        )
        texts: list[str] = []
        for (mid,) in reversed(list(rows)):
            parts = await self._db.query(
                "SELECT data FROM parts WHERE message_id = ? AND type = 'text' ORDER BY id",
                (mid,),
            )
            texts.append("\n".join(t for (data,) in parts if (t := _text_of(data))))
        return texts

    async def count_sessions(self) -> int:
        rows = await self._db.query("SELECT count(*) FROM sessions")
        return int(rows[0][0])

    async def count_messages(self, session_id: str) -> int:
        return (await self.tally(session_id)).messages

    async def tally(self, session_id: str) -> Tally:
        """Counts of a session's messages, without reading them (``sessions`` shows them)."""
        rows = await self._db.query(
            "SELECT count(*), coalesce(sum(summary_ok), 0), coalesce(max(created), 0) "
            "FROM messages WHERE session_id = ?",
            (session_id,),
        )
        count, summaries, newest = rows[0]
        return Tally(int(count), int(summaries), int(newest))


def _session_of(data: str, updated: int) -> Session:
    """A stored session, its ``time.updated`` raised to the row's (a message's ingest touches
    the column, not the JSON)."""
    session = _session_decoder.decode(data)
    session.time.updated = max(session.time.updated, updated)
    return session


class LightPart(NamedTuple):
    """A part as a prune sees it: ``tool`` only for a completed tool call (else None), and its
    ``output`` only when it is not ``compacted``."""

    id: str
    tool: str | None
    compacted: bool
    output: str | None


class LightMessage(NamedTuple):
    key: Key
    user: bool
    summary: bool  # an assistant message whose ``summary`` is true
    parts: list[LightPart]  # every part, in id order


def _truthy(value: Any) -> bool:
    """A JSON scalar as SQLite (numbers) or PostgreSQL (``->>`` text) returns it."""
    if isinstance(value, str):
        if value in ("true", "false"):
            return value == "true"
        return value not in ("", "null") and float(value) != 0
    return bool(value)


def _light_of(msg: WithParts) -> LightMessage:
    parts = [
        LightPart(
            p.id,
            p.tool if isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted) else None,
            bool(
                isinstance(p, ToolPart)
                and isinstance(p.state, ToolCompleted)
                and p.state.time.compacted
            ),
            p.state.output
            if isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted)
            else None,
        )
        for p in msg.parts
    ]
    info = msg.info
    return LightMessage(
        Key(info.time.created, info.id),
        isinstance(info, UserMessage),
        isinstance(info, AssistantMessage) and bool(info.summary),
        parts,
    )


_MSG_LIGHT = (
    "SELECT m.id, m.created, m.role, {summary} FROM messages m WHERE {{cond}} "
    "ORDER BY m.created DESC, m.id DESC LIMIT ?"
)
_PART_LIGHT = (
    "SELECT p.message_id, p.id, {tool}, {compacted}, {output} "
    "FROM messages m JOIN parts p ON p.message_id = m.id "
    "WHERE m.session_id = ? AND (m.created, m.id) >= (?, ?) "
    "AND (m.created, m.id) <= (?, ?) ORDER BY p.message_id, p.id"
)


def _light_sql(get: Callable[[str, str], str], zero: str) -> tuple[str, str]:
    """The two light queries, given how the backend reads a JSON path (``get(column, path)``,
    the path dotted; ``zero``: 0 as it returns it)."""
    completed = f"p.type = 'tool' AND {get('p.data', 'state.status')} = 'completed'"
    compacted = get("p.data", "state.time.compacted")
    summary = get("m.data", "summary")
    return (
        _MSG_LIGHT.format(summary=f"CASE WHEN m.role = 'assistant' THEN {summary} END"),
        _PART_LIGHT.format(
            tool=f"CASE WHEN {completed} THEN {get('p.data', 'tool')} END",
            compacted=f"CASE WHEN {completed} THEN {compacted} END",
            # Not compacted: null or 0 (``_truthy``); only then is the output needed.
            output=f"CASE WHEN {completed} AND COALESCE({compacted}, {zero}) = {zero} "
            f"THEN {get('p.data', 'state.output')} END",
        ),
    )


_LIGHT_SQL: dict[str, tuple[str, str]] = {
    "sqlite": _light_sql(lambda col, path: f"json_extract({col}, '$.{path}')", "0"),
    "postgresql": _light_sql(
        lambda col, path: f"({col}::jsonb #>> '{{{','.join(path.split('.'))}}}')", "'0'"
    ),
}


def _older_than(session_id: str, cursor: Key | None) -> tuple[str, list[Any]]:
    """The condition on messages ``m`` of a backwards walk: the session's, before ``cursor``."""
    if cursor is None:
        return "m.session_id = ?", [session_id]
    return "m.session_id = ? AND (m.created, m.id) < (?, ?)", [
        session_id,
        cursor.created,
        cursor.id,
    ]


_cached_part = Decoded(decode_part)
_cached_message = Decoded(decode_message)


def _assemble_one(mid: str, data: str, parts: list[tuple[str, str]]) -> WithParts:
    """One cached message with its parts (``WindowCache.assembled``): shared, like the Structs
    it holds, so callers must not change it (they build changed copies)."""
    return WithParts(info=_cached_message(mid, data), parts=[_cached_part(p, d) for p, d in parts])


def _assemble(msgs: Any, parts: Any, raws: dict[str, str] | None = None) -> list[WithParts]:
    by_message: dict[str, list[Part]] = {}
    for mid, pid, data in parts:
        part = _cached_part(pid, data)
        by_message.setdefault(mid, []).append(part)
        if raws is not None and part.id not in _flattened:
            raws[part.id] = data
    out = [
        WithParts(info=_cached_message(mid, data), parts=by_message.get(mid, []))
        for mid, data in msgs
    ]
    if raws is not None:
        raws.update((mid, data) for mid, data in msgs if mid not in _flattened)
    return out


class _Page:
    """A ``session/messages`` page filled in history order until one of its limits.

    Each message joins before its parts. When the next message or part would pass the part
    limit or the byte budget, ``cursor`` says where the next page resumes: after the last
    message joined, or inside the message being read (after its last part here; ``""`` when
    none of its parts fit, so the next page starts with it again). Messages are counted by
    their stored size here and their JSON read once the page has ended (``filled``).
    """

    def __init__(self, msgs: list[Any], budget: int, max_parts: int) -> None:
        self._msgs = msgs  # (id, created, size) rows, in order
        self._budget = budget
        self._max_parts = max_parts
        self._parts = 0
        self._joined = 0  # messages of ``msgs`` on the page
        self._last_part = ""  # of the newest message on the page
        self.message_ids: list[str] = []
        self._parts_of: list[list[msgspec.Raw]] = []
        self.cursor: PageCursor | None = None

    def join_until(self, end: int) -> bool:
        """Join ``msgs[:end]``; False (the page ends before one that does not fit)."""
        while self._joined < end:
            mid, _, size = self._msgs[self._joined]
            if size > self._budget:
                if not self.message_ids:
                    raise _too_large(f"message {mid!r}", size)
                _, created, _ = prev = self._msgs[self._joined - 1]
                self.cursor = PageCursor(Key(created, prev[0]))
                return False
            self._budget -= size
            self.message_ids.append(mid)
            self._parts_of.append([])
            self._joined += 1
            self._last_part = ""
        return True

    def add_part(self, mid: str, pid: str, data: str) -> bool:
        end = self._joined
        while end == 0 or self._msgs[end - 1][0] != mid:
            end += 1
        if not self.join_until(end):
            return False
        if self._parts >= self._max_parts or len(data) > self._budget:
            if len(data) > self._budget and not self._parts and len(self.message_ids) == 1:
                raise _too_large(f"part {pid!r}", len(data))
            _, created, _ = self._msgs[end - 1]
            self.cursor = PageCursor(Key(created, mid), self._last_part)
            return False
        self._budget -= len(data)
        self._parts_of[-1].append(served(data))
        self._parts += 1
        self._last_part = pid
        return True

    def filled(self, infos: Mapping[str, str]) -> list[StoredMessage]:
        """The page's messages with their JSON (``infos`` by id). One removed since it was
        listed is left out, with its parts (they went with it)."""
        return [
            StoredMessage(info=served(infos[mid]), parts=parts)
            for mid, parts in zip(self.message_ids, self._parts_of, strict=True)
            if mid in infos
        ]


def _history_too_large(session_id: str, budget: int) -> TooLarge:
    return TooLarge(
        f"the history of session {session_id!r} does not fit one reply (at most "
        f"{MAX_PAGE_MESSAGES} messages, {MAX_PAGE_PARTS} parts and {budget} bytes, config "
        "server.maxReplyBytes): ask with `limit` and/or `partLimit` and page on with each "
        "reply's `nextCursor` as `cursor`"
    )


def _too_large(what: str, size: int) -> TooLarge:
    return TooLarge(
        f"{what} is {size} bytes, more than a reply may hold (config server.maxReplyBytes): "
        "it cannot be read over the wire"
    )


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


async def rows_in(
    read: Callable[[str, Sequence[Any]], Awaitable[list[Row]]],
    sql: str,
    ids: Sequence[str],
    *first: Any,
) -> list[Row]:
    """The rows of ``sql`` for ``ids``, asked 500 at a time (a statement's bound values are
    limited): ``{ids}`` in ``sql`` becomes that many placeholders, after ``first``'s."""
    out: list[Row] = []
    for chunk in _chunks(list(ids), 500):
        out.extend(await read(sql.format(ids=",".join("?" * len(chunk))), [*first, *chunk]))
    return out


class _MarkTime(msgspec.Struct):
    compacted: int | None = None


class _MarkState(msgspec.Struct):
    status: str = ""
    output: str | None = None
    time: _MarkTime | None = None


class _Marked(msgspec.Struct):
    """What ``Store.prune_mark_of`` reads of a stored part (the stored JSON's names)."""

    type: str = ""
    messageID: str = ""
    state: _MarkState | None = None


_mark_decoder = msgspec.json.Decoder(_Marked)


class _Tail(msgspec.Struct):
    tailStartID: str | None = None  # the stored JSON's names: the daemon's (collapse),
    tail_start_id: str | None = None  # OpenCode >= 1.14's


class _Text(msgspec.Struct):
    text: str = ""


_tail_decoder = msgspec.json.Decoder(_Tail)
_text_decoder = msgspec.json.Decoder(_Text)


def _tail_start(data: str) -> str | None:
    """A compaction part's ``tailStartID`` or ``tail_start_id`` (decoded here: the same on
    every backend)."""
    got = decode_stored(_tail_decoder, data)
    tail: str | None = got.tailStartID or got.tail_start_id
    return tail


def _text_of(data: str) -> str:
    text: str = decode_stored(_text_decoder, data).text
    return text
