"""The store against a real SQLite file: upserts, cascades, paging, group commit, boundaries."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import msgspec
import pytest

from sidecar.errors import UnknownMessage, UnknownSession
from sidecar.model.messages import AssistantMessage, MessageTime, UserMessage
from sidecar.model.parts import CompactionPart, TextPart, ToolCompleted, ToolPart, ToolTime
from sidecar.model.session import Session, SessionTime
from sidecar.store import SCHEMA_VERSION, Key, Store

enc = msgspec.json.encode


async def _session(store: Store, sid: str = "ses_1") -> Session:
    s = Session(id=sid, title="t", time=SessionTime(created=1, updated=1))
    await store.put_session(s)
    return s


async def _user(store: Store, mid: str, created: int, sid: str = "ses_1") -> UserMessage:
    m = UserMessage(id=mid, session_id=sid, time=MessageTime(created=created))
    await store.put_message(m, enc(m))
    return m


async def _text(store: Store, pid: str, mid: str, text: str, sid: str = "ses_1") -> None:
    p = TextPart(id=pid, session_id=sid, message_id=mid, text=text)
    await store.put_part(p, enc(p))


async def test_schema_version_recorded(tmp_path: Path) -> None:
    s = await Store.open(tmp_path / "a.db")
    await s.close()
    with sqlite3.connect(tmp_path / "a.db") as db:
        assert db.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # reopening does not re-run migrations
    s = await Store.open(tmp_path / "a.db")
    await s.close()


async def test_unknown_fields_survive_round_trip(store: Store) -> None:
    await _session(store)
    raw = (
        b'{"id":"msg_1","sessionID":"ses_1","role":"user","time":{"created":5},'
        b'"futureField":{"x":1}}'
    )
    info = msgspec.json.decode(raw, type=UserMessage)
    await store.put_message(info, raw)
    page, _ = await store.page_raw("ses_1", None, None)
    assert msgspec.json.decode(page[0].info)["futureField"] == {"x": 1}


async def test_upsert_replaces_and_delete_cascades(store: Store) -> None:
    await _session(store)
    await _user(store, "msg_1", 10)
    await _text(store, "prt_1", "msg_1", "first")
    await _text(store, "prt_1", "msg_1", "second")
    window = await store.window("ses_1")
    assert [p.text for p in window[0].parts] == ["second"]  # type: ignore[union-attr]
    assert await store.delete_session("ses_1") is True
    assert await store.get_part("prt_1") is None
    assert await store.get_message("msg_1") is None
    assert await store.delete_session("ses_1") is False


async def test_fk_errors_name_the_missing_parent(store: Store) -> None:
    with pytest.raises(UnknownSession, match="ses_nope"):
        await _user(store, "msg_x", 1, sid="ses_nope")
    await _session(store)
    with pytest.raises(UnknownMessage, match="msg_nope"):
        await _text(store, "prt_x", "msg_nope", "hi")


async def test_bad_op_in_a_batch_fails_alone(store: Store) -> None:
    await _session(store)
    await _user(store, "msg_1", 1)
    good = [_text(store, f"prt_{i}", "msg_1", str(i)) for i in range(20)]
    bad = _text(store, "prt_bad", "msg_missing", "x")
    results = await asyncio.gather(*good, bad, return_exceptions=True)
    assert all(r is None for r in results[:20])
    assert isinstance(results[20], UnknownMessage)
    assert len((await store.window("ses_1"))[0].parts) == 20


async def test_concurrent_writes_share_commits(store: Store) -> None:
    await _session(store)
    await _user(store, "msg_1", 1)
    before = store.commits
    await asyncio.gather(*[_text(store, f"prt_{i:03}", "msg_1", "x") for i in range(200)])
    used = store.commits - before
    assert 1 <= used < 200  # grouped, yet every write was committed before its await returned
    assert len((await store.window("ses_1"))[0].parts) == 200


async def test_messages_order_by_time_then_id_not_id_alone(store: Store) -> None:
    await _session(store)
    await _user(store, "msg_b", 1)
    await _user(store, "msg_a", 2)  # sorts first by id, second by time
    window = await store.window("ses_1")
    assert [w.info.id for w in window] == ["msg_b", "msg_a"]


async def test_cursor_paging_covers_everything_once(store: Store) -> None:
    await _session(store)
    for i in range(25):
        await _user(store, f"msg_{i:02}", i)
        await _text(store, f"prt_{i:02}", f"msg_{i:02}", f"t{i}")
    seen: list[str] = []
    cursor = None
    while True:
        page, cursor = await store.page_raw("ses_1", 10, cursor)
        seen += [msgspec.json.decode(m.info)["id"] for m in page]
        assert all(len(m.parts) == 1 for m in page)
        if cursor is None:
            break
    assert seen == [f"msg_{i:02}" for i in range(25)]
    everything, nxt = await store.page_raw("ses_1", None, None)
    assert len(everything) == 25 and nxt is None


async def test_newest_first_pages_walk_backwards(store: Store) -> None:
    await _session(store)
    for i in range(10):
        await _user(store, f"msg_{i}", i)
    pages = [[w.info.id for w in page] async for page in store.newest_first("ses_1", page=4)]
    assert pages == [
        ["msg_9", "msg_8", "msg_7", "msg_6"],
        ["msg_5", "msg_4", "msg_3", "msg_2"],
        ["msg_1", "msg_0"],
    ]


async def test_boundary_needs_a_finished_error_free_summary(store: Store) -> None:
    await _session(store)
    await _user(store, "msg_1", 1)
    await _user(store, "msg_2", 2)
    marker = CompactionPart(id="prt_c", session_id="ses_1", message_id="msg_2", auto=True)
    await store.put_part(marker, enc(marker))
    assert await store.boundary("ses_1") is None
    summary = AssistantMessage(
        id="msg_3",
        session_id="ses_1",
        parent_id="msg_2",
        summary=True,
        time=MessageTime(created=3),
    )
    await store.put_message(summary, enc(summary))
    assert await store.boundary("ses_1") is None  # not finished yet
    done = msgspec.structs.replace(summary, finish="stop")
    await store.put_message(done, enc(done))
    b = await store.boundary("ses_1")
    assert b is not None and b.marker == Key(2, "msg_2") and b.tail_start_id is None
    assert await store.boundary("ses_1", before=Key(2, "msg_2")) is None


async def test_mark_compacted_patches_only_completed_tools(store: Store) -> None:
    await _session(store)
    await _user(store, "msg_1", 1)
    raw = (
        b'{"id":"prt_t","sessionID":"ses_1","messageID":"msg_1","type":"tool","callID":"c",'
        b'"tool":"bash","extra":1,"state":{"status":"completed","input":{},"output":"o",'
        b'"time":{"start":1,"end":2}}}'
    )
    part = msgspec.json.decode(raw, type=ToolPart)
    await store.put_part(part, raw)
    await _text(store, "prt_x", "msg_1", "hello")
    out = await store.mark_compacted(["prt_t", "prt_x"], 99)
    assert len(out) == 2
    got = await store.get_part("prt_t")
    assert got is not None
    assert isinstance(got[0], ToolPart) and isinstance(got[0].state, ToolCompleted)
    assert got[0].state.time == ToolTime(start=1, end=2, compacted=99)
    assert msgspec.json.decode(got[1])["extra"] == 1
    text = await store.get_part("prt_x")
    assert text is not None and "compacted" not in text[1]


async def test_delete_from_with_part_cut(store: Store) -> None:
    await _session(store)
    for i in range(4):
        await _user(store, f"msg_{i}", i)
    await _text(store, "prt_a", "msg_1", "keep")
    await _text(store, "prt_b", "msg_1", "drop")
    await store.delete_from("ses_1", Key(1, "msg_1"), ("msg_1", "prt_b"))
    window = await store.window("ses_1")
    assert [w.info.id for w in window] == ["msg_0", "msg_1"]
    assert [p.id for p in window[1].parts] == ["prt_a"]


async def test_list_sessions_pages_newest_first(store: Store) -> None:
    for i in range(5):
        s = Session(id=f"ses_{i}", title="", time=SessionTime(created=i, updated=i))
        await store.put_session(s)
    first, cur = await store.list_sessions(limit=2)
    assert [s.id for s in first] == ["ses_4", "ses_3"] and cur
    rest, cur2 = await store.list_sessions(limit=10, cursor=cur)
    assert [s.id for s in rest] == ["ses_2", "ses_1", "ses_0"] and cur2 is None
