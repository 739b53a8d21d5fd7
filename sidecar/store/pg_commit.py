"""Group commit over PostgreSQL's one writing connection (``PgCommit``).

The same contract as ``commit.GroupCommit`` for SQLite: ops queued while a batch is on the
wire, or in the same loop iteration, commit together in one transaction (runs of identical SQL
become one pipelined ``executemany``), and each caller resumes only after the commit. If the
batch fails it is rolled back and replayed op by op, so only the offending op fails and
nothing of it is stored. A round trip to the server costs far more than SQLite's in-process
commit, so batches form by themselves under load: while one is in flight the next queues.

An op is SQL statements, or a function run on the connection inside the transaction (a JSON
patch that reads the rows it changes under ``FOR UPDATE``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import asyncpg

from sidecar.errors import Unavailable
from sidecar.store.backend import Statement
from sidecar.store.commit import Committer, Op, resolve, take_batch
from sidecar.store.statements import TOUCH_SESSION, UPSERT_MESSAGE, UPSERT_PART

log = logging.getLogger("sidecar.store")

OpFunction = Callable[[asyncpg.Connection], Awaitable[list[int]]]
Connect = Callable[[], Awaitable[asyncpg.Connection]]

#: The server is gone or going (a restart, a failover, a network cut): not the op's fault.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.OperatorInterventionError,
)


def driver_state(exc: BaseException) -> bool:
    """The driver's own complaint about a connection's state (``InterfaceError`` "connection
    is closed", ``InternalClientError`` "another operation is in progress"): what a server
    that went away mid-operation leaves, but also what misuse of a connection would give. So
    it is an outage only once shown to be one: the connection is closed, or a fresh one
    cannot be had; otherwise a bug. Not its subclasses (``DataError``, configuration errors:
    bugs or bad input, whatever the server does)."""
    return type(exc) in (asyncpg.InterfaceError, asyncpg.InternalClientError)


def outage(exc: BaseException, conn: asyncpg.Connection | None = None) -> bool:
    """Whether ``exc``, raised using ``conn``, means the server cannot be used right now: a
    connection error, or a state error on a closed connection or raised while handling a
    connection error (a transaction's rollback after the server went away)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, CONNECTION_ERRORS):
            return True
        if seen is exc and driver_state(exc) and conn is not None and conn.is_closed():
            return True
        if not driver_state(seen):
            return False
        seen = seen.__cause__ or seen.__context__
    return False


@dataclass(slots=True)
class _Op(Op):
    """``commit.Op`` (the same fields, told the same way by ``resolve``), which can also be a
    function run on the connection."""

    function: OpFunction | None = None


@functools.lru_cache(maxsize=512)
def pg_sql(sql: str) -> str:
    """``?`` placeholders as PostgreSQL's ``$1, $2, ...`` (the store's SQL has no ``?`` in a
    literal)."""
    pieces = sql.split("?")
    out = [pieces[0]]
    for n, piece in enumerate(pieces[1:], start=1):
        out.append(f"${n}{piece}")
    return "".join(out)


# ``pg_schema``'s ``sidecar_write``: the store's ingest statements as one (``_as_writes``).
WRITE = "SELECT sidecar_write(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


# The store's ingest statements as rows of ``WRITE`` (kind, id, session, message, created,
# role, parent, summary_ok, type, data), from each statement's own row shape.
_AS_WRITE: dict[str, Callable[[Sequence[Any]], tuple[Any, ...]]] = {
    UPSERT_MESSAGE: lambda r: ("message", r[0], r[1], None, r[2], r[3], r[4], r[5], None, r[6]),
    TOUCH_SESSION: lambda r: ("touch", None, r[1], None, r[0], None, None, None, None, None),
    UPSERT_PART: lambda r: ("part", r[0], r[2], r[1], None, None, None, None, r[3], r[4]),
}


def _as_writes(statements: list[Statement]) -> list[Statement]:
    """Messages, session touches and parts as one statement, so that consecutive ops of
    different kinds still merge into one pipelined ``executemany``."""
    out: list[Statement] = []
    for sql, rows in statements:
        convert = _AS_WRITE.get(sql)
        out.append((WRITE, [convert(r) for r in rows]) if convert else (sql, rows))
    return out


def _exact(sql: str) -> bool:
    """An unconditional upsert changes exactly one row per input row (or fails): the count a
    merged ``executemany`` (which reports none) can still give. ``WRITE`` is such upserts
    (its session touch, which changes at most one row, is never asked for its count)."""
    if sql == WRITE:
        return True
    head = sql.lstrip().upper()
    return head.startswith("INSERT") and "DO UPDATE" in head and " WHERE " not in head


#: A slice of a large part appended to its row (``PostgresBackend.large_part``). Sent a row
#: at a time: for an ``executemany`` the driver builds every row's message before it writes
#: them, which would hold the whole part again.
APPEND_SLICE = "UPDATE parts SET data = data || convert_from(?::bytea, 'UTF8') WHERE id = ?"


async def _executemany(conn: asyncpg.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
    if sql != APPEND_SLICE:
        await conn.executemany(pg_sql(sql), rows)
        return
    for row in rows:
        await conn.execute(pg_sql(sql), *row)


class PgCommit(Committer):
    """``reconnect`` gives a new connection once the current one is lost; until it succeeds,
    each batch fails with ``Unavailable`` (nothing stored) and the next one tries again."""

    _op_type = _Op
    _prepare = staticmethod(_as_writes)

    def __init__(
        self, conn: asyncpg.Connection, reconnect: Connect | None = None, role: str = "writer"
    ) -> None:
        self.role = role  # "writer" (data) or "relay" (events): benchmarks count them apart
        self._conn = conn
        self._reconnect = reconnect
        self._pending: list[_Op] = []
        self._wake = asyncio.Event()
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._open = False
        self._task: asyncio.Task[None] | None = None
        self.commits = 0

    def start(self) -> None:
        self._open = True
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        self._open = False
        await self._quiet.wait()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def run(self, function: OpFunction) -> list[int]:
        """Commit ``function`` run on the connection as one op of the group commit."""
        op = cast(_Op, self._op([], None, None))
        op.function = function
        op.writes = True
        return await self._await_commit(op)

    def _queue(self, op: Op) -> None:
        self._pending.append(cast(_Op, op))  # made by ``_op``: an ``_Op``
        self._quiet.clear()
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            # Let the rest of this loop iteration's writes join the batch.
            await asyncio.sleep(0)
            while self._pending:
                batch = take_batch(self._pending)
                outcomes = await self._commit(batch)
                for op, outcome in zip(batch, outcomes, strict=True):
                    resolve(op, outcome)
                self._heard(batch, outcomes)
            self._quiet.set()

    async def _commit(self, batch: list[_Op]) -> list[BaseException | None]:
        """One transaction for the batch; on failure, one per op."""
        if self._conn.is_closed():
            if self._reconnect is None:
                return [unavailable(ConnectionError("connection closed"))] * len(batch)
            try:
                self._conn = await self._reconnect()
            except CONNECTION_ERRORS as exc:
                return [unavailable(exc)] * len(batch)
        try:
            single = _one_statement(batch)
            if single is not None:
                # One executemany is atomic on its own (one implicit transaction up to its
                # Sync): no BEGIN and COMMIT round trips, ~6x cheaper measured here.
                await self._conn.executemany(
                    pg_sql(single), [r for op in batch for _, rows in op.statements for r in rows]
                )
                exact = _exact(single)
                for op in batch:
                    op.rowcounts = [len(rows) if exact else -1 for _, rows in op.statements]
            else:
                async with self._conn.transaction():
                    if len(batch) == 1:
                        batch[0].rowcounts = await self._run_op(batch[0])
                    else:
                        await self._run_grouped(batch)
            self.commits += 1
            return [None] * len(batch)
        except Exception as exc:  # rolled back: replay op by op, so only the offending op fails
            if outage(exc, self._conn):
                return [unavailable(exc)] * len(batch)
            if driver_state(exc):
                # A connection the server left mid-operation, not yet seen closed: the replay
                # runs on a fresh one, and a server that cannot give one is an outage.
                lost = await self._replace()
                if lost is not None:
                    return [unavailable(lost)] * len(batch)
        outcomes: list[BaseException | None] = []
        for op in batch:
            try:
                async with self._conn.transaction():
                    op.rowcounts = await self._run_op(op)
                self.commits += 1
                outcomes.append(None)
            except asyncpg.IntegrityConstraintViolationError as exc:
                outcomes.append(op.on_integrity(exc) if op.on_integrity else exc)
            except Exception as exc:
                if outage(exc, self._conn):
                    outcomes.append(unavailable(exc))
                    continue
                if driver_state(exc):
                    self._conn.terminate()  # unusable: the next batch starts on a fresh one
                if not isinstance(exc, asyncpg.PostgresError):
                    log.error("write failed: %s", type(exc).__name__, exc_info=exc)
                outcomes.append(exc)
        return outcomes

    async def _replace(self) -> BaseException | None:
        """Drop the connection for a new one; the error when the server cannot give one."""
        self._conn.terminate()
        if self._reconnect is None:
            return ConnectionError("connection closed")
        try:
            self._conn = await self._reconnect()
        except CONNECTION_ERRORS as exc:
            return exc
        return None

    async def _run_op(self, op: _Op) -> list[int]:
        if op.function is not None:
            return await op.function(self._conn)
        counts = []
        for sql, rows in op.statements:
            if op.needs_counts and not _exact(sql):  # a row at a time: each one's count
                total = 0
                for row in rows:
                    status = await self._conn.execute(pg_sql(sql), *row)
                    total += _count(status)
                counts.append(total)
            else:
                await _executemany(self._conn, sql, rows)
                counts.append(len(rows) if _exact(sql) else -1)
        return counts

    async def _run_grouped(self, batch: list[_Op]) -> None:
        """Runs of the same SQL across ops go as one ``executemany``."""
        pending_sql: str | None = None
        pending_rows: list[Sequence[Any]] = []
        owners: list[tuple[_Op, int, int]] = []

        async def flush() -> None:
            if pending_sql is None:
                return
            await _executemany(self._conn, pending_sql, pending_rows)
            exact = _exact(pending_sql)
            for op, index, rows in owners:
                op.rowcounts[index] = rows if exact else -1

        for op in batch:
            if op.needs_counts or op.function is not None:
                await flush()
                pending_sql, pending_rows, owners = None, [], []
                op.rowcounts = await self._run_op(op)
                continue
            op.rowcounts = [0] * len(op.statements)
            for index, (sql, rows) in enumerate(op.statements):
                if sql != pending_sql:
                    await flush()
                    pending_sql, pending_rows, owners = sql, [], []
                pending_rows.extend(rows)
                owners.append((op, index, len(rows)))
        await flush()


def _one_statement(batch: list[_Op]) -> str | None:
    """The SQL, when every statement of every op in the batch is that same one (and no op
    needs a count it could not give)."""
    sql: str | None = None
    for op in batch:
        if op.function is not None:
            return None
        for stmt, _rows in op.statements:
            if sql is None:
                sql = stmt
            elif stmt != sql:
                return None
    if sql is None or (any(op.needs_counts for op in batch) and not _exact(sql)):
        return None
    return sql


def _count(status: str) -> int:
    """Rows a command changed, from its tag (``INSERT 0 1``, ``UPDATE 3``, ``SELECT 1``)."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


def unavailable(exc: BaseException, *, write: bool = True) -> Unavailable:
    """The error a request gets when the server cannot be reached (for a write: nothing of it
    was stored)."""
    text = f"the database cannot be reached ({type(exc).__name__}: {exc})"
    return Unavailable(text + ("; nothing was stored, retry later" if write else ""))
