"""The session store's face: ``Store``, over a SQLite or PostgreSQL ``Backend``.

Stored ``data`` is the client's JSON as given (plus the ids and times the daemon
filled in), so fields this version does not model survive a round trip; indexed columns are
copied out of it. Messages order by ``(time.created, id)`` — a ``Key`` — never by id alone.
No compaction logic lives here: the store answers range queries the engine asks.

``Store`` holds no SQL: each method hands over to its feature's module (``sessions``,
``parts``, ``windows``, ``pages``, ``compaction``, ``leases``, ``history``; pins and
diagnostics are ``steer``'s functions of a store).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import sidecar.store.compaction as compaction
import sidecar.store.history as history
import sidecar.store.leases as leases
import sidecar.store.pages as pages
import sidecar.store.parts as parts
import sidecar.store.sessions as sessions
import sidecar.store.steer as steer
import sidecar.store.windows as windows
from sidecar.errors import UnknownSession
from sidecar.model.buffers import Shared
from sidecar.model.config import DEFAULT_MAX_REPLY_BYTES
from sidecar.model.messages import Message, WithParts
from sidecar.model.parts import Part
from sidecar.model.rpc import StoredMessage
from sidecar.model.session import Session
from sidecar.store.backend import Backend, Done
from sidecar.store.cache import Key, WindowCache
from sidecar.store.compaction import Boundary
from sidecar.store.history import Found
from sidecar.store.indexer import Indexer
from sidecar.store.rows import PartKey
from sidecar.store.sessions import Tally
from sidecar.store.windows import PAGE, LightMessage

#: A whole session to store: the session, its ``(message, JSON)`` and ``(part, JSON)``.
SessionBatch = tuple[
    Session, Sequence[tuple[Message, bytes | str]], Sequence[tuple[Part, bytes | str]]
]


class Store:
    """Async façade over the database; safe to share between all connections of the daemon.

    The queries live in the feature modules, once; a ``Backend`` (SQLite or PostgreSQL) runs
    them.
    """

    def __init__(self, backend: Backend) -> None:
        self._db = backend
        self.cache = WindowCache()
        backend.watch(self.cache)
        # The largest window or page a read loads (the server sets ``server.maxReplyBytes``).
        self.max_read_bytes = DEFAULT_MAX_REPLY_BYTES
        # A window read cold with more stored JSON than this is served as it is read.
        self.stream_over = windows.STREAM_OVER_BYTES
        # The first-open indexing of history (``start_history_backfill``), and who hears its
        # progress ``(indexed, total)`` (the server: ``$/progress`` to every client).
        self._backfill: asyncio.Future[None] | None = None
        self.on_backfill: Callable[[int, int], None] | None = None
        # The history index's background batch (none for a read-only store): told of every
        # commit that stored a write; a search catches it up first.
        self.indexer: Indexer | None = None
        if backend.history_batch:
            self.indexer = Indexer(
                backend.submit_background,
                backend.history_batch,
                self.barrier,
                self._noted,
                backend.history_more,
            )
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
        self._backfill = asyncio.ensure_future(history.run_backfill(self._db, self._progress))

    def _progress(self, indexed: int, total: int) -> None:
        if self.on_backfill is not None:
            self.on_backfill(indexed, total)

    @property
    def commits(self) -> int:
        return self._db.commits

    def commit_queued(self) -> None:
        """Commit the writes queued so far now rather than on the next loop iteration."""
        self._db.commit_queued()

    def set_may_join(self, probe: Callable[[], bool]) -> None:
        """Tell the writer whether another write could still join one submitted now."""
        self._db.may_join = probe

    async def _noted(self) -> bool:
        return bool(await self._db.query_point(self._db.history_noted))

    async def barrier(self) -> None:
        """Return once every write queued before this call has committed (or failed): an
        empty op behind them in the group commit, which keeps its order."""
        await self._db.submit([])

    # -- sessions ------------------------------------------------------------------------------

    async def put_session(self, session: Session) -> None:
        await sessions.put_session(self, session)

    async def get_session(self, session_id: str) -> Session | None:
        return await sessions.get_session(self, session_id)

    async def require_session(self, session_id: str) -> Session:
        session = await self.get_session(session_id)
        if session is None:
            raise UnknownSession(session_id)
        return session

    async def list_sessions(
        self, limit: int | None = None, cursor: str | None = None
    ) -> tuple[list[Session], str | None]:
        """Newest first by ``(created, id)``; ``nextCursor`` continues after the last one. A
        page holds at most ``sessions.MAX_SESSIONS`` sessions."""
        return await sessions.list_sessions(self, limit, cursor)

    async def sessions_by_activity(self) -> list[Session]:
        """Every session, most recently active first (the ``sessions`` command)."""
        return await sessions.sessions_by_activity(self)

    async def sessions_by_prefix(self, prefix: str, limit: int) -> list[Session]:
        """At most ``limit`` sessions whose id starts with ``prefix`` (ids are long to type)."""
        return await sessions.sessions_by_prefix(self, prefix, limit)

    async def delete_session(self, session_id: str) -> bool:
        return await sessions.delete_session(self, session_id)

    async def count_sessions(self) -> int:
        return await sessions.count_sessions(self)

    async def count_messages(self, session_id: str) -> int:
        return (await self.tally(session_id)).messages

    async def tally(self, session_id: str) -> Tally:
        """Counts of a session's messages, without reading them (``sessions`` shows them)."""
        return await sessions.tally(self, session_id)

    # -- messages and parts --------------------------------------------------------------------

    async def put_message(self, info: Message, raw: bytes | str) -> None:
        await sessions.put_message(self, info, raw)

    def put_message_then(self, info: Message, raw: bytes | str, then: Done[None]) -> None:
        """``put_message`` for callers without a task (see ``put_part_then``)."""
        sessions.put_message_then(self, info, raw, then)

    async def put_part(self, part: Part, raw: bytes | str) -> None:
        await parts.put_part(self, part, raw)

    def put_part_then(
        self, part: Part | PartKey, raw: bytes | str | Shared, then: Done[None]
    ) -> None:
        """``put_part`` for callers without a task: ``then(None, None)`` once the part is
        committed, ``then(None, exc)`` if it could not be (``backend.Done``). Called from the
        writer, right after the commit."""
        parts.put_part_then(self, part, raw, then)

    async def put_many(
        self,
        messages: Sequence[tuple[Message, bytes | str]],
        parts: Sequence[tuple[Part, bytes | str]],
    ) -> None:
        """Several messages and parts in one transaction (markers, summaries, forks)."""
        await sessions.put_many(self, messages, parts)

    async def put_session_with(
        self,
        session: Session,
        messages: Sequence[tuple[Message, bytes | str]],
        parts: Sequence[tuple[Part, bytes | str]],
    ) -> None:
        """A whole session in one transaction (import): either all of it is stored or none."""
        await self.put_sessions_with([(session, messages, parts)])

    async def put_sessions_with(self, batch: Sequence[SessionBatch]) -> None:
        """Several whole sessions in one transaction (an import of several files): all of
        them are stored or none, so a failed or interrupted import leaves nothing behind."""
        await sessions.put_sessions_with(self, batch)

    async def get_message(self, message_id: str) -> tuple[Message, str] | None:
        return await sessions.get_message(self, message_id)

    async def get_part(self, part_id: str) -> tuple[Part, str] | None:
        return await parts.get_part(self, part_id)

    async def prune_mark_of(self, part: Part) -> int | None:
        """The prune mark a write of ``part`` (``may_keep_prune_mark``) keeps: the stored
        part's ``state.time.compacted`` when it has one and the same output. A mirror that
        re-sends what its agent stored (after a restart, say) knows nothing of the daemon's
        prunes; only a changed output, or ``session/uncompact``, makes a pruned output new."""
        return await parts.prune_mark_of(self, part)

    async def message_key(self, message_id: str) -> Key | None:
        return await sessions.message_key(self, message_id)

    async def keys_between(self, session_id: str, after: Key, before: Key) -> list[Key]:
        """The keys of the session's messages strictly between ``after`` and ``before``, in
        order (what a compaction's boundary hides of what was written while it ran)."""
        return await sessions.keys_between(self, session_id, after, before)

    async def remove_message(self, session_id: str, message_id: str) -> bool:
        return await sessions.remove_message(self, session_id, message_id)

    async def remove_part(self, session_id: str, message_id: str, part_id: str) -> bool:
        return await parts.remove_part(self, session_id, message_id, part_id)

    async def part_rows(self, message_id: str) -> list[tuple[str, str]]:
        """``(part id, JSON)`` of a message's parts, in order."""
        return await parts.part_rows(self, message_id)

    async def delete_from(
        self, session_id: str, start: Key, part_cut: tuple[str, str] | None
    ) -> int:
        """Delete every message at or after ``start`` (revert cleanup). With ``part_cut =
        (message_id, part_id)`` that message itself is kept and only its parts from ``part_id``
        on are deleted."""
        return await sessions.delete_from(self, session_id, start, part_cut)

    # -- compaction records --------------------------------------------------------------------

    async def mark_compacted(self, part_ids: Sequence[str], ts: int) -> list[str]:
        """Set ``state.time.compacted`` in place (concurrent edits and unknown fields are
        kept) for completed tool outputs; returns the updated parts' JSON."""
        return await compaction.mark_compacted(self, part_ids, ts)

    async def boundary(self, session_id: str, before: Key | None = None) -> Boundary | None:
        """The latest marker (before ``before``, if given) with a finished, error-free summary."""
        return await compaction.boundary(self, session_id, before)

    async def summary_texts(self, session_id: str, limit: int) -> list[str]:
        """Texts of the newest ``limit`` finished summaries, oldest first."""
        return await compaction.summary_texts(self, session_id, limit)

    # -- steering (pins, compaction diagnostics) ------------------------------------------------

    async def set_pin(
        self, session_id: str, message_id: str, part_id: str | None, pinned: bool
    ) -> None:
        """Pin (or unpin) a part, or every part of the message when ``part_id`` is None."""
        await steer.set_pin(self, session_id, message_id, part_id, pinned)

    async def copy_pins(self, session_id: str, parts: Sequence[tuple[str, str, str]]) -> None:
        await steer.copy_pins(self, session_id, parts)

    async def pins(self, session_id: str) -> list[tuple[str, str]]:
        return await steer.pins(self, session_id)

    async def pinned_ids(self, session_id: str) -> frozenset[str]:
        return await steer.pinned_ids(self, session_id)

    async def pinned_parts(self, session_id: str) -> list[Part]:
        return await steer.pinned_parts(self, session_id)

    async def first_user_message(self, session_id: str) -> WithParts | None:
        return await steer.first_user_message(self, session_id)

    async def record_compaction(
        self, session_id: str, message_id: str, created: int, data: bytes
    ) -> None:
        await steer.record_compaction(self, session_id, message_id, created, data)

    async def compactions(self, session_id: str) -> list[str]:
        return await steer.compactions(self, session_id)

    async def unmark_compacted(self, part_ids: Sequence[str]) -> list[str]:
        return await steer.unmark_compacted(self, part_ids)

    async def remove_messages(self, session_id: str, ids: Sequence[str]) -> list[str]:
        return await steer.remove_messages(self, session_id, ids)

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
        return await history.search(
            self._db,
            session_id,
            query,
            limit,
            before,
            kinds,
            include_recall=include_recall,
            budget=budget,
        )

    # -- leases ----------------------------------------------------------------------------------

    async def acquire_lease(self, name: str, owner: str, ttl_ms: int) -> bool:
        """Take (or renew) a named lease for ``ttl_ms`` unless another owner holds one that has
        not expired: what keeps two daemons on one database from compacting a session twice.
        A daemon that dies holding one loses it when it expires, or at once to a daemon on the
        same machine that sees its process is gone (``holder.gone``)."""
        return await leases.acquire(self._db, name, owner, ttl_ms)

    async def release_lease(self, name: str, owner: str) -> None:
        await leases.release(self._db, name, owner)

    # -- range reads ---------------------------------------------------------------------------

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
        return await windows.window(self, self.max_read_bytes, session_id, start, end, raws)

    async def stream_window(
        self, session_id: str, start: Key | None = None
    ) -> windows.Streamed | None:
        """The window from ``start`` one message at a time (``Streamed``: the caller must
        ``aclose`` it) when the cache does not hold it and it has more than ``stream_over``
        bytes of stored JSON; else None, and ``window`` serves it from the cache."""
        return await windows.stream_window(
            self, self.max_read_bytes, self.stream_over, session_id, start
        )

    def newest_first(
        self, session_id: str, end: Key | None = None, page: int = PAGE
    ) -> AsyncIterator[list[WithParts]]:
        """Pages of messages walking backwards from ``end`` (exclusive); each page newest first."""
        return windows.newest_first(self, session_id, end, page)

    def cached_newest_first(self, session_id: str) -> tuple[Key | None, Iterator[WithParts]] | None:
        """The window the cache holds for a session: its start and its messages newest first,
        decoded as they are read (cheap: the cached texts are the same objects each time), or
        None. Call ``fresh`` first, and read it before the next await."""
        return windows.cached_newest_first(self, session_id)

    async def fresh(self, session_id: str) -> None:
        """Drop what the cache holds when another process wrote (see ``Backend.fresh``), and
        what it cannot vouch for of the session about to be read."""
        await windows.fresh(self, session_id)

    def light_newest_first(
        self, session_id: str, end: Key | None = None, page: int = PAGE
    ) -> AsyncIterator[list[LightMessage]]:
        """Pages of ``LightMessage`` walking backwards from ``end`` (exclusive), each newest
        first: what a prune decides on, computed in the database, so an output already pruned
        (or not a completed tool call's) never leaves it."""
        return windows.light_newest_first(self, session_id, end, page)

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
        return await pages.page_messages(
            self, self.max_read_bytes, session_id, limit, cursor, part_limit
        )

    async def page_raw(
        self, session_id: str, limit: int | None, cursor: str | None
    ) -> tuple[list[StoredMessage], str | None]:
        """Full history, chronological, as stored; ``limit=None`` returns everything (forks:
        what the daemon itself copies, not what a client reads)."""
        return await pages.page_raw(self, session_id, limit, cursor)
