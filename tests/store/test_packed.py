"""Large tool outputs are stored compressed and served byte for byte (issue 34, item 2).

On SQLite a tool part's JSON of ``packed.PACK_BYTES`` or more is stored deflated (``parts.z``)
beside a light JSON SQL reads in place; on PostgreSQL the server compresses such a value
itself (TOAST). Either way the bytes served are the bytes written, the index finds words of
the output, a prune's mark and unmark give what they give a plain row, and a rewrite that
is not compressed is stored plain again (a short one; a part of ``LARGE_BYTES`` or more,
written in place from the buffers it arrived in).
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path

import asyncpg
import msgspec
import pytest

from sidecar.model.parts import Part
from sidecar.model.tokens import estimate
from sidecar.store import LARGE_BYTES, PAGE, Store, packed

from .index_checks import index_agrees
from .test_large_parts import _found, _put, _served, _session, _tool

# A file read as a tool returns it: lines of code, non-ASCII, escapes; ~40 KB.
OUTPUT = "".join(
    f'{i:5d}\tdef handler_{i}(request):  # é ü "quoted" \\ back\n    return route({i})\n'
    for i in range(500)
)


async def _stored(db: str | Path, pid: str) -> tuple[int, int | None]:
    """``(bytes of data, bytes of z)`` on SQLite; on PostgreSQL ``(bytes of data as stored,
    None)``, the server's compression of the column telling it is compressed (else fails)."""
    if isinstance(db, Path):
        conn = sqlite3.connect(db)
        try:
            row = conn.execute(
                "SELECT length(CAST(data AS BLOB)), length(z) FROM parts WHERE id = ?", (pid,)
            ).fetchone()
        finally:
            conn.close()
        return int(row[0]), None if row[1] is None else int(row[1])
    pconn = await asyncpg.connect(db)
    try:
        method, size = await pconn.fetchrow(
            "SELECT pg_column_compression(data), pg_column_size(data) FROM parts WHERE id = $1",
            pid,
        )
    finally:
        await pconn.close()
    assert method is not None, "PostgreSQL compresses a large value itself (TOAST)"
    return int(size), None


def _z(db: str | Path, pid: str) -> bytes | None:
    """The compressed JSON SQLite stores for ``pid`` (None on PostgreSQL)."""
    if not isinstance(db, Path):
        return None
    conn = sqlite3.connect(db)
    try:
        z: bytes | None = conn.execute("SELECT z FROM parts WHERE id = ?", (pid,)).fetchone()[0]
    finally:
        conn.close()
    return z


async def test_a_large_output_is_stored_compressed_and_served_byte_for_byte(
    store: Store, db: str | Path
) -> None:
    await _session(store)
    raw = await _put(store, _tool("prt_out", OUTPUT))
    assert len(raw) > 8 * packed.PACK_BYTES
    assert await _served(store, "prt_out") == raw
    assert await _found(store, "handler_250") == ["prt_out"]
    stored, z = await _stored(db, "prt_out")
    if isinstance(db, Path):
        assert z is not None and z < len(raw) / 3, "deflated"
        assert stored < 300, "the row's data is the light JSON, not a second copy"
    else:
        assert stored < len(raw) / 3
    # What a prune decides on: the output's estimate, which SQLite stores beside the
    # compressed row so that a prune's walk inflates nothing.
    pages = [page async for page in store.light_newest_first("ses_l", None, PAGE)]
    [light] = [p for page in pages for m in page for p in m.parts if p.id == "prt_out"]
    assert light.tool == "bash" and not light.compacted
    if isinstance(db, Path):
        assert light.output is None and light.tokens == estimate(OUTPUT)
    else:
        assert light.output == OUTPUT and light.tokens is None
    index_agrees(db)


async def test_a_compressed_output_is_pruned_and_unpruned_as_a_plain_one(
    store: Store, db: str | Path
) -> None:
    await _session(store)
    raw = await _put(store, _tool("prt_out", OUTPUT))
    z_before = _z(db, "prt_out")
    marked = await store.mark_compacted(["prt_out"], 77)
    served = await _served(store, "prt_out")
    assert marked == [served.decode()], "the mark reads back what is served"
    expected = json.loads(raw)
    expected["state"]["time"]["compacted"] = 77
    assert json.loads(served) == expected
    if isinstance(db, Path):  # the very bytes SQLite's patch gives a plain row
        conn = sqlite3.connect(":memory:")
        plain = conn.execute(
            "SELECT json_set(?, '$.state.time.compacted', 77)", (raw.decode(),)
        ).fetchone()[0]
        conn.close()
        assert served == plain.encode()
        assert _z(db, "prt_out") == z_before, "the mark is kept beside it, not deflated in"
    pages = [page async for page in store.light_newest_first("ses_l", None, PAGE)]
    [light] = [p for page in pages for m in page for p in m.parts if p.id == "prt_out"]
    assert light.compacted and light.output is None and light.tokens is None
    assert len(await store.unmark_compacted(["prt_out"])) == 1
    assert json.loads(await _served(store, "prt_out")) == json.loads(raw)
    assert await _found(store, "handler_499") == ["prt_out"]
    index_agrees(db)


