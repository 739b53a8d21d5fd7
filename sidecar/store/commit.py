"""Group commit over the one writing aiosqlite connection (``GroupCommit``).

Every write is a list of statements (an *op*). Ops submitted while the writer is busy, or in
the same loop iteration, are committed together in one transaction (consecutive statements
with the same SQL become one ``executemany``), and only then is each op's caller resumed: a
caller is answered after its write is durable, and N concurrent writers pay for one commit. If
the batch fails (a foreign key names an unknown session, say), it is rolled back and replayed
op by op so that only the offending op fails.

Where a batch commits is a latency trade. With ``synchronous=NORMAL`` a WAL commit is a few
``write()`` calls into the page cache (~40 us here), about what aiosqlite's thread hop costs
on its own (plus two wake-ups and GIL hand-overs); so a batch of modest size commits inline on
the event loop, and a large one (a fork, a compaction marking hundreds of parts) on aiosqlite's
thread, so the loop never stalls for long. An op that nothing could join (the writer idle,
nothing queued, no request waiting for its first step: ``may_join`` says so) commits at once in
its caller's step, saving the two loop iterations of the queue. The one slow thing SQLite does
on commit, a checkpoint (it fsyncs), is switched off on the connection; the writer asks a
second connection, on its own aiosqlite thread, to run it, and goes on committing meanwhile
(a PASSIVE checkpoint never blocks writers). One it starts because it went idle holds the
writes that come meanwhile instead, so that it copies every frame and the next write restarts
the WAL: otherwise a frontend's stream of writes lands behind each checkpoint and the WAL file
grows to the size that calls for a truncation. With ``synchronous=FULL`` every commit fsyncs
and none is inline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiosqlite

from sidecar.model.buffers import Shared
from sidecar.model.cpu import charge
from sidecar.store.backend import OnIntegrity, Statement, Then
from sidecar.store.packed import pack_rows

log = logging.getLogger("sidecar.store")

MAX_BATCH_OPS = 1024
# A batch commits inline when it has at most this many rows and this much payload (a few ms of
# SQLite work at most); larger ones go to aiosqlite's thread.
INLINE_MAX_ROWS = 256
INLINE_MAX_BYTES = 1 << 20
# A PASSIVE checkpoint runs once about this many WAL pages (1 MiB) have been written.
# Estimated per commit (see ``_pages``).
CHECKPOINT_PAGES = 256
# A checkpoint that finds the WAL this long holds the writes while it runs and truncates the
# WAL (see ``_start_checkpoint``): it bounds the WAL at a few times the checkpoint interval.
WAL_RESTART_FRAMES = 2 * CHECKPOINT_PAGES
# Pages written since the last checkpoint that make the writer checkpoint when it goes idle
# (512 KiB). A frontend goes idle after each write, so this is how many commits share one
# checkpoint's two fsyncs (~160 us of CPU here); at 32 pages they cost a fifth of a small write.
IDLE_CHECKPOINT_PAGES = 128
# An idle checkpoint holds the writes that come while it runs (they wait for its fsyncs) once
# the WAL is this long, so that it copies every frame and the WAL restarts: every idle one does.
IDLE_HOLD_FRAMES = IDLE_CHECKPOINT_PAGES
# Commits between two reads of the WAL file's size after a commit (``GroupCommit._wal_due``).
WAL_STAT_COMMITS = 8
# A WAL file larger than this makes the next checkpoint a holding, truncating one.
WAL_RESTART_BYTES = 2 << 20
# What a WAL file is cut back to when SQLite restarts it (``PRAGMA journal_size_limit``).
WAL_SIZE_LIMIT = 1 << 20
# How long a truncating checkpoint waits for readers: a long-lived reader (another process
# holding a snapshot) delays it to the next try, never stalls the held writes for long.
TRUNCATE_WAIT_MS = 100
_CHECKPOINT = "PRAGMA wal_checkpoint(PASSIVE)"
_TRUNCATE = "PRAGMA wal_checkpoint(TRUNCATE)"


@dataclass(slots=True)
class Op:
    statements: list[Statement]
    future: asyncio.Future[None] | None = None
    then: Then | None = None
    # Turns an IntegrityError of this op into the error its caller should see.
    on_integrity: OnIntegrity | None = None
    needs_counts: bool = False
    rowcounts: list[int] = field(default_factory=list)
    # Background work (the history index's batch): committed in a transaction of its own,
    # never one a write waits in, and heard by nobody's ``on_commit``.
    background: bool = False
    # Does it change anything? (Not an empty op, which only waits for those before it.)
    writes: bool = True


AnyOp = TypeVar("AnyOp", bound=Op)


def take_batch(pending: list[AnyOp]) -> list[AnyOp]:
    """The next group commit's ops, taken off ``pending``: up to ``MAX_BATCH_OPS`` writes in
    the order queued, stopping before a background op, which commits alone."""
    end = min(len(pending), MAX_BATCH_OPS)
    for i in range(end):
        if pending[i].background:
            end = i or 1
            break
    batch = pending[:end]
    del pending[:end]
    return batch


def heard(batch: Sequence[Op], outcomes: list[BaseException | None]) -> bool:
    """Did ``batch`` commit a write (not only background work)? What ``on_commit`` hears."""
    return any(
        op.writes and not op.background and exc is None
        for op, exc in zip(batch, outcomes, strict=True)
    )


class Committer:
    """What both group commits (``GroupCommit`` here, ``pg_commit.PgCommit``) do alike: ops
    refused once stopped, queued (``_queue``), awaited, and a way to wait for quiet."""

    _open: bool
    _quiet: asyncio.Event  # nothing pending, nothing running
    #: The class of an op, and what its statements become on the way in (PostgreSQL's: ops
    #: that may run a function, statements merged into one ``WRITE``).
    _op_type: type[Op] = Op
    _prepare: Callable[[list[Statement]], list[Statement]] = staticmethod(lambda s: s)
    #: Called after a commit that stored a write (the history indexer's cue).
    on_commit: Callable[[], None] | None = None

    def _heard(self, batch: Sequence[Op], outcomes: list[BaseException | None]) -> None:
        if self.on_commit is not None and heard(batch, outcomes):
            self.on_commit()

    async def submit_background(self, statements: list[Statement]) -> list[int]:
        """Commit background work as an op of its own (exact row counts), behind every op
        queued before it."""
        op = self._op(statements, None, None, True)
        op.background = True
        return await self._await_commit(op)

    async def settle(self) -> None:
        """Wait until nothing is queued, committing or checkpointing."""
        await self._quiet.wait()

    async def submit(
        self,
        statements: list[Statement],
        on_integrity: OnIntegrity | None = None,
        needs_counts: bool = False,
    ) -> list[int]:
        """Commit one atomic op; returns once it is durable.

        With ``needs_counts`` the op is not merged with others, so the rows changed by each of
        its statements can be returned.
        """
        return await self._await_commit(self._op(statements, None, on_integrity, needs_counts))

    def submit_then(
        self, statements: list[Statement], then: Then, on_integrity: OnIntegrity | None = None
    ) -> None:
        """Queue an op without waiting: ``then`` is called once it is committed or has failed.

        For callers that have no task of their own (the deferred ingest handlers); the op
        joins the next group commit, which ``commit_queued`` can bring forward.
        """
        self._queue(self._op(statements, then, on_integrity))

    def _op(
        self,
        statements: list[Statement],
        then: Then | None,
        on_integrity: OnIntegrity | None,
        needs_counts: bool = False,
    ) -> Op:
        if not self._open:
            raise RuntimeError("store is closed")
        op = self._op_type(self._prepare(statements), None, then, on_integrity, needs_counts)
        op.writes = bool(statements)
        return op

    async def _await_commit(self, op: Op) -> list[int]:
        """Queue ``op`` and wait for its commit."""
        op.future = asyncio.get_running_loop().create_future()
        self._queue(op)
        # Not shielded: a cancelled caller stops waiting, but its queued op still commits.
        await op.future
        return op.rowcounts

    def _queue(self, op: Op) -> None:
        raise NotImplementedError


class Hooked:
    """What both backends hand to their group commit as it is: the history indexer's
    background ops and its cue after each commit."""

    _commit: Committer

    async def submit_background(self, statements: list[Statement]) -> list[int]:
        return await self._commit.submit_background(statements)

    @property
    def on_commit(self) -> Callable[[], None] | None:
        return self._commit.on_commit

    @on_commit.setter
    def on_commit(self, hook: Callable[[], None] | None) -> None:
        self._commit.on_commit = hook


class GroupCommit(Committer):
    """Owns the writer connection; ``inline`` lets batches commit on the event loop.

    The connection must have been opened with ``check_same_thread=False`` for ``inline``, and
    with ``wal_autocheckpoint=0`` (``Store.open`` does both): this writer is its only user and
    never runs two things on it at once (``_busy`` covers the off-loop work). ``checkpointer``
    is another connection to the same file; without one (``:memory:``) nothing checkpoints.
    """

    def __init__(
        self,
        db: aiosqlite.Connection,
        *,
        inline: bool = False,
        checkpointer: aiosqlite.Connection | None = None,
        wal_path: str | None = None,
    ) -> None:
        self._db = db
        self._wal_path = wal_path  # the WAL file, whose real size decides a holding checkpoint
        self._truncate_refused = False  # the last truncating checkpoint found a reader
        self._inline = inline
        self._checkpointer = checkpointer
        self._checkpointing: asyncio.Future[None] | None = None
        self._pending: list[Op] = []
        self._busy = False  # a batch is being committed on aiosqlite's thread
        # Writes wait behind an idle checkpoint (``_start_checkpoint``); the writer's own
        # connection stays free for reads meanwhile.
        self._held = False
        self._drain_handle: asyncio.Handle | None = None  # a drain queued with call_soon
        self._open = False
        self._quiet = asyncio.Event()  # nothing pending, nothing running
        self._quiet.set()
        self._job: asyncio.Future[None] | None = None  # the off-loop work behind ``_busy``
        self._wal_pages = 0  # estimated pages written since the last checkpoint
        self._unstated = 0  # commits since the WAL file's size was last read (``_after``)
        # Could another op join one submitted now? The server answers this (requests still
        # waiting for their first step); by default always "yes", which only costs latency.
        self.may_join: Callable[[], bool] = lambda: True
        self.commits = 0  # observable for tests and benchmarks: batches committed
        self.inline_commits = 0  # of which committed on the event loop
        self.solo_commits = 0  # of which committed at once in the caller's own step
        self.checkpoints = 0
        self.wal_frames = 0  # frames in the WAL at the last checkpoint

    def start(self) -> None:
        self._open = True

    @property
    def busy(self) -> bool:
        """A batch is on aiosqlite's thread: the connection is not the loop's to use now."""
        return self._busy

    async def stop(self) -> None:
        """Refuse new ops, then wait for every queued one to commit."""
        self._open = False
        await self.settle()

    async def _await_commit(self, op: Op) -> list[int]:
        """At once in the caller's step when nothing else could join it, else queued."""
        if self._inline and not (self._busy or self._held or self._pending or self.may_join()):
            size = _size([op])
            if _fits_inline(*size):
                outcome = self._commit_inline([op], *size)[0]
                self.solo_commits += 1
                self._heard([op], [outcome])
                self._after()
                if outcome is not None:
                    raise outcome
                return op.rowcounts
        return await super()._await_commit(op)

    def _queue(self, op: Op) -> None:
        self._pending.append(op)
        self._quiet.clear()
        self._schedule()

    def commit_queued(self) -> None:
        """Run the drain now (the end of a read: every frame in it has queued its op)."""
        if self._drain_handle is not None and not self._busy:
            self._drain_handle.cancel()  # drained now: the queued one would find nothing
            self._drain()

    # -- internals -----------------------------------------------------------------------------

    def _schedule(self) -> None:
        if not (self._busy or self._held) and self._drain_handle is None:
            self._drain_handle = asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_handle = None
        if self._busy or self._held or not self._pending:
            self._after()
            return
        batch = take_batch(self._pending)
        rows, payload = _size(batch)
        if self._inline and _fits_inline(rows, payload):
            outcomes = self._commit_inline(batch, rows, payload)
            for op, outcome in zip(batch, outcomes, strict=True):
                resolve(op, outcome)
            self._heard(batch, outcomes)
            self._after()
        else:
            self._start_job(self._commit_off_loop(batch, _pages(rows, payload)))

    def _start_job(self, job: Coroutine[Any, Any, None]) -> None:
        """Run ``job`` (it uses aiosqlite's thread); the writer is busy until it ends."""
        self._busy = True
        self._job = asyncio.ensure_future(job)

    def _start_checkpoint(self, *, idle: bool = False) -> None:
        if self._wal_pages >= CHECKPOINT_PAGES:
            self._truncate_refused = False  # an interval has passed: try truncating again
        frames = self.wal_frames + self._wal_pages  # about how long the WAL is now
        self._wal_pages = 0
        if self._checkpointer is None:
            return
        self._quiet.clear()
        # SQLite restarts the WAL from its start only at a write that finds every frame
        # copied; under a steady stream each concurrent checkpoint ends behind the newest
        # commits, so the WAL would grow for as long as the stream lasts. Once it has, one
        # checkpoint holds the writes (queued; the loop goes on) and truncates it, waiting
        # for readers at most ``TRUNCATE_WAIT_MS`` (a reader still there: tried again at the
        # next interval, so one that comes and goes cannot hold it off for ever).
        # (Only when no batch is on aiosqlite's thread: ``_busy`` then belongs to that job.)
        hold = (self.wal_frames >= WAL_RESTART_FRAMES or self._wal_too_big()) and not self._busy
        if hold:
            self._busy = True
        elif idle and frames >= IDLE_HOLD_FRAMES:
            # Writes that come meanwhile wait: it copies every frame, so the next write starts
            # the WAL over (PASSIVE waits for no reader, whose frames are only left uncopied).
            self._held = True
        self._checkpointing = asyncio.ensure_future(self._checkpoint(self._checkpointer, hold))

    def _commit_inline(
        self, batch: list[Op], rows: int, payload: int
    ) -> list[BaseException | None]:
        try:
            outcomes, commits = _apply(self._db._conn, batch)
        except Exception as exc:  # not an SQLite error: a bug; fail the batch, keep serving
            log.exception("writer batch failed")
            _rollback(self._db._conn)
            return [exc] * len(batch)
        self.commits += commits
        self.inline_commits += commits
        self._wal_pages += _pages(rows, payload)
        return outcomes

    async def _commit_off_loop(self, batch: list[Op], pages: int) -> None:
        # The whole group commit runs as one function on aiosqlite's own thread: one hop per
        # batch. ``_execute`` is aiosqlite's queue-a-callable primitive behind its public API.
        try:
            outcomes, commits = await self._db._execute(  # type: ignore[no-untyped-call]
                _apply, self._db._conn, batch
            )
        except BaseException as exc:  # cancelled, or a bug: fail the batch, keep serving
            if not isinstance(exc, asyncio.CancelledError):
                log.exception("writer batch failed")
            outcomes, commits = [exc] * len(batch), 0
        self.commits += commits
        self._wal_pages += pages
        for op, outcome in zip(batch, outcomes, strict=True):
            resolve(op, outcome)
        self._heard(batch, outcomes)
        self._busy = False
        self._after()

    async def _checkpoint(self, conn: aiosqlite.Connection, hold: bool) -> None:
        """Copy committed WAL pages into the database file, on the checkpointer's thread.

        PASSIVE waits for no reader or writer; pages still in use are copied next time.
        """
        try:
            rows = await conn.execute_fetchall(_TRUNCATE if hold else _CHECKPOINT)
            self.checkpoints += 1
            busy, frames, copied = next(iter(rows))
            if hold:
                self._truncate_refused = bool(busy)
            # After a TRUNCATE that got through, the WAL is empty (it reports -1 frames);
            # after one that held the writes and copied every frame, the next write
            # restarts it.
            restarts = not busy and (hold or (self._held and copied == frames))
            self.wal_frames = 0 if restarts else max(0, int(frames))
        except sqlite3.Error as exc:  # pragma: no cover - retried after later writes
            log.warning("WAL checkpoint failed: %s", exc)
        finally:
            self._checkpointing = None
            if hold:
                self._busy = False
            self._held = False
            self._after()

    def _wal_too_big(self) -> bool:
        """The WAL file is past ``WAL_RESTART_BYTES`` and the last truncating checkpoint was
        not refused by a reader (after a refusal, the next one waits a checkpoint interval:
        a long-lived reader must not make every write wait for it)."""
        return not self._truncate_refused and self._wal_bytes() > WAL_RESTART_BYTES

    def _wal_due(self) -> bool:
        """Whether to read the WAL file's size after this commit: after every
        ``WAL_STAT_COMMITS``-th (a stat each commit was ~2% of a small write's CPU; a WAL
        past ``WAL_RESTART_BYTES`` waits at most that many commits for its checkpoint)."""
        self._unstated += 1
        if self._unstated < WAL_STAT_COMMITS:
            return False
        self._unstated = 0
        return True

    def _wal_bytes(self) -> int:
        """The WAL file's size (a stat: about a microsecond); 0 when unknown. The frame count
        a checkpoint reports lags behind when checkpoints end behind a steady stream of
        writes; the file's size does not."""
        if self._wal_path is None:
            return 0
        try:
            return os.stat(self._wal_path).st_size
        except OSError:
            return 0

    def _after(self) -> None:
        """After a commit or checkpoint: checkpoint if due; drain what queued, or go quiet."""
        if self._checkpointing is None and (
            self._wal_pages >= CHECKPOINT_PAGES
            or (self._wal_pages and not self._busy and self._wal_due() and self._wal_too_big())
        ):
            self._start_checkpoint()
        if self._busy or self._held:
            return
        if self._pending:
            self._schedule()
        elif self._drain_handle is None and self._checkpointing is None:
            if self._wal_pages >= IDLE_CHECKPOINT_PAGES and self._checkpointer is not None:
                # Idle with writes not yet copied (a turn's worth, or a prune's rewrite of
                # large rows, which ``_pages`` cannot see): checkpoint now, while nothing
                # competes, so the WAL restarts small instead of growing across turns.
                self._start_checkpoint(idle=True)
                return
            self._quiet.set()


