"""Every SQLite connection of the daemon keeps temporary storage in memory (a sort spilled to a
temp file is written and read back on every read that sorts), and the writer bounds the WAL
file it leaves after a restart."""

from __future__ import annotations

from pathlib import Path

from sidecar.store import Store
from sidecar.store.commit import WAL_SIZE_LIMIT
from sidecar.store.sqlite import SqliteBackend

MEMORY = 2  # PRAGMA temp_store: 0 default, 1 file, 2 memory


async def test_every_connection_keeps_temp_storage_in_memory(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "s.db")
    try:
        backend = store.backend
        assert isinstance(backend, SqliteBackend)
        for conn in (backend._reader, backend._writer_db, backend._checkpoint_db):
            assert conn is not None
            rows = list(await conn.execute_fetchall("PRAGMA temp_store"))
            assert rows[0][0] == MEMORY
        assert backend._inline is not None
        assert backend._inline.execute("PRAGMA temp_store").fetchone()[0] == MEMORY
        rows = list(await backend._writer_db.execute_fetchall("PRAGMA journal_size_limit"))
        assert rows[0][0] == WAL_SIZE_LIMIT
    finally:
        await store.close()
