"""Parts of ``store.LARGE_BYTES`` or more, given as the buffers they arrived in
(``store.Shared``): on SQLite written in place through incremental blob I/O (no copy bound),
on PostgreSQL bound as one value. Either way they are served byte for byte, found by their
first words, rewritten, pinned and pruned like any other part."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import msgspec

from sidecar.model.buffers import Shared
from sidecar.model.messages import MessageTime, UserMessage
from sidecar.model.parts import Part
from sidecar.model.session import Session, SessionTime
from sidecar.store import LARGE_BYTES, Store, part_key

from .index_checks import found, index_agrees

SIZE = LARGE_BYTES + 12_345


async def _session(store: Store) -> None:
    await store.put_session(Session(id="ses_l", title="t", time=SessionTime(created=1, updated=1)))
    user = UserMessage(id="msg_l", session_id="ses_l", time=MessageTime(created=1))
    await store.put_message(user, msgspec.json.encode(user))


def _pieces(doc: dict[str, object]) -> tuple[Part, Shared, bytes]:
    """The part, its JSON as two buffers (as the daemon splices an id in front), the JSON."""
    raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    cut = raw.index(b",") + 1
    return msgspec.json.decode(raw, type=Part), Shared(raw[:cut], memoryview(raw)[cut:]), raw


async def _put(store: Store, doc: dict[str, object]) -> bytes:
    part, pieces, raw = _pieces(doc)
    done: list[BaseException | None] = []
    store.put_part_then(part_key(part), pieces, lambda _, exc: done.append(exc))
    await store.barrier()
    assert done == [None]
    return raw


def _text(pid: str, text: str) -> dict[str, object]:
    return {"id": pid, "sessionID": "ses_l", "messageID": "msg_l", "type": "text", "text": text}


def _tool(pid: str, output: str) -> dict[str, object]:
    return {
        "id": pid, "sessionID": "ses_l", "messageID": "msg_l", "type": "tool", "callID": "c",
        "tool": "bash",
        "state": {"status": "completed", "input": {"command": "cat big"}, "output": output,
                  "title": "cat", "metadata": {}, "time": {"start": 1, "end": 2}},
    }  # fmt: skip


async def _served(store: Store, pid: str) -> bytes:
    raws: dict[str, str] = {}
    await store.window("ses_l", raws=raws)
    got = await store.get_part(pid)
    assert got is not None
    rows = dict(await store.part_rows("msg_l"))
    served = {bytes(msgspec.Raw(v)) for v in (raws[pid], got[1], rows[pid])}
    assert len(served) == 1, "the window, get_part and part_rows serve one JSON"
    return served.pop()


async def _found(store: Store, word: str) -> list[str]:
    return await found(store, "ses_l", word, 10)


async def test_a_large_part_is_served_byte_for_byte_and_found(store: Store, db: str | Path) -> None:
    await _session(store)
    # Non-ASCII text and escapes: the bytes, not a re-encoding, are what is served.
    raw = await _put(store, _text("prt_big", "bigopening é \\n\t" + "y" * SIZE))
    assert len(raw) > LARGE_BYTES
    assert await _served(store, "prt_big") == raw
    assert await _found(store, "bigopening") == ["prt_big"]
    if isinstance(db, Path):  # stored in place, as the blob it was written into
        conn = sqlite3.connect(db)
        kind = conn.execute("SELECT typeof(data) FROM parts WHERE id = 'prt_big'").fetchone()
        conn.close()
        assert kind == ("blob",)


async def test_a_large_part_rewritten_keeps_its_pin_and_leaves_no_stale_entry(
    store: Store, db: str | Path
) -> None:
    await _session(store)
    await _put(store, _text("prt_big", "firstopening " + "y" * SIZE))
    assert await _found(store, "firstopening") == ["prt_big"]  # indexed
    await store.set_pin("ses_l", "msg_l", "prt_big", True)
    raw = await _put(store, _text("prt_big", "secondopening " + "z" * SIZE))
    assert await _served(store, "prt_big") == raw
    assert await _found(store, "firstopening") == []
    assert await _found(store, "secondopening") == ["prt_big"]
    assert await store.pinned_ids("ses_l") == frozenset({"prt_big"})
    index_agrees(db)


async def test_a_large_output_is_pruned_and_unpruned(store: Store, db: str | Path) -> None:
    await _session(store)
    raw = await _put(store, _tool("prt_out", "outputopening " + "o" * SIZE))
    marked = await store.mark_compacted(["prt_out"], 77)
    assert len(marked) == 1
    served = await _served(store, "prt_out")
    doc = json.loads(served)
    assert doc["state"]["time"]["compacted"] == 77
    assert doc["state"]["output"] == json.loads(raw)["state"]["output"]
    await store.unmark_compacted(["prt_out"])
    assert "compacted" not in json.loads(await _served(store, "prt_out"))["state"]["time"]
    assert await _found(store, "outputopening") == ["prt_out"]