def _pages(rows: int, payload: int) -> int:
    """WAL pages a commit writes, roughly: the payload's 4 KiB pages, index entries packed
    several to a page, and the few interior/index pages every commit touches."""
    return payload // 4096 + rows // 8 + 3


def _fits_inline(rows: int, payload: int) -> bool:
    return rows <= INLINE_MAX_ROWS and payload <= INLINE_MAX_BYTES


def _size(batch: list[Op]) -> tuple[int, int]:
    """Rows and payload bytes (each row's last column, the JSON document) of a batch."""
    rows = payload = 0
    for op in batch:
        for _sql, stmt_rows in op.statements:
            rows += len(stmt_rows)
            for row in stmt_rows:
                last = row[-1] if row else None
                if isinstance(last, str | bytes):
                    payload += len(last)
                elif isinstance(last, Shared):
                    payload += last.size
    return rows, payload


def _apply(conn: sqlite3.Connection, batch: list[Op]) -> tuple[list[BaseException | None], int]:
    """``_commit`` charged to the index's batches or to ingest (``cpu``): a background op
    commits alone."""
    return charge("index" if batch[0].background else "ingest", _commit, conn, batch)


def _commit(conn: sqlite3.Connection, batch: list[Op]) -> tuple[list[BaseException | None], int]:
    """Commit ``batch`` in one transaction; if anything fails, roll back and commit each op
    alone, so that exactly the failing ops fail and nothing of theirs is stored.

    Any exception counts (an ``OverflowError`` binding a value, a bug), not only SQLite's:
    one left open would leave its statements in the transaction for the next commit to keep.
    Runs on whichever thread the writer chose; it touches nothing but ``conn`` and the ops.
    """
    try:
        if len(batch) == 1:
            batch[0].rowcounts = _run_op(conn, batch[0])
        else:
            _run_grouped(conn, batch)
        conn.commit()  # the transaction began implicitly at the first write
        return [None] * len(batch), 1
    except Exception:
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
        except Exception as exc:
            _rollback(conn)
            if not isinstance(exc, sqlite3.Error):
                log.error("write failed: %s", type(exc).__name__, exc_info=exc)
            outcomes.append(exc)
    return outcomes, commits


