"""Sessions made by the real OpenCode, imported: the daemon's ``session/context`` is what
OpenCode sent its model last, plus the reply it got (fixtures: tests/fixtures/README.md)."""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sidecar.cli import main
from tests.tools.conftest import FIXTURES, daemon

V1153 = FIXTURES / "opencode-1.1.53"
V1227 = FIXTURES / "opencode-1.2.27"
V11833 = FIXTURES / "opencode-1.18.33"


def _import(capsys: pytest.CaptureFixture[str], db: Path, *args: str) -> list[dict[str, Any]]:
    assert main(["import", *args, "--db", str(db), "--json"]) == 0
    out: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return out


def _expected(fixture: Path) -> list[dict[str, Any]]:
    """OpenCode's last request, then the answer it got: the window it would send next."""
    req = json.loads((fixture / "last-request.json").read_text())
    return [*req["messages"], {"role": "assistant", "content": req["answer"]}]


def _context(db: Path, home: Path, sid: str, fmt: str = "openai") -> Any:
    """``session/context`` from a real daemon on ``db``."""

    async def ask() -> Any:
        client = await daemon(db, home)
        try:
            return await client.context(sid, fmt)
        finally:
            await client.close()

    return asyncio.run(ask())


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        (V1153 / "export.json", "opencode-export"),
        (V1153 / "storage", "opencode-storage"),
    ],
)
def test_opencode_1153_context_equals_its_last_request(
    source: Path, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    [row] = _import(capsys, db, str(source))
    assert row == {"sessionID": "ses_df644fef5ffeZsiRcGW0Bq4QE6", "source": kind, "messages": 18}
    ctx = _context(db, tmp_path, row["sessionID"])
    assert msgspec.to_builtins(ctx.messages) == _expected(V1153)
    parts = _context(db, tmp_path, row["sessionID"], "parts")
    head = msgspec.to_builtins(parts.messages)[0]
    assert [p["type"] for p in head["parts"]] == ["compaction"], "the window starts at the marker"
    assert parts.boundary_message_id == head["info"]["id"]


@pytest.mark.parametrize("fixture", [V1227, V11833], ids=["1.2.27", "1.18.33"])
def test_opencode_sqlite_context_equals_its_last_request(
    fixture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    copy = tmp_path / "opencode.db"
    shutil.copy(fixture / "opencode.db", copy)
    [row] = _import(capsys, db, str(copy))
    assert row["source"] == "opencode-sqlite" and row["messages"] == 15
    ctx = _context(db, tmp_path, row["sessionID"])
    assert msgspec.to_builtins(ctx.messages) == _expected(fixture)


def test_export_keeps_every_stored_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ids, times, tool states, the marker and the summary are stored as OpenCode wrote them."""
    db = tmp_path / "s.db"
    _import(capsys, db, str(V1153 / "export.json"))
    export = json.loads((V1153 / "export.json").read_text())
    with sqlite3.connect(db) as conn:
        stored = {mid: json.loads(d) for mid, d in conn.execute("SELECT id, data FROM messages")}
        parts = {pid: json.loads(d) for pid, d in conn.execute("SELECT id, data FROM parts")}
    for m in export["messages"]:
        assert stored[m["info"]["id"]] == m["info"]
        for p in m["parts"]:
            assert parts[p["id"]] == p


def test_reimport_is_the_same_session(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.db"
    first = _import(capsys, db, str(V1153 / "export.json"))
    again = _import(capsys, db, str(V1153 / "storage"))
    assert first[0]["sessionID"] == again[0]["sessionID"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM messages").fetchone() == (18,)


def test_bad_export_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    export = json.loads((V1153 / "export.json").read_text())
    export["messages"][3]["parts"][0]["type"] = "bogus"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(export, indent=1))
    db = tmp_path / "s.db"
    assert main(["import", str(bad), "--db", str(db), "--format", "opencode"]) == 1
    err = capsys.readouterr().err
    assert f"{bad}: messages[3].parts[0]: part:" in err and "bogus" in err
    assert not db.exists(), "files are read and checked before the database is opened"


def test_malformed_export_names_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (V1153 / "export.json").read_text().splitlines()
    text[40] = text[40] + " ]]"
    bad = tmp_path / "bad.json"
    bad.write_text("\n".join(text))
    assert main(["import", str(bad), "--db", str(tmp_path / "s.db"), "--format", "opencode"]) == 1
    assert f"{bad}: line 41:" in capsys.readouterr().err


def test_an_export_with_one_long_string_imports_in_bounded_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 32 item 1: one 100 MB string (brackets in it) ended in a MemoryError, the depth
    scan holding ~120 bytes per byte. Now the scan holds nothing worth counting: the import
    holds a few copies of the string (file, document, the part's JSON), not a hundred."""
    import tracemalloc

    export = json.loads((V1153 / "export.json").read_text())
    long = "[" * 100 + "x" * (4 * 1024 * 1024)
    export["messages"][0]["parts"][0]["text"] = long
    big = tmp_path / "big.json"
    big.write_text(json.dumps(export))
    db = tmp_path / "s.db"
    tracemalloc.start()
    try:
        [imported] = _import(capsys, db, str(big))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 12 * len(long), f"the import held {peak} bytes for a {len(long)}-char string"
    with sqlite3.connect(db) as conn:
        [(data,)] = conn.execute(
            "SELECT data FROM parts WHERE id = ?", (export["messages"][0]["parts"][0]["id"],)
        ).fetchall()
    assert json.loads(data)["text"] == long and imported["sessionID"]
