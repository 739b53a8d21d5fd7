"""The shared backend: PostgreSQL through asyncpg, for many daemons on one database.

Three kinds of connection: one writer (``PgCommit``'s group commit), a small pool of readers,
and one listener. The listener hears two channels:

* ``sidecar_changed``: the schema's triggers name every session whose rows a transaction
  changed, at its commit. A change made by another connection (another daemon, ``import``)
  drops that session from the window cache. Before a cached window is served, ``fresh`` makes
  one round trip on the listener: PostgreSQL delivers every notification of a transaction that
  committed before that query was sent ahead of its reply, so a window is never served from a
  cache that has not heard of a commit that happened before the read began.
* ``sidecar_events``: what another daemon published to its subscribers (``relay``), so that
  a client subscribed through daemon A sees the writes made through daemon B. An event larger
  than a ``NOTIFY`` payload goes through the ``relay`` table, and the notification names its
  row. Own notifications (this daemon's writer) are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, cast

import asyncpg
import msgspec

from sidecar.errors import Unavailable
from sidecar.model.buffers import Shared
from sidecar.model.ids import now_ms
from sidecar.store.backend import (
    Chunks,
    EventSink,
    ReadOnly,
    Row,
    Statement,
    referenced_part,
)
from sidecar.store.cache import WindowCache
from sidecar.store.commit import Hooked
from sidecar.store.pg_commit import (
    APPEND_SLICE,
    PgCommit,
    driver_state,
    outage,
    pg_sql,
    unavailable,
)
from sidecar.store.pg_schema import (
    HISTORY_BATCH,
    HISTORY_NOTED,
    MIGRATION_LOCK,
    MIGRATIONS,
)
from sidecar.store.schema import (
    FIRST_VERSION,
    READ_VERSION,
    SCHEMA_VERSION,
    SET_VERSION,
    VERSION_TABLE,
    check_opened,
)
from sidecar.store.statements import PART_DATA, SET_PART_DATA, upsert_part
from sidecar.store.url import CannotOpen, redact, unreachable

log = logging.getLogger("sidecar.store")

CHUNK = 1024
READERS = 4
# Seconds to wait for the server before --db is reported unreachable.
CONNECT_TIMEOUT = 10
CHANGED = "sidecar_changed"
EVENTS = "sidecar_events"
# A NOTIFY payload must stay under 8000 bytes; larger events go through the relay table.
NOTIFY_MAX = 7900
# Relay rows are read within moments of their notification; older ones are deleted.
RELAY_KEEP_MS = 5 * 60_000
_NOW_SQL = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
_MIGRATION_LOCK = "SELECT pg_advisory_xact_lock($1)"
_SET_VERSION = pg_sql(SET_VERSION)
_SET_PART_DATA = pg_sql(SET_PART_DATA)


class _Event(msgspec.Struct, array_like=True):
    session_id: str
    method: str
    params: msgspec.Raw


class PostgresBackend(Hooked):
    _commit: PgCommit
    kind = "postgresql"
    shares_events = True

    def __init__(
        self,
        dsn: str,
        writer: asyncpg.Connection,
        readers: asyncpg.Pool,
        listener: asyncpg.Connection,
        relay: asyncpg.Connection,
    ) -> None:
        self.display = redact(dsn)
        self._dsn = dsn
        self._writer = writer
        self._readers = readers
        self._listener: asyncpg.Connection | None = listener
        self._commit = PgCommit(writer, self._connect_writer)
        # Writes are the group commit's, as they are (it merges the ingest statements into
        # ``WRITE``): no wrapper to keep in step with it.
        self.submit = self._commit.submit
        self.submit_then = self._commit.submit_then
        # Events go out on a connection of their own, without waiting for a WAL flush: an
        # event is not data (the write it reports is committed already), so it should not
        # cost the writer a second durable commit per write.
        self._relay = PgCommit(relay, self._connect_relay, role="relay")
        self._relay_conn = relay
        self._own_pids = {writer.get_server_pid(), relay.get_server_pid()}
        self._cache: WindowCache | None = None
        self._trip_lock = asyncio.Lock()  # one query at a time on the listener
        self._trips_started = self._trips_done = 0
        self._events: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
        self._event_task: asyncio.Task[None] | None = None
        self._last_cleanup = 0
        self.on_event: EventSink | None = None
        # The server's "could another write still join?" probe: SQLite's inline-commit choice;
        # here batches form while one is on the wire, so it is kept but not asked.
        self.may_join: Callable[[], bool] = lambda: True
        self._closing = False

    async def _connect_writer(self) -> asyncpg.Connection:
        conn = await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT)
        self._own_pids.add(conn.get_server_pid())
        log.warning("reconnected the PostgreSQL writer")
        return conn

    async def _connect_relay(self) -> asyncpg.Connection:
        conn = await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT)
        await conn.execute("SET synchronous_commit = off")
        self._own_pids.add(conn.get_server_pid())
        self._relay_conn = conn
        return conn

    @classmethod
    async def open(cls, dsn: str) -> PostgresBackend:
        """Connect (libpq-style URL), migrate, and start listening; the driver's refusals are
        ``CannotOpen``, so callers need not know the driver."""
        try:
            return await cls._open(dsn)
        except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise CannotOpen(str(exc)) from None

    @classmethod
    async def _open(cls, dsn: str) -> PostgresBackend:
        writer = await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT)
        try:
            await _migrate(writer)
            readers = await asyncpg.create_pool(
                dsn, min_size=1, max_size=READERS, timeout=CONNECT_TIMEOUT, reset=_keep_session
            )
        except BaseException:
            await writer.close()
            raise
        try:
            listener = await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT)
            relay = await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT)
            await relay.execute("SET synchronous_commit = off")
        except BaseException:
            await readers.close()
            await writer.close()
            raise
        backend = cls(dsn, writer, readers, listener, relay)
        await backend._listen(listener)
        backend._commit.start()
        backend._relay.start()
        backend._event_task = asyncio.ensure_future(backend._deliver_events())
        return backend

    async def close(self) -> None:
        self._closing = True
        await self._commit.stop()
        await self._relay.stop()
        await self._relay_conn.close()
        if self._event_task is not None:
            self._event_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._event_task
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
        await self._readers.close()
        await self._writer.close()

    # -- writes --------------------------------------------------------------------------------

    @property
    def commits(self) -> int:
        return self._commit.commits

    def commit_queued(self) -> None:
        """Nothing to bring forward: the writer task commits as soon as it is free."""

    def large_part(self, row: tuple[Any, ...], pieces: Shared) -> list[Statement] | None:
        # In slices of the buffers (``bytea``, never a ``str``), appended by the server: the
        # driver copies what it sends into its message and the socket's buffer, a slice's
        # worth at a time instead of the whole part's.
        buffers = pieces.buffers  # the frame's slice, or an id spliced in front of it
        head = buffers[0] if len(buffers) > 1 else b""
        rest = buffers[1:] if len(buffers) > 1 else buffers
        tail = memoryview(rest[0] if len(rest) == 1 else b"".join(rest))
        slices = _utf8_slices(tail, LARGE_SLICE)
        return [
            (_LARGE_UPSERT, [(*row, head, slices[0])]),
            (APPEND_SLICE, [(piece, row[0]) for piece in slices[1:]]),
        ]

    #: The history index's batch (``indexer.Indexer``).
    history_batch: Sequence[str] = HISTORY_BATCH
    history_noted = HISTORY_NOTED

    def history_more(self, counts: Sequence[int]) -> bool:
        return False  # its notes are all there is to do: only a full batch says more

    cheap_fresh = False  # a round trip (see ``fresh``): as dear as the read

    async def mark_compacted(self, part_ids: Sequence[str], ts: int) -> None:
        ids = list(part_ids)

        async def patch(conn: asyncpg.Connection) -> list[int]:
            # Patched in Python under FOR UPDATE: PostgreSQL's JSON functions would re-render
            # the document (``jsonb`` reorders keys); this keeps the client's JSON as it is.
            rows = await conn.fetch(
                "SELECT id, data FROM parts WHERE id = ANY($1::text[]) AND type = 'tool' "
                "ORDER BY id FOR UPDATE",
                ids,
            )
            updates = [(patched, pid) for pid, data in rows if (patched := _compacted(data, ts))]
            if updates:
                await conn.executemany(_SET_PART_DATA, updates)
            return [len(updates)]

        await self._commit.run(patch)

    def watch(self, cache: WindowCache) -> None:
        self._cache = cache

    async def now_ms(self) -> int:
        """The database's clock: daemons on several machines measure leases by one clock."""
        value: int = (await self.query(_NOW_SQL))[0][0]
        return value

    def relay(self, session_id: str, method: str, params: bytes) -> None:
        """Publish an event to the other daemons' subscribers (after the writes before it)."""
        # Measured as bytes, then one ``str``: a 10 MB part is copied once more here, not
        # thrice (an encode back to bytes only to take its length was one).
        encoded = msgspec.json.encode(_Event(session_id, method, msgspec.Raw(params)))
        size = len(encoded)
        payload = encoded.decode()
        del encoded
        if size <= NOTIFY_MAX:
            statements: list[Statement] = [("SELECT pg_notify(?, ?)", [(EVENTS, payload)])]
        else:
            now = now_ms()
            statements = [
                (
                    "WITH r AS (INSERT INTO relay (created, data) VALUES (?, ?) RETURNING id) "
                    "SELECT pg_notify(?, '@' || r.id) FROM r",
                    [(now, payload, EVENTS)],
                )
            ]
            if now - self._last_cleanup > RELAY_KEEP_MS // 5:
                self._last_cleanup = now
                statements.append(("DELETE FROM relay WHERE created < ?", [(now - RELAY_KEEP_MS,)]))
        self._relay.submit_then(statements, _relayed)

    # -- reads ---------------------------------------------------------------------------------

    # A reader the server left mid-operation (it ended the session) can be handed out again
    # before the driver sees it closed: its next use fails with a state error that is not
    # the read's fault. Such a connection is dropped and the read tried once more on a fresh
    # one, so what reaches the client is the outage (-32048), or a bug (-32603) if it persists.

    async def query(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        rows = await self._fetch(sql, args, None)
        assert rows is not None
        return rows

    async def query_within(
        self, sql: str, args: Sequence[Any], deadline: float
    ) -> list[Row] | None:
        return await self._fetch(sql, args, deadline)

    async def _fetch(
        self, sql: str, args: Sequence[Any], deadline: float | None
    ) -> list[Row] | None:
        for attempt in (1, 2):
            dropped = False
            try:
                async with self._readers.acquire() as conn:
                    try:
                        if deadline is None:
                            return cast(list[Row], await conn.fetch(pg_sql(sql), *args))
                        return await _fetch_within(conn, sql, args, deadline)
                    except Exception as exc:
                        dropped = _drop_if_left(exc, conn)
                        raise
            except Exception as exc:
                _raise_unless_retried(exc, dropped, last=attempt == 2)
        raise AssertionError("unreachable")

    async def query_point(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        return await self.query(sql, args)

    @contextlib.asynccontextmanager
    async def stream(self, sql: str, args: Sequence[Any]) -> AsyncIterator[Chunks]:
        yielded = False
        for attempt in (1, 2):
            dropped = False
            try:
                async with self._readers.acquire() as conn:
                    try:
                        async with conn.transaction(readonly=True):
                            cursor = await conn.cursor(pg_sql(sql), *args)
                            yielded = True
                            yield _Chunks(cursor)
                        return
                    except Exception as exc:
                        dropped = _drop_if_left(exc, conn)
                        raise
            except Exception as exc:
                _raise_unless_retried(exc, dropped, last=yielded or attempt == 2)

    async def fresh(self, cache: WindowCache) -> None:
        """Hear every change committed before now, then serve (see the module's docstring)."""
        if self._listener is None or self._listener.is_closed():
            cache.clear()  # deaf: nothing cached can be trusted until listening again
            async with self._trip_lock:
                if self._listener is None or self._listener.is_closed():
                    await self._relisten()
            return
        # Coalesced: the first reader to get the lock makes the round trip; readers that
        # arrived before it started are served by it, later ones by the next.
        target = self._trips_started + 1
        async with self._trip_lock:
            if self._trips_done >= target or self._listener is None:
                return
            self._trips_started += 1
            started = self._trips_started
            try:
                await self._listener.execute("SELECT 1")
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                cache.clear()
            except asyncpg.InternalClientError:  # left mid-operation by a server that went away
                cache.clear()
                self._listener.terminate()
                self._listener = None
            self._trips_done = started
        # The notifications that came before the reply were queued (``call_soon``) ahead of
        # this task's wake-up, so they have been applied by now.

    async def _listen(self, conn: asyncpg.Connection) -> None:
        await conn.add_listener(CHANGED, self._on_changed)
        await conn.add_listener(EVENTS, self._on_event)
        conn.add_termination_listener(self._on_lost)
        self._listener = conn

    def _on_lost(self, conn: Any) -> None:
        if self._closing:
            return
        log.warning("lost the PostgreSQL listener connection: window cache off until back")
        self._listener = None
        if self._cache is not None:
            self._cache.clear()

    async def _relisten(self) -> None:
        try:
            await self._listen(await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT))
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("cannot listen on PostgreSQL again yet: %s", exc)

    def _on_changed(self, conn: Any, pid: int, channel: str, payload: object) -> None:
        if pid not in self._own_pids and self._cache is not None:
            self._cache.invalidate(str(payload))

    def _on_event(self, conn: Any, pid: int, channel: str, payload: object) -> None:
        if pid not in self._own_pids and self.on_event is not None:
            self._events.put_nowait((pid, str(payload)))

    async def _deliver_events(self) -> None:
        """Other daemons' events, in the order they were sent (a large one is read first)."""
        while True:
            _pid, payload = await self._events.get()
            try:
                if payload.startswith("@"):
                    ref = int(payload[1:])
                    rows = await self.query("SELECT data FROM relay WHERE id = ?", (ref,))
                    if not rows:
                        continue
                    payload = rows[0][0]
                event = msgspec.json.decode(payload, type=_Event)
                params = bytes(event.params)
                named = referenced_part(params)
                if named is not None:  # a large part, named: read as stored
                    rows = await self.query(PART_DATA, (named,))
                    if not rows:
                        continue
                    params = b'{"part":' + _utf8(rows[0][0]) + b"}"
            except (
                msgspec.DecodeError,
                ValueError,
                OSError,
                asyncpg.PostgresError,
                Unavailable,
            ) as exc:
                log.warning("dropped a relayed event: %s", exc)
                continue
            if self.on_event is not None:
                self.on_event(event.session_id, event.method, params)


class PostgresReader(ReadOnly):
    """One connection whose transactions are all read-only (``default_transaction_read_only``):
    what ``Store.open(readonly=True)`` reads through. No migration, no writer, no listener:
    nothing is cached, so there is nothing to hear."""

    kind = "postgresql"

    def __init__(self, dsn: str, conn: asyncpg.Connection) -> None:
        super().__init__(redact(dsn))
        self._conn = conn

    @classmethod
    async def open(cls, dsn: str) -> PostgresReader:
        """Connect to a database at this version's schema, else ``CannotOpen``."""
        try:
            conn = await asyncpg.connect(
                dsn,
                timeout=CONNECT_TIMEOUT,
                server_settings={"default_transaction_read_only": "on"},
            )
        except Exception as exc:  # refused, unknown database, authentication, a bad URL...
            raise CannotOpen(f"{redact(dsn)}: cannot connect ({unreachable(dsn, exc)})") from None

        async def version() -> int | None:
            return cast(int | None, await conn.fetchval(READ_VERSION))

        await check_opened(redact(dsn), version, conn.close, asyncpg.PostgresError)
        return cls(dsn, conn)

    async def close(self) -> None:
        await self._conn.close()

    async def query(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        return cast(list[Row], await self._conn.fetch(pg_sql(sql), *args))

    query_point = query  # no connection of its own for point reads: one reader

    async def query_within(
        self, sql: str, args: Sequence[Any], deadline: float
    ) -> list[Row] | None:
        return await _fetch_within(self._conn, sql, args, deadline)

    @contextlib.asynccontextmanager
    async def stream(self, sql: str, args: Sequence[Any]) -> AsyncIterator[Chunks]:
        async with self._conn.transaction(readonly=True):
            yield _Chunks(await self._conn.cursor(pg_sql(sql), *args))


async def _fetch_within(
    conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy,
    sql: str,
    args: Sequence[Any],
    deadline: float,
) -> list[Row] | None:
    """A read the server cancels at ``deadline`` (``statement_timeout`` for its transaction
    alone); ``None`` when it did."""
    ms = max(1, math.ceil((deadline - time.monotonic()) * 1000))
    try:
        async with conn.transaction(readonly=True):
            await conn.execute(f"SET LOCAL statement_timeout = {ms}")
            return cast(list[Row], await conn.fetch(pg_sql(sql), *args))
    except asyncpg.QueryCanceledError:
        return None


class _Chunks:
    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    async def __aiter__(self) -> AsyncIterator[list[Row]]:
        while chunk := await self._cursor.fetch(CHUNK):
            yield list(chunk)


def _raise_unless_retried(exc: Exception, dropped: bool, *, last: bool) -> None:
    """A failed read: an outage is -32048 (nothing was read), and only a read whose connection
    the server dropped is tried again, once, on a fresh one (returns); else ``exc`` goes on."""
    if not dropped and (outage(exc) or driver_state(exc)):
        raise unavailable(exc, write=False) from None
    if not dropped or last:
        raise exc


def _drop_if_left(exc: BaseException, conn: Any) -> bool:
    """Terminate a reader that failed with a driver state error while still open (so the
    pool never hands it out again); whether it was. A closed one is the pool's to replace."""
    if outage(exc, conn) or not driver_state(exc) or conn.is_closed():
        return False
    conn.terminate()
    return True


async def _keep_session(conn: asyncpg.Connection) -> None:
    """A reader goes back to the pool as it is: no ``RESET ALL; UNLISTEN *`` round trip on
    every release (it doubled a point read), since readers never change session state."""


# A large part's row from its two buffers (``large_part``).
_LARGE_UPSERT = upsert_part("convert_from(?::bytea || ?::bytea, 'UTF8')")


#: Bytes of a large part sent in one statement (``large_part``).
LARGE_SLICE = 1 << 20


def _utf8_slices(data: memoryview, size: int) -> list[memoryview]:
    """``data`` in slices of about ``size`` bytes, each cut before a UTF-8 character's first
    byte (so each decodes alone); at least one."""
    out: list[memoryview] = []
    start = 0
    while True:
        end = min(start + size, len(data))
        while start < end < len(data) and data[end] & 0xC0 == 0x80:
            end -= 1
        out.append(data[start:end])
        if end >= len(data):
            return out
        start = end


def _utf8(data: str | bytes) -> bytes:
    return data.encode() if isinstance(data, str) else data


def _relayed(counts: list[int], exc: BaseException | None) -> None:
    if exc is not None:
        log.warning("could not relay an event to other daemons: %s", exc)


def _compacted(data: str, ts: int) -> str | None:
    """A completed tool part's JSON with ``state.time.compacted = ts`` (key order kept)."""
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return None
    state = doc.get("state") if isinstance(doc, dict) else None
    if not isinstance(state, dict) or state.get("status") != "completed":
        return None
    time = state.get("time")
    if not isinstance(time, dict):
        return None
    time["compacted"] = ts
    return msgspec.json.encode(doc).decode()


async def _migrate(conn: asyncpg.Connection) -> None:
    """Forward-only, one transaction per version, serialised across daemons by a lock."""
    async with conn.transaction():
        await conn.execute(_MIGRATION_LOCK, MIGRATION_LOCK)
        await conn.execute(VERSION_TABLE)
        version = await conn.fetchval(READ_VERSION)
        if version is None:
            await conn.execute(FIRST_VERSION)
            version = 0
    if version > SCHEMA_VERSION:
        raise RuntimeError(
            f"database schema v{version} is newer than this daemon (v{SCHEMA_VERSION})"
        )
    for target in range(version + 1, SCHEMA_VERSION + 1):
        async with conn.transaction():
            await conn.execute(_MIGRATION_LOCK, MIGRATION_LOCK)
            current = await conn.fetchval(READ_VERSION)
            if current >= target:  # another daemon got there first
                continue
            await conn.execute(MIGRATIONS[target - 1])
            await conn.execute(_SET_VERSION, target)
