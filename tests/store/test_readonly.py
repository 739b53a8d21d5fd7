"""``Store.open(db, readonly=True)``: what the look-at commands read through, on both backends.

Looking must never change a database, even one a daemon is writing: no migration, no writer,
no checkpoint; a SQLite file opened ``mode=ro``, a PostgreSQL session whose transactions are
read-only. A database this version cannot read as it is (no schema, an older or newer one)
is refused with a message that says so, rather than migrated or misread.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import asyncpg
import msgspec
import pytest
from pgcluster import execute, is_pg

from sidecar.model.messages import MessageTime, UserMessage
from sidecar.model.session import Session, SessionTime
from sidecar.store import SCHEMA_VERSION, CannotOpen, ReadOnlyStore, Store

enc = msgspec.json.encode


async def _filled(db: str | Path) -> Session:
    store = await Store.open(db)
    try:
        s = Session(id="ses_1", title="t", time=SessionTime(created=1, updated=1))
        await store.put_session(s)
        m = UserMessage(id="msg_1", session_id="ses_1", time=MessageTime(created=2))
        await store.put_message(m, enc(m))
    finally:
        await store.close()
    return s


def _digest(db: str | Path) -> str:
    return hashlib.sha256(Path(db).read_bytes()).hexdigest()


async def test_reads_like_the_store(db: str | Path) -> None:
    await _filled(db)
    ro = await Store.open(db, readonly=True)
    try:
        session = await ro.require_session("ses_1")
        assert session.title == "t"
        assert [m.info.id for m in await ro.window("ses_1")] == ["msg_1"]
    finally:
        await ro.close()


async def test_refuses_every_write(db: str | Path) -> None:
    s = await _filled(db)
    ro = await Store.open(db, readonly=True)
    try:
        with pytest.raises(ReadOnlyStore):
            await ro.put_session(s)
        with pytest.raises(ReadOnlyStore):
            await ro.delete_session("ses_1")
        assert await ro.count_messages("ses_1") == 1
    finally:
        await ro.close()


async def test_the_connection_itself_is_read_only(db: str | Path) -> None:
    """Not only the store's write methods: SQL that writes fails in the database itself."""
    await _filled(db)
    ro = await Store.open(db, readonly=True)
    try:
        raised = asyncpg.ReadOnlySQLTransactionError if is_pg(db) else sqlite3.OperationalError
        with pytest.raises(raised, match=r"read-only|readonly"):
            await ro.backend.query("DELETE FROM sessions")
    finally:
        await ro.close()
    assert await execute(db, "DELETE FROM messages WHERE id = ?", ["nothing"]) == 0


async def test_sqlite_file_is_not_changed(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    await _filled(db)
    before = _digest(db)
    ro = await Store.open(db, readonly=True)
    try:
        await ro.window("ses_1")
    finally:
        await ro.close()
    assert _digest(db) == before


@pytest.mark.parametrize(("version", "says"), [(1, "older"), (SCHEMA_VERSION + 1, "newer")])
async def test_another_schema_version_is_refused_not_migrated(
    db: str | Path, version: int, says: str
) -> None:
    await _filled(db)
    await execute(db, "UPDATE schema_version SET version = ?", [version])
    with pytest.raises(CannotOpen, match=f"schema v{version} is {says} than this"):
        await Store.open(db, readonly=True)
    # nothing was migrated: the version is still the one set above
    assert await execute(db, "UPDATE schema_version SET version = ?", [version]) == 1
    if not is_pg(db):
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT version FROM schema_version").fetchone() == (version,)


async def test_no_schema_version_is_refused(db: str | Path) -> None:
    await _filled(db)
    await execute(db, "DELETE FROM schema_version", [])
    with pytest.raises(CannotOpen, match="not a compaction-sidecar database"):
        await Store.open(db, readonly=True)


async def test_sqlite_not_ours_missing_or_a_directory(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(CannotOpen, match=r"other.db: not a compaction-sidecar database"):
        await Store.open(other, readonly=True)
    with pytest.raises(CannotOpen, match=r"nope.db: no such database"):
        await Store.open(tmp_path / "nope.db", readonly=True)
    assert not (tmp_path / "nope.db").exists(), "a read-only open never creates the file"
    with pytest.raises(CannotOpen, match="not a database file"):
        await Store.open(tmp_path, readonly=True)
