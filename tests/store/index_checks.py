"""Checks the history index tests share."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sidecar.store import Store


async def found(store: Store, session_id: str, word: str, limit: int = 100) -> list[str]:
    """The ids of the parts a search of ``word`` finds (the turn being answered included)."""
    hits = (await store.search_history(session_id, word, limit, include_recall=True)).hits
    return sorted(hit[2] for hit in hits)


def index_agrees(db: str | Path) -> None:
    """On SQLite, FTS5's own check that the external-content index matches the parts it is
    made of (a stale or missing entry fails it); PostgreSQL's index is a table of its own."""
    if isinstance(db, Path):
        conn = sqlite3.connect(db)
        try:
            conn.execute(
                "INSERT INTO history_fts (history_fts, rank) VALUES ('integrity-check', 1)"
            )
        finally:
            conn.close()
