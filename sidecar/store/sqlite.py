"""The embedded backend: one SQLite file in WAL mode through aiosqlite.

Two connections: a writer owned by ``GroupCommit`` (group commit) and a reader, which WAL lets
run beside it. Another daemon on the same file is noticed through ``PRAGMA data_version``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, cast

import aiosqlite

from sidecar.model.buffers import Shared
from sidecar.model.cpu import charged
from sidecar.model.ids import now_ms
from sidecar.store.backend import (
    Chunks,
    EventSink,
    ReadOnly,
    Row,
    Statement,
)
from sidecar.store.cache import WindowCache
from sidecar.store.commit import TRUNCATE_WAIT_MS, WAL_SIZE_LIMIT, WRITE_PIECES, GroupCommit, Hooked
from sidecar.store.packed import MARK_COMPACTED, register
from sidecar.store.schema import (
    FIRST_VERSION,
    HISTORY_BATCH,
    HISTORY_HOLD,
    HISTORY_NOTED,
    HISTORY_RELEASE,
    MIGRATIONS,
    READ_VERSION,
    SCHEMA_VERSION,
    SET_VERSION,
    VERSION_TABLE,
    check_opened,
    history_more,
    large_part_statements,
)
from sidecar.store.url import CannotOpen

# Rows fetched per round trip when a read streams (it stops early when over budget).
CHUNK = 1024
# SQLite virtual-machine steps between two looks at a read's deadline (``query_within``).
DEADLINE_STEPS = 1000


class SqliteBackend(Hooked):
    _commit: GroupCommit
    kind = "sqlite"
    shares_events = False  # daemons sharing a file hear each other's writes, not events

    def __init__(
        self,
        path: str,
        reader: aiosqlite.Connection,
        commit: GroupCommit,
        writer: aiosqlite.Connection,
        checkpointer: aiosqlite.Connection | None,
    ) -> None:
        self.path = self.display = path
        self._reader = reader
        self._commit = commit
        # Writes are the group commit's, as they are: no wrapper to keep in step with it.
        self.submit = commit.submit
        self.submit_then = commit.submit_then
        self._writer_db = writer
        self._checkpoint_db = checkpointer
        self._data_version: int | None = None
        self._inline: sqlite3.Connection | None = None
        self.on_event: EventSink | None = None
        # Readers of streams (``stream``), idle between them.
        self._spare: list[aiosqlite.Connection] = []

    @classmethod
    async def open(cls, path: str | Path, *, synchronous: str = "NORMAL") -> SqliteBackend:
        """Open (creating and migrating as needed).

        In WAL mode ``NORMAL`` makes a commit durable against a crash of the process (kill -9:
        the WAL is written before the reply); ``FULL`` also fsyncs every group commit, for
        power loss, at about 60-75 us per commit here.
        """
        path = str(path)
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            # Opened once here first: when aiosqlite's connect fails (a directory, no
            # permission) its worker thread outlives the event loop and prints a traceback.
            sqlite3.connect(path).close()
        # Not autocommit: the writer's transactions begin implicitly at their first write.
        # Shared across threads: ``GroupCommit`` commits modest batches on the loop's thread and
        # large ones on aiosqlite's, never both at once. Auto-checkpoint is off: the writer
        # has checkpoints run on a connection of their own (below).
        wdb = await _connect(path, isolation_level="DEFERRED", check_same_thread=False)
        try:
            await _give_functions(wdb)
            for pragma in (
                "journal_mode=WAL",
                f"synchronous={synchronous}",
                "wal_autocheckpoint=0",
                "busy_timeout=5000",
                "foreign_keys=ON",
                "temp_store=MEMORY",
                # The WAL is cut back to this when it restarts; without it, it keeps the
                # size of its longest run on disk until shutdown.
                f"journal_size_limit={WAL_SIZE_LIMIT}",
            ):
                await wdb.execute(f"PRAGMA {pragma}")
            await _migrate(wdb)
        except BaseException:
            await wdb.close()
            raise
        rdb = await _open_reader(path)
        # Point reads (``query_point``) run on the loop on a connection of their own: a few
        # microseconds, where a hop to aiosqlite's thread and back costs ~20 us idle and far
        # more on a loaded machine. A reader never waits for the writer in WAL mode; the
        # short busy timeout covers the rare moment SQLite itself makes one wait.
        inline = None
        if path != ":memory:":
            inline = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            register(inline)
            for pragma in ("busy_timeout=50", "query_only=ON", "temp_store=MEMORY"):
                inline.execute(f"PRAGMA {pragma}")
        # Checkpoints run on a connection (and thread) of their own, so commits go on
        # while one fsyncs.
        cdb = None
        if path != ":memory:":
            cdb = await aiosqlite.connect(path, isolation_level=None)
            # Only checkpoints run here; a truncating one waits this long for readers.
            await cdb.execute(f"PRAGMA busy_timeout={TRUNCATE_WAIT_MS}")
            await cdb.execute("PRAGMA temp_store=MEMORY")
        # Only without a per-commit fsync is a commit cheap enough to run on the loop.
        commit_inline = synchronous.upper() in ("OFF", "NORMAL")
        wal = f"{path}-wal" if path != ":memory:" else None
        commit = GroupCommit(wdb, inline=commit_inline, checkpointer=cdb, wal_path=wal)
        commit.start()
        backend = cls(path, rdb, commit, wdb, cdb)
        backend._inline = inline
        return backend

    async def close(self) -> None:
        await self._commit.stop()
        await self._reader.close()
        while self._spare:
            await self._spare.pop().close()
        if self._inline is not None:
            self._inline.close()
        if self._checkpoint_db is not None:
            await self._checkpoint_db.close()
        await self._writer_db.close()

    # -- writes --------------------------------------------------------------------------------

    @property
    def commits(self) -> int:
        return self._commit.commits

    @property
    def may_join(self) -> Callable[[], bool]:
        return self._commit.may_join

    @may_join.setter
    def may_join(self, probe: Callable[[], bool]) -> None:
        self._commit.may_join = probe

    def commit_queued(self) -> None:
        self._commit.commit_queued()

    def large_part(self, row: tuple[Any, ...], pieces: Shared) -> list[Statement] | None:
        return [*large_part_statements(row, pieces.size), (WRITE_PIECES, [(row[0], pieces)])]

    #: The history index's batch (``indexer.Indexer``).
    history_batch: Sequence[str] = HISTORY_BATCH
    history_noted = HISTORY_NOTED

    def history_more(self, counts: Sequence[int]) -> bool:
        return history_more(counts)

    cheap_fresh = True

    async def mark_compacted(self, part_ids: Sequence[str], ts: int) -> None:
        # A JSON patch in SQL: concurrent edits and unknown fields are kept.
        # The mark changes no indexed text: the history index's trigger is held meanwhile.
        await self._commit.submit(
            [
                (HISTORY_HOLD, [()]),
                (MARK_COMPACTED, [(ts, pid) for pid in part_ids]),
                (HISTORY_RELEASE, [()]),
            ]
        )

    def relay(self, session_id: str, method: str, params: bytes) -> None:
        """Nobody to relay to (``shares_events`` is false)."""

    def watch(self, cache: WindowCache) -> None:
        """Nothing to set up: ``fresh`` asks SQLite whether another process wrote."""

    async def now_ms(self) -> int:
        return now_ms()

    # -- reads ---------------------------------------------------------------------------------

    async def query(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        # ``_rows`` on the reader's thread (aiosqlite's queue-a-callable, as ``commit`` uses),
        # so that ``serve --cpu-split`` charges the read to that thread.
        reader = self._reader
        rows: list[Row] = await reader._execute(_rows, reader._conn, sql, args)  # type: ignore[no-untyped-call]
        return rows

    async def query_within(
        self, sql: str, args: Sequence[Any], deadline: float
    ) -> list[Row] | None:
        return await _within(self._reader, sql, args, deadline)

    async def query_point(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        if self._inline is not None:
            try:
                return _rows(self._inline, sql, args)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
        return await self.query(sql, args)  # made to wait: wait off the loop

    @contextlib.asynccontextmanager
    async def stream(self, sql: str, args: Sequence[Any]) -> AsyncIterator[Chunks]:
        """Each stream reads on a connection of its own. A statement read across awaits holds
        its read transaction open, and a statement begun beside it on the same connection
        joins that transaction: it would see the database as it was then, without what was
        committed since (another daemon's compaction, or a write of our own already
        acknowledged), and the window cache would keep it."""
        conn = self._spare.pop() if self._spare else None
        if conn is None:
            conn = self._reader if self.path == ":memory:" else await _open_reader(self.path)
        try:
            async with conn.execute(sql, args) as cursor:
                yield _Chunks(cursor)
        finally:
            if conn is not self._reader:
                if len(self._spare) < SPARE_READERS:
                    self._spare.append(conn)
                else:
                    await conn.close()

    async def fresh(self, cache: WindowCache) -> None:
        """Drop the window cache when another process committed to the database.

        ``PRAGMA data_version`` on the writer connection changes with every commit made by any
        other connection (a second daemon on the same file); our own commits go through this
        one, so they leave it as it is. Asked inline (microseconds); while a batch is on the
        writer's thread the cache is not trusted at all.
        """
        if self.path == ":memory:":
            return
        if self._commit.busy:
            cache.clear()
            return
        version = self._writer_db._conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            if self._data_version is not None:
                cache.clear()
            self._data_version = version


class SqliteReader(ReadOnly):
    """A SQLite file opened ``mode=ro`` (``Store.open(readonly=True)``): one connection that
    SQLite itself keeps from writing, so no migration, no WAL checkpoint, no change to the
    file; WAL lets it read beside a daemon that writes."""

    kind = "sqlite"

    def __init__(self, path: str, reader: aiosqlite.Connection) -> None:
        super().__init__(path)
        self._reader = reader

    @classmethod
    async def open(cls, path: str | Path) -> SqliteReader:
        """Open an existing database at this version's schema, else ``CannotOpen``."""
        file = Path(path)
        if not file.exists():
            raise CannotOpen(f"{file}: no such database")
        if not file.is_file():
            raise CannotOpen(f"{file}: not a database file")
        uri = f"{file.resolve().as_uri()}?mode=ro"
        try:  # first without aiosqlite, whose failed connect leaves its thread behind
            sqlite3.connect(uri, uri=True).close()
        except sqlite3.Error as exc:
            raise CannotOpen(f"{file}: cannot open ({exc})") from None
        conn = await aiosqlite.connect(uri, uri=True, isolation_level=None)
        await _give_functions(conn)

        async def version() -> int | None:
            await conn.execute("PRAGMA busy_timeout=5000")
            rows = list(await conn.execute_fetchall(READ_VERSION))
            return int(rows[0][0]) if rows else None

        await check_opened(str(file), version, conn.close, sqlite3.DatabaseError)
        return cls(str(file), conn)

    async def close(self) -> None:
        await self._reader.close()

    async def query(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        return list(await self._reader.execute_fetchall(sql, args))

    query_point = query  # no connection of its own for point reads: one reader

    async def query_within(
        self, sql: str, args: Sequence[Any], deadline: float
    ) -> list[Row] | None:
        return await _within(self._reader, sql, args, deadline)

    @contextlib.asynccontextmanager
    async def stream(self, sql: str, args: Sequence[Any]) -> AsyncIterator[Chunks]:
        async with self._reader.execute(sql, args) as cursor:
            yield _Chunks(cursor)


async def _within(
    reader: aiosqlite.Connection, sql: str, args: Sequence[Any], deadline: float
) -> list[Row] | None:
    """A read on ``reader``'s thread that SQLite interrupts at ``deadline`` (a progress
    handler set for this statement alone: the thread runs one call at a time)."""

    def run() -> list[Row] | None:
        conn = reader._conn
        conn.set_progress_handler(lambda: time.monotonic() > deadline, DEADLINE_STEPS)
        try:
            return conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if str(exc) != "interrupted":
                raise
            return None
        finally:
            conn.set_progress_handler(None, 0)

    return cast(list[Row] | None, await reader._execute(run))  # type: ignore[no-untyped-call]


def index_noted(conn: sqlite3.Connection, rows: int = 1 << 62) -> None:
    """Run the history index's batch (``schema.HISTORY_BATCH``) over the first ``rows`` noted
    parts in the transaction open on ``conn`` (what ``indexer.Indexer`` commits on its own;
    for the tools and benchmarks that write a database directly)."""
    for sql in HISTORY_BATCH:
        conn.execute(sql, (rows,))


class _Chunks:
    def __init__(self, cursor: aiosqlite.Cursor) -> None:
        self._cursor = cursor

    async def __aiter__(self) -> AsyncIterator[list[Row]]:
        while chunk := await self._cursor.fetchmany(CHUNK):
            yield list(chunk)


async def _migrate(db: aiosqlite.Connection) -> None:
    await db.execute(VERSION_TABLE)
    rows = list(await db.execute_fetchall(READ_VERSION))
    if not rows:
        await db.execute(FIRST_VERSION)
        await db.commit()
        version = 0
    else:
        version = int(rows[0][0])
    if version > SCHEMA_VERSION:
        raise RuntimeError(
            f"database schema v{version} is newer than this daemon (v{SCHEMA_VERSION})"
        )
    for target in range(version + 1, SCHEMA_VERSION + 1):
        await db.execute("BEGIN IMMEDIATE")
        try:
            for stmt in split_script(MIGRATIONS[target - 1]):
                await db.execute(stmt)
            await db.execute(SET_VERSION, (target,))
            await db.execute("COMMIT")
        except sqlite3.Error:
            await db.execute("ROLLBACK")
            raise


def split_script(script: str) -> list[str]:
    """Statements of a migration script (a trigger's body holds ``;`` of its own)."""
    out: list[str] = []
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                out.append(pending.strip())
            pending = ""
    return out


#: Stream readers kept open between streams (one per stream read at once, beyond them closed).
SPARE_READERS = 4


@charged("reads")
def _rows(conn: sqlite3.Connection, sql: str, args: Sequence[Any]) -> list[Row]:
    return conn.execute(sql, args).fetchall()


async def _open_reader(path: str) -> aiosqlite.Connection:
    """A reading connection: autocommit (each statement its own read transaction), never
    writes, waits out the rare moment SQLite makes a reader wait."""
    rdb = await aiosqlite.connect(path, isolation_level=None)
    await _give_functions(rdb)
    await rdb.execute("PRAGMA busy_timeout=5000")
    await rdb.execute("PRAGMA query_only=ON")
    # Sorts and temporary B-trees in memory: on disk they spill to temp files that are
    # written and read back on every read that sorts.
    await rdb.execute("PRAGMA temp_store=MEMORY")
    return rdb


async def _give_functions(conn: aiosqlite.Connection) -> None:
    """The SQL functions the schema's views and triggers call (``packed.register``, on the
    connection's own thread, as aiosqlite's ``create_function`` runs)."""
    await conn._execute(register, conn._conn)  # type: ignore[no-untyped-call]


async def _connect(path: str, **kwargs: Any) -> aiosqlite.Connection:
    """``aiosqlite.connect``, except that a file that cannot be opened (a directory, no
    permission) leaves no thread behind: aiosqlite stops its worker with a future nobody
    awaits, which then reports to a closed loop as an "Exception in thread" traceback."""
    conn = aiosqlite.connect(path, **kwargs)
    try:
        return await conn
    except BaseException:
        thread = getattr(conn, "_thread", None)
        if thread is not None and thread.is_alive():
            await asyncio.to_thread(thread.join)
        raise
