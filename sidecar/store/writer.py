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
        try:
            # The connection opens the transaction implicitly at the first write (it is not in
            # autocommit mode), which saves one thread hop per batch over an explicit BEGIN.
            if len(batch) == 1:
                batch[0].rowcounts = await self._run_op(batch[0])
            else:
                await self._run_grouped(batch)
            await self._db.commit()
            self.commits += 1
        except sqlite3.Error:
            await self._rollback()
            if len(batch) == 1:
                await self._commit_alone(batch[0])
            else:
                for op in batch:
                    await self._commit_alone(op)
            return
        except BaseException as exc:
            await self._rollback()
            for op in batch:
                if not op.future.done():
                    op.future.set_exception(exc)
            raise
        for op in batch:
            _resolve(op)

    async def _run_op(self, op: Op) -> list[int]:
        counts = []
        for sql, rows in op.statements:
            cur = await self._db.executemany(sql, rows)
            counts.append(cur.rowcount)
        return counts

    async def _run_grouped(self, batch: list[Op]) -> None:
        """Merge runs of identical SQL across ops into one executemany (the group-commit win)."""
        pending_sql: str | None = None
        pending_rows: list[Sequence[Any]] = []
        for op in batch:
            if op.needs_counts:
                if pending_sql is not None:
                    await self._db.executemany(pending_sql, pending_rows)
                    pending_sql, pending_rows = None, []
                op.rowcounts = await self._run_op(op)
                continue
            for sql, rows in op.statements:
                if sql != pending_sql and pending_sql is not None:
                    await self._db.executemany(pending_sql, pending_rows)
                    pending_rows = []
                pending_sql = sql
                pending_rows.extend(rows)
        if pending_sql is not None:
            await self._db.executemany(pending_sql, pending_rows)

    async def _commit_alone(self, op: Op) -> None:
        try:
            op.rowcounts = await self._run_op(op)
            await self._db.commit()
            self.commits += 1
        except sqlite3.IntegrityError as exc:
            await self._rollback()
            _resolve(op, op.on_integrity(exc) if op.on_integrity else exc)
            return
        except sqlite3.Error as exc:
            await self._rollback()
            _resolve(op, exc)
            return
        _resolve(op)

    async def _rollback(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            await self._db.rollback()


def _resolve(op: Op, exc: BaseException | None = None) -> None:
    """Settle an op's future unless its caller already gave up waiting."""
    if op.future.done():
        return
    if exc is None:
        op.future.set_result(None)
    else:
        op.future.set_exception(exc)