async def test_a_compressed_part_sent_with_its_own_mark_is_served_as_sent(
    store: Store, db: str | Path
) -> None:
    await _session(store)
    doc = _tool("prt_out", OUTPUT)
    doc["state"]["time"] = {"start": 1, "end": 2, "compacted": 5}  # type: ignore[index]
    raw = await _put(store, doc)
    assert await _served(store, "prt_out") == raw
    pages = [page async for page in store.light_newest_first("ses_l", None, PAGE)]
    [light] = [p for page in pages for m in page for p in m.parts if p.id == "prt_out"]
    assert light.compacted


async def test_a_rewrite_that_is_not_compressed_is_stored_plain(
    store: Store, db: str | Path
) -> None:
    await _session(store)
    await _put(store, _tool("prt_out", OUTPUT))
    assert await _found(store, "handler_7") == ["prt_out"]
    # Too short to compress; then a part of LARGE_BYTES or more, written in place.
    for output in ("short done", "largeopening " + "y" * LARGE_BYTES):
        raw = await _put(store, _tool("prt_out", output))
        assert await _served(store, "prt_out") == raw
        assert await _found(store, "handler_7") == []
        if isinstance(db, Path):
            assert (await _stored(db, "prt_out"))[1] is None
    assert await _found(store, "largeopening") == ["prt_out"]
    raw = await _put(store, _tool("prt_out", OUTPUT))  # compressed again, then removed
    assert await _served(store, "prt_out") == raw
    assert await store.remove_part("ses_l", "msg_l", "prt_out")
    assert await _found(store, "handler_7") == []
    index_agrees(db)


async def test_a_part_of_large_bytes_given_as_text_is_stored_plain(
    store: Store, db: str | Path
) -> None:
    """Only parts below ``LARGE_BYTES`` are compressed, however they arrive (an import gives
    its parts as text, not as a frame's buffers): what is inflated is bounded."""
    await _session(store)
    doc = _tool("prt_out", "z" * LARGE_BYTES)
    raw = json.dumps(doc, separators=(",", ":")).encode()
    await store.put_part(msgspec.json.decode(raw, type=Part), raw.decode())
    assert await _served(store, "prt_out") == raw
    assert _z(db, "prt_out") is None


def test_a_compressed_part_that_inflates_past_large_bytes_is_refused_not_inflated(
    tmp_path: Path,
) -> None:
    """A store file whose compressed part would inflate to more than any part the daemon
    compresses (a damaged or hostile file) fails that read; it never inflates it whole."""
    conn = sqlite3.connect(":memory:")
    packed.register(conn)
    bomb = zlib.compress(b"[" + b" " * (64 * LARGE_BYTES) + b"]", 9)
    assert len(bomb) < 100_000
    ok = zlib.compress(b'{"ok":1}')
    assert conn.execute("SELECT sidecar_inflate(?)", (ok,)).fetchone() == ('{"ok":1}',)
    with pytest.raises(sqlite3.OperationalError):
        conn.execute("SELECT sidecar_inflate(?)", (bomb,)).fetchone()
    conn.close()


async def test_a_compressed_part_is_standard_zlib_whichever_deflate_wrote_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``z`` is the zlib format, readable by the stdlib alone, whether ISA-L's deflate (the
    fast one ``packed`` uses where its wheel is installed) or the stdlib's wrote it; a store
    written by one is served byte for byte by the other."""
    assert packed.CODEC is not zlib, "ISA-L's deflate is the one in use where it is installed"
    db = tmp_path / "z.db"
    store = await Store.open(db)
    try:
        await _session(store)
        fast = await _put(store, _tool("prt_fast", OUTPUT))
        monkeypatch.setattr(packed, "CODEC", zlib)
        plain = await _put(store, _tool("prt_std", OUTPUT + "\n"))
        for pid, raw in (("prt_fast", fast), ("prt_std", plain)):
            z = _z(db, pid)
            assert z is not None and zlib.decompress(z) == raw
            assert await _served(store, pid) == raw
        monkeypatch.undo()  # inflated by ISA-L: the stdlib's row, and its own
        for pid, raw in (("prt_fast", fast), ("prt_std", plain)):
            store.cache.clear()
            assert await _served(store, pid) == raw
    finally:
        await store.close()
