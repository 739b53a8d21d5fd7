"""The history search index on a database made before it existed: upgraded and indexed at
first open (in chunks, with progress), searchable once done; on each backend."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import asyncpg

from sidecar.store import Store, history
from sidecar.store import pg_schema as pg
from sidecar.store import schema as lite
from sidecar.store.sqlite import _split

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
            for stmt in _split(script):
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
            "DROP TRIGGER parts_history ON parts; DROP TABLE history, history_backfill; "
            "DROP FUNCTION sidecar_history(); DROP FUNCTION sidecar_history_body(TEXT, TEXT); "
            f"UPDATE schema_version SET version = {BEFORE}"
        )
        assert pg.MIGRATIONS[BEFORE + 1 :] == ["SELECT 1"], "the downgrade undoes migration 4 only"
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
            hits = await store.search_history("ses_old", f"old_identifier_{i}", 5)
            assert [h[2] for h in hits] == [f"prt_{i:04d}"]
            hits = await store.search_history("ses_old", f"src/old/mod{i}.py", 5)
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
        assert len(await again.search_history("ses_old", "word5x", 5)) == 1
        assert heard == []
    finally:
        await again.close()


async def test_a_fresh_database_has_nothing_to_index(db: str | Path) -> None:
    store = await Store.open(db)
    heard: list[tuple[int, int]] = []
    store.on_backfill = lambda indexed, total: heard.append((indexed, total))
    try:
        assert await store.search_history(None, "anything", 5) == []
        assert heard == []
    finally:
        await store.close()
