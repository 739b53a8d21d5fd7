"""Checks the history index tests share."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import asyncpg

from sidecar.store import Store, packed


async def found(store: Store, session_id: str, word: str, limit: int = 100) -> list[str]:
    """The ids of the parts a search of ``word`` finds (the turn being answered included)."""
    hits = (await store.search_history(session_id, word, limit, include_recall=True)).hits
    return sorted(hit[2] for hit in hits)


def index_agrees(db: str | Path) -> None:
    """On SQLite, FTS5's own check that the external-content index matches the parts it is
    made of (a stale or missing entry fails it); PostgreSQL's index is a table of its own."""
    if isinstance(db, Path):
        conn = sqlite3.connect(db)
        packed.register(conn)  # the index reads a packed part's text inflated
        try:
            conn.execute(
                "INSERT INTO history_fts (history_fts, rank) VALUES ('integrity-check', 1)"
            )
        finally:
            conn.close()


async def index_state(db: str | Path, word: str) -> tuple[int, int]:
    """``(parts the index itself holds with word, parts left for the indexer)``, read from
    the database, not through the store (whose search would index first)."""
    if isinstance(db, Path):
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            held = conn.execute(
                "SELECT count(*) FROM history_fts WHERE history_fts MATCH ?", (word,)
            ).fetchone()[0]
            # noted, or above the mark (migration 10: a new part is the batch's unnoted)
            noted = conn.execute(
                "SELECT (SELECT count(*) FROM history_dirty) + (SELECT count(*) FROM parts "
                "WHERE rowid > (SELECT upto FROM history_mark) "
                "AND type IN ('text', 'reasoning', 'tool'))"
            ).fetchone()[0]
        finally:
            conn.close()
        return int(held), int(noted)
    pconn = await asyncpg.connect(db)
    try:
        held = await pconn.fetchval(
            "SELECT count(*) FROM history WHERE tsv @@ to_tsquery('simple', $1)", word
        )
        noted = await pconn.fetchval("SELECT count(*) FROM history_dirty")
    finally:
        await pconn.close()
    return int(held), int(noted)