#: Not SQL: each row ``(part id, Shared)`` is written into its part's ``data``, a blob of its
#: size made by the statement before (``schema.large_part_statements``), through incremental
#: blob I/O: from the buffers it arrived in, a page at a time, with no copy of it made.
WRITE_PIECES = "-- sidecar: write pieces"
_ROWID_OF_PART = "SELECT rowid FROM parts WHERE id = ?"


def _execute(conn: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> int:
    if sql != WRITE_PIECES:
        return conn.executemany(*pack_rows(sql, rows)).rowcount
    for pid, pieces in rows:
        (rowid,) = conn.execute(_ROWID_OF_PART, (pid,)).fetchone()
        with conn.blobopen("parts", "data", rowid) as blob:
            for buffer in pieces.buffers:
                blob.write(buffer)
    return len(rows)


def _run_op(conn: sqlite3.Connection, op: Op) -> list[int]:
    return [_execute(conn, sql, rows) for sql, rows in op.statements]


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
        exact = _execute(conn, pending_sql, pending_rows) == len(pending_rows)
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


def resolve(op: Op, exc: BaseException | None = None) -> None:
    """Tell a queued op's caller how it went (unless it already gave up waiting).

    The op then lets go of its rows and its callback: a writer keeps its last batch until
    the next one comes (aiosqlite's thread holds its last call, ``PgCommit._run`` its last
    batch), and a 10 MB part would stay alive with them (its row, and through the callback
    its frame and decoded Struct) until the next write."""
    then, op.then, op.statements, op.on_integrity = op.then, None, [], None
    if then is not None:
        try:
            then(op.rowcounts, exc)
        except Exception:  # a caller's bug must not stop the others of the batch
            log.exception("commit callback failed")
        return
    fut = op.future
    if fut is None or fut.done():
        return
    if isinstance(exc, asyncio.CancelledError):
        fut.cancel()
    elif exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)
