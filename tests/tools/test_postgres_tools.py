"""``import``, ``sessions`` and ``inspect`` on a PostgreSQL database, as on a SQLite file.

The compacted fixture session (made by the real daemon on SQLite) is copied row for row into a
fresh PostgreSQL database; the look-at commands must then say exactly what they say of the
SQLite file, through a read-only session.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import asyncpg
import msgspec
import pytest
from pgcluster import Cluster, new_pg_database, run_async

from sidecar.cli import main
from sidecar.model.inspect import Inspection, SessionSummary
from sidecar.store import packed
from sidecar.tools.readdb import DatabaseError, open_ro

FIXTURES = Path(__file__).parent.parent / "fixtures"


async def _copy(sqlite_db: Path, url: str) -> None:
    with sqlite3.connect(sqlite_db) as src:
        packed.register(src)  # parts are read as their JSON, compressed or not
        tables = {
            "sessions": "id, parent_id, created, updated, data",
            "messages": "id, session_id, created, role, parent_id, summary_ok, data",
            "parts": "id, message_id, session_id, type, data",
            "pins": "part_id, message_id, session_id, created",
            "compactions": "message_id, session_id, created, data",
        }
        rows = {
            t: src.execute(f"SELECT {cols} FROM {'part_json' if t == 'parts' else t}").fetchall()
            for t, cols in tables.items()
        }
    conn = await asyncpg.connect(url)
    try:
        for table, cols in tables.items():
            marks = ", ".join(f"${i + 1}" for i in range(len(cols.split(","))))
            await conn.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", rows[table])
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def pg_copy(pg_cluster: Cluster, compacted: tuple[Path, str]) -> str:
    url = run_async(new_pg_database(pg_cluster))
    run_async(_copy(compacted[0], url))
    return url


def _out(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def _summaries(capsys: pytest.CaptureFixture[str], db: str) -> list[SessionSummary]:
    out = _out(capsys, "sessions", "--json", "--db", db)
    return msgspec.json.decode(out, type=list[SessionSummary])


def test_sessions_and_inspect_say_the_same_on_both_backends(
    pg_copy: str, compacted: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db, sid = compacted
    for command in (
        ["sessions", "--json"],
        ["inspect", sid[:12], "--json", "--context", "4000"],
        ["inspect", "tools-fixture", "--context", "4000"],
    ):
        on_sqlite = _out(capsys, *command, "--db", str(db))
        on_pg = _out(capsys, *command, "--db", pg_copy)
        assert on_pg == on_sqlite, command
    rows = msgspec.json.decode(
        _out(capsys, "sessions", "--json", "--db", pg_copy), type=list[SessionSummary]
    )
    assert [r.id for r in rows] == [sid] and rows[0].compactions >= 1
    ins = msgspec.json.decode(
        _out(capsys, "inspect", sid, "--json", "--db", pg_copy), type=Inspection
    )
    assert ins.compactions and ins.prunes


def test_the_postgresql_session_is_read_only(pg_copy: str) -> None:
    conn = open_ro(pg_copy)
    try:
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
            conn.run(conn.store.backend.query("DELETE FROM sessions"))
    finally:
        conn.close()


def test_import_into_postgresql(pg_cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    url = run_async(new_pg_database(pg_cluster))
    out = _out(
        capsys, "import", str(FIXTURES / "claude-code" / "session.jsonl"), "--db", url, "--json"
    )
    imported = msgspec.json.decode(out)
    assert len(imported) == 1 and imported[0]["messages"] > 0
    rows = msgspec.json.decode(
        _out(capsys, "sessions", "--json", "--db", url), type=list[SessionSummary]
    )
    assert [(r.id, r.messages) for r in rows] == [
        (imported[0]["sessionID"], imported[0]["messages"])
    ]


def test_clear_errors_for_urls(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["sessions", "--db", "postgresql://nobody:pw@127.0.0.1:1/none"]) == 2
    err = capsys.readouterr().err
    assert "cannot connect" in err and "pw" not in err
    assert main(["sessions", "--db", "mysql://u@h/db"]) == 2
    assert "unsupported database 'mysql'" in capsys.readouterr().err
    with pytest.raises(DatabaseError, match="no such database"):
        open_ro(str(tmp_path / "missing.db"))
