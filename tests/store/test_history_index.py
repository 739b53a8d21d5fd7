"""The history search index on a database made before it existed: upgraded and indexed at
first open (in chunks, with progress), searchable once done; on each backend."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import asyncpg
import msgspec

from sidecar.model.messages import MessageTime, UserMessage
from sidecar.model.parts import ToolPart
from sidecar.model.session import Session, SessionTime
from sidecar.store import Store, history
from sidecar.store import pg_schema as pg
from sidecar.store import schema as lite
from sidecar.store.sqlite import split_script

PARTS = 2 * history.CHUNK_PARTS + 7  # three chunks
#: The schema version before the index's migration.
BEFORE = lite.MIGRATIONS.index(lite._HISTORY_INDEX_4)


def _rows() -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    messages = [(f"msg_{i:04d}", "ses_old", i, "user", None, 0, "{}") for i in range(PARTS)]
    parts = []
    for i in range(PARTS):
        data = {"type": "text", "text": f"word{i}x old_identifier_{i} in src/old/mod{i}.py"}
        parts.append((f"prt_{i:04d}", f"msg_{i:04d}", "ses_old", "text", json.dumps(data)))
    # A kind the index skips.
    parts.append(("prt_step", "msg_0000", "ses_old", "step-start", '{"type": "step-start"}'))
    return messages, parts


async def _old_database(db: str | Path) -> None:
    """A database as the version before the index left it, with stored parts."""
    messages, parts = _rows()
    session = ("ses_old", None, 1, 1, '{"id": "ses_old", "title": "", "time": {}}')
    if isinstance(db, Path):
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (?)", (BEFORE,))
        for script in lite.MIGRATIONS[:BEFORE]:
            for stmt in split_script(script):
                conn.execute(stmt)
        conn.execute("INSERT INTO sessions VALUES (?, ?, ?, ?, ?)", session)
        conn.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?)", messages)
        conn.executemany("INSERT INTO parts VALUES (?, ?, ?, ?, ?)", parts)
        conn.commit()
        conn.close()
        return
    # The test databases are copies of a migrated template: take it back to v2.
    pconn = await asyncpg.connect(db)
    try:
        await pconn.execute(
            "DROP TRIGGER parts_history ON parts; "
            "DROP TABLE history, history_backfill, history_dirty; "
            "DROP FUNCTION sidecar_history(); DROP FUNCTION sidecar_history_body(TEXT, TEXT); "
            f"DROP VIEW part_json; UPDATE schema_version SET version = {BEFORE}"
        )
        assert BEFORE == len(pg.MIGRATIONS) - 7, (
            "the downgrade undoes 4 to 10 (5, 6 and 7 replace its function; 7 adds "
            "history_dirty; 8 adds part_json; 9 and 10 change nothing on PostgreSQL)"
        )
        await pconn.execute("INSERT INTO sessions VALUES ($1, $2, $3, $4, $5)", *session)
        await pconn.executemany(
            "INSERT INTO messages VALUES ($1, $2, $3, $4, $5, $6, $7)", messages
        )
        await pconn.executemany("INSERT INTO parts VALUES ($1, $2, $3, $4, $5)", parts)
    finally:
        await pconn.close()


async def test_an_old_database_is_indexed_at_first_open(db: str | Path) -> None:
    await _old_database(db)
    store = await Store.open(db)
    reports: list[tuple[int, int]] = []
    store.on_backfill = lambda indexed, total: reports.append((indexed, total))
    try:
        # A search waits for the indexing, so it never sees half an index.
        for i in (0, history.CHUNK_PARTS, PARTS - 1):
            hits = (
                await store.search_history("ses_old", f"old_identifier_{i}", 5, include_recall=True)
            ).hits
            assert [h[2] for h in hits] == [f"prt_{i:04d}"]
            hits = (
                await store.search_history("ses_old", f"src/old/mod{i}.py", 5, include_recall=True)
            ).hits
            assert [h[2] for h in hits] == [f"prt_{i:04d}"]
        total = PARTS + 1
        assert reports[0] == (0, total) and reports[-1] == (total, total)
        assert len(reports) == 4  # begin, then one per chunk
        assert [r[0] for r in reports] == sorted(r[0] for r in reports)
        left = await store.backend.query("SELECT count(*) FROM history_backfill")
        assert [tuple(r) for r in left] == [(0,)]
    finally:
        await store.close()
    # Done once: the next open has nothing to index.
    again = await Store.open(db)
    heard: list[tuple[int, int]] = []
    again.on_backfill = lambda indexed, total: heard.append((indexed, total))
    try:
        assert (
            len((await again.search_history("ses_old", "word5x", 5, include_recall=True)).hits) == 1
        )
        assert heard == []
    finally:
        await again.close()


async def test_a_fresh_database_has_nothing_to_index(db: str | Path) -> None:
    store = await Store.open(db)
    heard: list[tuple[int, int]] = []
    store.on_backfill = lambda indexed, total: heard.append((indexed, total))
    try:
        assert (await store.search_history(None, "anything", 5, include_recall=True)).hits == []
        assert heard == []
    finally:
        await store.close()


async def _index_state(db: str | Path) -> object:
    """What the index holds, as stored: SQLite's FTS5 pages, PostgreSQL's row versions."""
    if isinstance(db, Path):
        conn = sqlite3.connect(db)
        try:
            return conn.execute("SELECT id, block FROM history_fts_data ORDER BY id").fetchall()
        finally:
            conn.close()
    pconn = await asyncpg.connect(db)
    try:
        return [tuple(r) for r in await pconn.fetch("SELECT part_id, xmin::text FROM history")]
    finally:
        await pconn.close()


async def test_a_prune_does_not_rewrite_the_index(db: str | Path) -> None:
    """A prune's mark leaves the indexed text as it was: the index is not written at all (on
    SQLite not even the two versions of the row compared), and the output is still found."""
    store = await Store.open(db)
    try:
        await store.put_session(
            Session(id="ses_p", title="t", time=SessionTime(created=1, updated=1))
        )
        user = UserMessage(id="msg_p", session_id="ses_p", time=MessageTime(created=1))
        await store.put_message(user, msgspec.json.encode(user))
        raw = json.dumps(
            {
                "id": "prt_out",
                "sessionID": "ses_p",
                "messageID": "msg_p",
                "type": "tool",
                "callID": "c",
                "tool": "bash",
                "state": {
                    "status": "completed",
                    "input": {"command": "pytest"},
                    "output": "FAILED tests/test_parse.py::test_parse_header " * 200,
                    "time": {"start": 1, "end": 2},
                },
            }
        ).encode()
        await store.put_part(msgspec.json.decode(raw, type=ToolPart), raw)
        assert store.indexer is not None
        await store.indexer.catch_up()
        before = await _index_state(db)
        assert before
        assert len(await store.mark_compacted(["prt_out"], 99)) == 1
        await store.indexer.catch_up()
        assert await _index_state(db) == before
        hits = (
            await store.search_history("ses_p", "test_parse_header", 5, include_recall=True)
        ).hits
        assert [h[2] for h in hits] == ["prt_out"]
    finally:
        await store.close()
