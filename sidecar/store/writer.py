"""The single writer: group commit over one aiosqlite connection.

Every write is a list of statements (an *op*). The writer task drains whatever ops are queued,
runs them in one transaction (consecutive statements with the same SQL become
one ``executemany``), and only then resolves each op's future: a caller is answered after its
write is durable, and N concurrent writers pay for one commit. If the batch fails (a foreign
key names an unknown session, say), it is rolled back and replayed op by op so that only the
offending op fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiosqlite

Statement = tuple[str, Sequence[Sequence[Any]]]

MAX_BATCH_OPS = 1024


@dataclass(slots=True)
class Op:
    statements: list[Statement]
    future: asyncio.Future[None]
    # Turns an IntegrityError of this op into the error its caller should see.
    on_integrity: Callable[[sqlite3.IntegrityError], Exception] | None = None
    needs_counts: bool = False
    rowcounts: list[int] = field(default_factory=list)


class Writer:
    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db
        self._queue: asyncio.Queue[Op | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.commits = 0  # observable for tests and benchmarks: batches committed

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sidecar-store-writer")

    async def stop(self) -> None:
        if self._task is not None:
            await self._queue.put(None)
            await self._task
            self._task = None

    async def submit(
        self,
        statements: list[Statement],
        on_integrity: Callable[[sqlite3.IntegrityError], Exception] | None = None,
        needs_counts: bool = False,
    ) -> list[int]:
        """Queue one atomic op and wait until it is committed.

        With ``needs_counts`` the op is not merged with others, so the rows changed by each of
        its statements can be returned.
        """
        if self._task is None:
            raise RuntimeError("store is closed")
        loop = asyncio.get_running_loop()
        op = Op(statements, loop.create_future(), on_integrity, needs_counts)
        self._queue.put_nowait(op)
        # Not shielded: a cancelled caller stops waiting, but its queued op still commits.
        await op.future
        return op.rowcounts

    async def _run(self) -> None:
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < MAX_BATCH_OPS:
                try:
                    nxt = self._queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
                if nxt is None:
                    stopping = True
                    break
                batch.append(nxt)
            await self._commit(batch)

    async def _commit(self, batch: list[Op]) -> None:
        # The whole group commit runs as one function on aiosqlite's own thread: one thread
        # hop per batch instead of one per statement (each hop costs 40-50 us here, more than
        # the SQLite work of a typical batch). ``_execute`` is aiosqlite's queue-a-callable
        # primitive behind every public method; the store tests exercise this path.
        try:
            outcomes, commits = await self._db._execute(_apply, self._db._conn, batch)
        except BaseException as exc:
            for op in batch:
                _resolve(op, exc)
            raise
        self.commits += commits
        for op, outcome in zip(batch, outcomes, strict=True):
            _resolve(op, outcome)


def _apply(conn: sqlite3.Connection, batch: list[Op]) -> tuple[list[BaseException | None], int]:
    """Commit ``batch`` in one transaction; if that fails, each op alone (aiosqlite thread)."""
    try:
        if len(batch) == 1:
            batch[0].rowcounts = _run_op(conn, batch[0])
        else:
            _run_grouped(conn, batch)
        conn.commit()  # the transaction began implicitly at the first write
        return [None] * len(batch), 1
    except sqlite3.Error:
        _rollback(conn)
    outcomes: list[BaseException | None] = []
    commits = 0
    for op in batch:
        try:
            op.rowcounts = _run_op(conn, op)
            conn.commit()
            commits += 1
            outcomes.append(None)
        except sqlite3.IntegrityError as exc:
            _rollback(conn)
            outcomes.append(op.on_integrity(exc) if op.on_integrity else exc)
        except sqlite3.Error as exc:
            _rollback(conn)
            outcomes.append(exc)
    return outcomes, commits


def _run_op(conn: sqlite3.Connection, op: Op) -> list[int]:
    return [conn.executemany(sql, rows).rowcount for sql, rows in op.statements]


def _run_grouped(conn: sqlite3.Connection, batch: list[Op]) -> None:
    """Merge runs of identical SQL across ops into one executemany (the group-commit win).

    A merged run reports only its total; when that equals its row count every op's rows all
    applied, otherwise the ops of that run get -1 (unknown). Ops that need exact counts
    (``needs_counts``) run on their own.
    """
    pending_sql: str | None = None
    pending_rows: list[Sequence[Any]] = []
    owners: list[tuple[Op, int, int]] = []  # (op, statement index, rows it added)

    def flush() -> None:
        if pending_sql is None:
            return
        exact = conn.executemany(pending_sql, pending_rows).rowcount == len(pending_rows)
        for op, index, rows in owners:
            op.rowcounts[index] = rows if exact else -1

    for op in batch:
        if op.needs_counts:
            flush()
            pending_sql, pending_rows, owners = None, [], []
            op.rowcounts = _run_op(conn, op)
            continue
        op.rowcounts = [0] * len(op.statements)
        for index, (sql, rows) in enumerate(op.statements):
            if sql != pending_sql:
                flush()
                pending_sql, pending_rows, owners = sql, [], []
            pending_rows.extend(rows)
            owners.append((op, index, len(rows)))
    flush()


def _rollback(conn: sqlite3.Connection) -> None:
    with contextlib.suppress(sqlite3.Error):
        conn.rollback()


def _resolve(op: Op, exc: BaseException | None = None) -> None:
    """Settle an op's future unless its caller already gave up waiting."""
    if op.future.done():
        return
    if isinstance(exc, asyncio.CancelledError):
        op.future.cancel()
    elif exc is None:
        op.future.set_result(None)
    else:
        op.future.set_exception(exc)
