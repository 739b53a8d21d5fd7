"""Where the writer commits: inline, at once in the caller's step, or on aiosqlite's thread.

Each path is checked for what it promises (durable before the caller resumes, errors mapped the
same, checkpoints off the writer connection's auto-checkpoint), against a real SQLite file.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sidecar.errors import UnknownMessage
from sidecar.model.messages import MessageTime, UserMessage
from sidecar.model.parts import TextPart
from sidecar.model.session import Session, SessionTime
from sidecar.store import Store
from sidecar.store import commit as commit_mod

enc = msgspec.json.encode


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """A store on ``s.db`` in the test's folder (the tests count its parts from outside)."""
    store = await Store.open(tmp_path / "s.db")
    try:
        yield store
    finally:
        await store.close()


async def _seed(store: Store) -> None:
    await store.put_session(Session(id="ses_1", title="t", time=SessionTime(created=1, updated=1)))
    m = UserMessage(id="msg_1", session_id="ses_1", time=MessageTime(created=1))
    await store.put_message(m, enc(m))


async def _text(store: Store, pid: str, text: str = "x", mid: str = "msg_1") -> None:
    p = TextPart(id=pid, session_id="ses_1", message_id=mid, text=text)
    await store.put_part(p, enc(p))


def _count_parts(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM parts").fetchone()[0])


async def test_a_write_nothing_could_join_commits_before_the_caller_yields(
    tmp_path: Path, store: Store
) -> None:
    await _seed(store)
    store.set_may_join(lambda: False)
    w = store.backend._commit
    solo = w.solo_commits
    ran: list[int] = []
    asyncio.get_running_loop().call_soon(ran.append, 1)
    await _text(store, "prt_1")
    assert ran == []  # the write never gave the loop a turn
    assert w.solo_commits == solo + 1
    assert _count_parts(tmp_path / "s.db") == 1  # committed: another connection sees it


async def test_a_solo_write_fails_like_a_queued_one_and_the_writer_goes_on(
    tmp_path: Path, store: Store
) -> None:
    await _seed(store)
    store.set_may_join(lambda: False)
    try:
        await _text(store, "prt_bad", mid="msg_missing")
    except UnknownMessage as exc:
        assert "msg_missing" in str(exc)
    else:  # pragma: no cover - the assertion below reports it
        raise AssertionError("a part of an unknown message was stored")
    await _text(store, "prt_ok")
    assert _count_parts(tmp_path / "s.db") == 1


async def test_while_others_may_join_writes_queue_and_group(store: Store) -> None:
    await _seed(store)
    w = store.backend._commit
    store.set_may_join(lambda: True)
    solo, commits = w.solo_commits, w.commits
    await asyncio.gather(*[_text(store, f"prt_{i:03}") for i in range(50)])
    assert w.solo_commits == solo
    assert w.commits - commits == 1  # all fifty in one inline group commit


async def test_large_batches_commit_on_aiosqlites_thread(tmp_path: Path, store: Store) -> None:
    await _seed(store)
    w = store.backend._commit
    commits, inline = w.commits, w.inline_commits
    n = commit_mod.INLINE_MAX_ROWS + 50
    await asyncio.gather(*[_text(store, f"prt_{i:04}") for i in range(n)])
    assert w.commits - commits == 1 and w.inline_commits == inline
    assert _count_parts(tmp_path / "s.db") == n
    # A large payload alone also goes off the loop.
    await _text(store, "prt_big", "y" * (commit_mod.INLINE_MAX_BYTES + 1))
    assert w.commits - commits == 2 and w.inline_commits == inline


async def test_full_durability_never_commits_on_the_loop(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "s.db", synchronous="FULL")
    try:
        await _seed(store)
        store.set_may_join(lambda: False)
        await asyncio.gather(*[_text(store, f"prt_{i}") for i in range(5)])
        await _text(store, "prt_last")
        w = store.backend._commit
        assert w.inline_commits == 0 and w.solo_commits == 0 and w.commits >= 3
    finally:
        await store.close()


async def test_checkpoints_run_from_the_writer_not_sqlite_auto_checkpoint(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    store = await Store.open(path)
    try:
        assert store.backend._writer_db is not None
        rows = await store.backend._writer_db.execute_fetchall("PRAGMA wal_autocheckpoint")
        assert list(rows) == [(0,)]
        await _seed(store)
        w = store.backend._commit
        assert w.checkpoints == 0
        # 13 batches of 100 parts of 3 KB: about 90 estimated pages each.
        text = "z" * 3000
        for start in range(0, 1300, 100):
            batch = range(start, start + 100)
            await asyncio.gather(*[_text(store, f"prt_{i:05}", text) for i in batch])
        await w.settle()
        assert w.checkpoints >= 1
        # A checkpoint copied WAL pages into the main file: a reader that ignores the WAL
        # (immutable) already sees the parts of the first batches.
        uri = f"file:{path}?immutable=1"
        with sqlite3.connect(uri, uri=True) as db:
            assert db.execute("SELECT count(*) FROM parts").fetchone()[0] >= 500
    finally:
        await store.close()
    assert _count_parts(path) == 1300


async def test_writes_do_not_wait_for_a_running_checkpoint(store: Store) -> None:
    await _seed(store)
    store.set_may_join(lambda: False)
    w = store.backend._commit
    w._start_checkpoint()
    await _text(store, "prt_1")
    assert w._checkpointing is not None  # still running: the write did not wait for it
    await w.settle()
    assert w._checkpointing is None and w.checkpoints == 1


def _wal_salt(folder: Path) -> bytes:
    """The WAL header's salts (``s.db-wal``): SQLite changes them each time it starts the WAL
    over from its first frame."""
    with (folder / "s.db-wal").open("rb") as wal:
        return wal.read(24)[16:24]


async def test_writes_wait_behind_an_idle_checkpoint_and_the_writer_stays_readable(
    tmp_path: Path, store: Store
) -> None:
    """A checkpoint the writer starts because it went idle, with the WAL long enough to
    restart, holds the writes that come meanwhile, so that the write after it starts the WAL
    over (one that landed behind the checkpoint would have appended to it); it holds the
    writes, not the writer's connection: reads go on, and the window cache is kept."""
    await _seed(store)
    w = store.backend._commit
    assert w._checkpointer is not None
    gate = asyncio.Event()
    real = w._checkpointer.execute_fetchall

    async def gated(sql: str, *args: Any) -> Any:
        rows = await real(sql, *args)  # every frame copied...
        await gate.wait()  # ...and the writer not told yet
        return rows

    w._checkpointer.execute_fetchall = gated  # type: ignore[method-assign]
    try:
        w.wal_frames = commit_mod.IDLE_HOLD_FRAMES  # the WAL is long enough to restart
        w._wal_pages = commit_mod.IDLE_CHECKPOINT_PAGES - 1
        await _text(store, "prt_0")  # the writer goes idle past the interval: it checkpoints
        assert w._checkpointing is not None
        write = asyncio.ensure_future(_text(store, "prt_1"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not write.done(), "held behind the checkpoint"
        assert not w.busy, "the writer's connection is not in use: reads may use it"
        clears = store.cache.version("ses_1")[0]
        assert [p.id for p in (await store.window("ses_1"))[0].parts] == ["prt_0"]
        assert store.cache.version("ses_1")[0] == clears, "the window cache was kept"
        salt = _wal_salt(tmp_path)
        gate.set()
        await write
        assert w.checkpoints == 1
        assert _wal_salt(tmp_path) != salt, "the write after it started the WAL over"
    finally:
        gate.set()
        w._checkpointer.execute_fetchall = real  # type: ignore[method-assign]
    assert [p.id for p in (await store.window("ses_1"))[0].parts] == ["prt_0", "prt_1"]


async def test_every_idle_checkpoint_holds_the_writes_so_the_wal_restarts(
    tmp_path: Path, store: Store
) -> None:
    """The writer checkpoints when it goes idle only once ``IDLE_CHECKPOINT_PAGES`` were
    written (a checkpoint's fsyncs cost the same whatever it copies), and such a checkpoint
    holds the writes that come meanwhile even on a WAL it restarted last time: the write after
    it starts the WAL over, so each commit goes on writing into a short WAL."""
    await _seed(store)
    w = store.backend._commit
    w._wal_pages = commit_mod.IDLE_CHECKPOINT_PAGES - 8  # (a small write adds a few)
    await _text(store, "prt_0")
    assert w._checkpointing is None, "idle, but not enough written yet"
    gate = asyncio.Event()
    real = w._checkpointer.execute_fetchall  # type: ignore[union-attr]

    async def gated(sql: str, *args: Any) -> Any:
        rows = await real(sql, *args)
        await gate.wait()
        return rows

    w._checkpointer.execute_fetchall = gated  # type: ignore[union-attr, method-assign]
    try:
        w.wal_frames = 0  # the last checkpoint restarted the WAL
        w._wal_pages = commit_mod.IDLE_CHECKPOINT_PAGES - 1
        await _text(store, "prt_1")  # idle past the interval: it checkpoints
        assert w._checkpointing is not None
        write = asyncio.ensure_future(_text(store, "prt_2"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not write.done(), "held behind the idle checkpoint"
        salt = _wal_salt(tmp_path)
        gate.set()
        await write
        assert _wal_salt(tmp_path) != salt, "the write after it started the WAL over"
    finally:
        gate.set()
        w._checkpointer.execute_fetchall = real  # type: ignore[union-attr, method-assign]


async def test_close_waits_for_queued_writes(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "s.db")
    await _seed(store)
    n = commit_mod.INLINE_MAX_ROWS * 2  # one batch off the loop, queued ops behind it
    tasks = [asyncio.ensure_future(_text(store, f"prt_{i:04}")) for i in range(n)]
    await asyncio.sleep(0)  # every task has queued its op
    await store.close()
    assert all(t.done() and t.exception() is None for t in tasks)
    assert _count_parts(tmp_path / "s.db") == n


async def test_a_cancelled_caller_still_gets_its_write_committed(
    tmp_path: Path, store: Store
) -> None:
    await _seed(store)
    store.set_may_join(lambda: True)
    task = asyncio.ensure_future(_text(store, "prt_1"))
    await asyncio.sleep(0)  # queued
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await _text(store, "prt_2")  # behind it in the queue: once it is done, so is prt_1
    assert _count_parts(tmp_path / "s.db") == 2


async def test_put_part_then_calls_back_after_the_commit(tmp_path: Path, store: Store) -> None:
    await _seed(store)
    seen: list[tuple[int, BaseException | None]] = []

    def then(_: None, exc: BaseException | None) -> None:
        seen.append((_count_parts(tmp_path / "s.db"), exc))

    for i in range(3):
        p = TextPart(id=f"prt_{i}", session_id="ses_1", message_id="msg_1", text="x")
        store.put_part_then(p, enc(p), then)
    bad = TextPart(id="prt_bad", session_id="ses_1", message_id="msg_nope", text="x")
    store.put_part_then(bad, enc(bad), then)
    assert seen == []  # queued, not yet committed
    commits = store.commits
    store.commit_queued()  # what the end of a read does: commit them now
    assert store.commits > commits
    # Each callback ran after its part was visible to another connection.
    assert [n for n, _ in seen[:3]] == [3, 3, 3] and all(e is None for _, e in seen[:3])
    assert isinstance(seen[3][1], UnknownMessage) and "msg_nope" in str(seen[3][1])
    # The window cache saw the writes.
    assert [p.id for p in (await store.window("ses_1"))[0].parts] == ["prt_0", "prt_1", "prt_2"]


async def test_the_wal_stays_bounded_under_a_steady_stream_of_writes(
    tmp_path: Path, store: Store
) -> None:
    """Checkpoints run beside the writes; every few, one holds them so the WAL can restart."""
    await _seed(store)
    w = store.backend._commit
    seen: list[int] = []
    i = 0
    while w.checkpoints < 8:
        batch = range(i, i + 64)
        i += 64
        await asyncio.gather(*[_text(store, f"prt_{n:07}", "x" * 200) for n in batch])
        if not seen or seen[-1] != w.wal_frames:
            seen.append(w.wal_frames)
    await w.settle()
    limit = commit_mod.WAL_RESTART_FRAMES + 2 * commit_mod.CHECKPOINT_PAGES
    assert max(seen) < limit, seen
    assert _count_parts(tmp_path / "s.db") == i


async def test_the_wal_file_is_cut_back_while_the_daemon_runs(tmp_path: Path, store: Store) -> None:
    """Large writes (a turn's tool outputs) grow the WAL file; once the writer has been idle
    (it checkpoints then) the next write restarts the WAL and ``journal_size_limit`` cuts the
    file back, instead of it keeping its largest size until shutdown."""
    wal = tmp_path / "s.db-wal"
    await _seed(store)
    w = store.backend._commit
    big = "y" * 60_000
    for n in range(100):  # ~6 MB, as 100 turns of 60 KB outputs
        await asyncio.gather(*[_text(store, f"prt_{n:04}_{k}", big) for k in range(2)])
    await w.settle()  # idle: the last writes are checkpointed
    assert w.checkpoints > 0
    await _text(store, "prt_last", "small")
    assert wal.stat().st_size <= commit_mod.WAL_SIZE_LIMIT
    assert _count_parts(tmp_path / "s.db") == 201


async def test_a_long_lived_reader_delays_the_wal_truncation_but_no_write(
    tmp_path: Path, store: Store
) -> None:
    """Another process holding a read snapshot keeps checkpoints from copying past it: writes
    go on (a refused truncation is retried a checkpoint interval later, not before every
    write), and once the reader is gone the WAL file is cut back as usual."""
    wal = tmp_path / "s.db-wal"
    big = "y" * 60_000
    await _seed(store)
    w = store.backend._commit
    reader = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM parts").fetchone()  # holds its snapshot
    for n in range(60):  # ~3.6 MB behind the reader's snapshot
        await _text(store, f"prt_a{n:03}", big)
    assert wal.stat().st_size > commit_mod.WAL_RESTART_BYTES
    reader.execute("COMMIT")
    reader.close()
    for n in range(4):
        await _text(store, f"prt_b{n:03}", big)
    await w.settle()
    await _text(store, "prt_last", "small")
    await w.settle()
    await _text(store, "prt_last2", "small")
    assert wal.stat().st_size <= commit_mod.WAL_SIZE_LIMIT
    assert _count_parts(tmp_path / "s.db") == 66


async def test_stress_the_writer_connection_is_never_used_by_two_threads_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off-loop batches, inline batches and holding checkpoints, all at once, many times."""
    in_use = threading.Lock()
    overlaps: list[str] = []
    real_apply = commit_mod._apply

    def guarded(conn: sqlite3.Connection, batch: list[commit_mod.Op], *rest: Any) -> Any:
        if not in_use.acquire(blocking=False):
            overlaps.append(threading.current_thread().name)
            return real_apply(conn, batch, *rest)
        try:
            return real_apply(conn, batch, *rest)
        finally:
            in_use.release()

    monkeypatch.setattr(commit_mod, "_apply", guarded)
    monkeypatch.setattr(commit_mod, "CHECKPOINT_PAGES", 20)
    monkeypatch.setattr(commit_mod, "WAL_RESTART_FRAMES", 40)
    store = await Store.open(tmp_path / "s.db")
    try:
        await _seed(store)
        w = store.backend._commit
        n = 0
        for _ in range(40):
            big = [_text(store, f"prt_{n + k:07}") for k in range(commit_mod.INLINE_MAX_ROWS + 1)]
            n += len(big)
            running = asyncio.ensure_future(asyncio.gather(*big))
            while not running.done():  # small writes while the big batch is on the thread
                await _text(store, f"prt_{n:07}")
                n += 1
            await running
        await w.settle()
        assert overlaps == []
        assert w.checkpoints > 5
        assert _count_parts(tmp_path / "s.db") == n
    finally:
        await store.close()


async def test_a_checkpoint_never_clears_the_flag_of_a_batch_on_the_thread(store: Store) -> None:
    w = store.backend._commit
    w._busy = True  # as while a batch is being committed on aiosqlite's thread
    w.wal_frames = commit_mod.WAL_RESTART_FRAMES  # a checkpoint would like to hold writes
    w._wal_pages = commit_mod.CHECKPOINT_PAGES
    w._after()
    running = w._checkpointing
    assert running is not None
    await running
    assert w._busy  # still the batch's: inline commits must keep waiting for it
    w._busy = False
    w._after()
    await w.settle()
