"""Rows stored before the door checked depth (issue 9 item 4): a part whose ``metadata`` or tool
``input`` nests thousands of levels must not poison its session's reads. Written straight into
SQLite, as an old daemon would have; every read path of the engine then works on it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest

from sidecar.engine import context, prune_run
from sidecar.model.config import CompactionConfig
from sidecar.model.jsonguard import deeper_than, flatten_deep
from sidecar.model.messages import AssistantMessage, MessageTime, UserMessage
from sidecar.model.parts import TextPart
from sidecar.model.session import Session, SessionTime
from sidecar.store import Store

DEPTH = 3000  # far past Python's recursion limit at any stack depth


def _deep(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


async def test_every_read_path_survives_a_row_nested_past_the_recursion_limit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    store = await Store.open(path)
    sid = "ses_deep"
    await store.put_session(Session(id=sid, title="", time=SessionTime(created=1, updated=1)))
    user = UserMessage(id="msg_1", session_id=sid, time=MessageTime(created=1))
    reply = AssistantMessage(
        id="msg_2", session_id=sid, parent_id="msg_1", time=MessageTime(created=2), finish="stop"
    )
    for m in (user, reply):
        await store.put_message(m, msgspec.json.encode(m))
    await store.close()
    text = (
        '{"id":"prt_1","sessionID":"ses_deep","messageID":"msg_1","type":"text",'
        f'"text":"hello","metadata":{_deep(DEPTH)}}}'
    )
    tool = (
        '{"id":"prt_2","sessionID":"ses_deep","messageID":"msg_2","type":"tool","callID":"c",'
        '"tool":"bash","state":{"status":"completed","input":' + _deep(DEPTH) + ","
        '"output":"done","time":{"start":1,"end":2}}}'
    )
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO parts (id, message_id, session_id, type, data) VALUES (?, ?, ?, ?, ?)",
            [("prt_1", "msg_1", sid, "text", text), ("prt_2", "msg_2", sid, "tool", tool)],
        )
    with pytest.raises(RecursionError):  # what every read hit before
        msgspec.json.decode(text)
    store = await Store.open(path)
    try:
        session = await store.require_session(sid)
        for fmt in ("parts", "openai", "anthropic"):
            result = await context.build(store, session, fmt)  # type: ignore[arg-type]
            assert result.messages and result.estimated_tokens > 0
        await prune_run.run(store, session, CompactionConfig())
        store.cache.invalidate(sid)  # cold: the light walk meets the row SQLite's JSON refuses
        await prune_run.run(store, session, CompactionConfig())
        page, _ = await store.page_raw(sid, None, None)
        assert [len(m.parts) for m in page] == [1, 1]  # the stored text is served as it is
    finally:
        await store.close()


def test_flatten_keeps_shallow_values_and_strings_that_look_like_brackets() -> None:
    doc = b'{"s":"[[[{{{","n":-1.5e3,"t":true,"a":[[[[[0]]]]],"o":{"k":null}}'
    assert not deeper_than(doc, 6) and deeper_than(doc, 5)
    assert msgspec.json.decode(flatten_deep(doc, 3)) == {
        "s": "[[[{{{",
        "n": -1500.0,
        "t": True,
        "a": [[None]],
        "o": {"k": None},
    }


async def test_rows_the_daemon_stored_are_not_checked_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32 item 1: a stored row with more than 512 brackets (inside its strings) paid the
    depth scan again on every read. What the daemon stored passed the door: no read scans it."""
    sid = "ses_many"
    await store.put_session(Session(id=sid, title="", time=SessionTime(created=1, updated=1)))
    user = UserMessage(id="msg_1", session_id=sid, time=MessageTime(created=1))
    await store.put_message(user, msgspec.json.encode(user))
    text = TextPart(id="prt_1", session_id=sid, message_id="msg_1", text="[{" * 2000 + "x")
    await store.put_part(text, msgspec.json.encode(text))
    store.cache.invalidate(sid)

    scans: list[int] = []

    def scan(data: bytes, *_: object) -> bool:
        scans.append(len(data))
        return False

    for target in ("sidecar.model.jsonguard", "sidecar.store.rows"):
        monkeypatch.setattr(f"{target}.deeper_than", scan, raising=False)
        monkeypatch.setattr(f"{target}.flatten_deep", scan, raising=False)
    session = await store.require_session(sid)
    for fmt in ("parts", "openai"):
        result = await context.build(store, session, fmt)  # type: ignore[arg-type]
        assert result.messages
    page, _ = await store.page_raw(sid, None, None)
    assert msgspec.json.decode(page[0].parts[0])["text"] == text.text
    assert scans == []
