"""Messages and parts: daemon-made ids, unknown fields, paging and chronological order."""

from __future__ import annotations

import asyncio

import msgspec
from sidecar_client import Client
from wire import StoredMessage, put_message, put_part, stored

from sidecar.model.messages import UserMessage
from sidecar.model.parts import TextPart

from .builders import assistant_message, text_part, user_message


async def all_messages(client: Client, session_id: str) -> list[StoredMessage]:
    return (await stored(client, session_id)).messages


async def test_daemon_made_ids_ascend_with_creation(shared: Client) -> None:
    session = await shared.create_session()
    message_ids: list[str] = []
    part_ids: list[str] = []
    for i in range(20):
        message = await put_message(shared, user_message(session.id))
        message_ids.append(message["id"])
        for j in range(3):
            part = await put_part(shared, text_part(session.id, message["id"], f"{i}.{j}"))
            part_ids.append(part["id"])
    assert all(mid.startswith("msg_") for mid in message_ids)
    assert all(pid.startswith("prt_") for pid in part_ids)
    assert message_ids == sorted(message_ids) and len(set(message_ids)) == 20
    assert part_ids == sorted(part_ids) and len(set(part_ids)) == 60
    # session/messages returns them in that order, parts in id order within their message.
    stored = await all_messages(shared, session.id)
    assert [m.info["id"] for m in stored] == message_ids
    assert [p["id"] for m in stored for p in m.parts] == part_ids


async def test_daemon_fills_in_id_and_created_time(shared: Client) -> None:
    session = await shared.create_session()
    message = await put_message(shared, user_message(session.id))
    assert message["id"].startswith("msg_")
    assert message["time"]["created"] > 0
    # An upsert without time keeps the original creation time.
    again = await put_message(shared, user_message(session.id, id=message["id"], agent="x"))
    assert again["time"]["created"] == message["time"]["created"]
    [stored] = await all_messages(shared, session.id)
    assert stored.info["agent"] == "x"


async def test_unknown_fields_survive_a_round_trip(shared: Client) -> None:
    session = await shared.create_session()
    extra = {"futureField": {"nested": [1, "two", None]}, "x-vendor": True}
    message = await put_message(shared, user_message(session.id, **extra))
    assert message["futureField"] == extra["futureField"]
    part = await put_part(shared, text_part(session.id, message["id"], "hi", partExtra={"k": 1.5}))
    assert part["partExtra"] == {"k": 1.5}

    [stored] = await all_messages(shared, session.id)
    assert stored.info["futureField"] == {"nested": [1, "two", None]}
    assert stored.info["x-vendor"] is True
    assert stored.parts[0]["partExtra"] == {"k": 1.5}
    assert stored.parts[0]["text"] == "hi"


async def test_typed_structs_are_accepted(shared: Client) -> None:
    session = await shared.create_session()
    message = await put_message(shared, UserMessage(session_id=session.id, agent="build"))
    assert message["role"] == "user" and message["agent"] == "build"
    part = await put_part(
        shared, TextPart(session_id=session.id, message_id=message["id"], text="typed")
    )
    assert part["type"] == "text" and part["id"].startswith("prt_")
    [stored] = await all_messages(shared, session.id)
    decoded = msgspec.convert(stored.parts[0], TextPart)
    assert decoded.text == "typed"


async def test_messages_are_chronological_by_created_time(shared: Client) -> None:
    session = await shared.create_session()
    # Written out of order, with ids that sort against their times.
    for mid, created in (("msg_c", 1_000), ("msg_a", 3_000), ("msg_b", 2_000)):
        await put_message(shared, user_message(session.id, id=mid, time={"created": created}))
    stored = await all_messages(shared, session.id)
    assert [m.info["id"] for m in stored] == ["msg_c", "msg_b", "msg_a"]
    assert [m.info["time"]["created"] for m in stored] == [1_000, 2_000, 3_000]


async def test_messages_paging_with_limit_and_next_cursor(shared: Client) -> None:
    session = await shared.create_session()
    ids = []
    for i in range(5):
        user = await put_message(shared, user_message(session.id))
        await put_part(shared, text_part(session.id, user["id"], f"question {i}"))
        ids.append(user["id"])
    reply = await put_message(shared, assistant_message(session.id, ids[-1]))
    ids.append(reply["id"])

    full = await stored(shared, session.id)
    assert [m.info["id"] for m in full.messages] == ids
    assert full.next_cursor is None

    seen: list[StoredMessage] = []
    sizes: list[int] = []
    cursor: str | None = None
    while True:
        page = await stored(shared, session.id, limit=4, cursor=cursor)
        seen += page.messages
        sizes.append(len(page.messages))
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sizes == [4, 2]
    assert [m.info["id"] for m in seen] == ids
    # Parts travel with their message across pages.
    assert [m.parts[0]["text"] for m in seen[:5]] == [f"question {i}" for i in range(5)]
    assert seen[5].parts == []


async def test_removing_parts_and_messages(shared: Client) -> None:
    session = await shared.create_session()
    message = await put_message(shared, user_message(session.id))
    keep = await put_part(shared, text_part(session.id, message["id"], "keep"))
    drop = await put_part(shared, text_part(session.id, message["id"], "drop"))
    await shared.remove_part(session.id, message["id"], drop["id"])
    [stored] = await all_messages(shared, session.id)
    assert [p["id"] for p in stored.parts] == [keep["id"]]

    await shared.remove_message(session.id, message["id"])
    assert await all_messages(shared, session.id) == []


async def test_concurrent_writes_are_all_acknowledged_and_stored(shared: Client) -> None:
    session = await shared.create_session()
    replies = await asyncio.gather(
        *(put_message(shared, user_message(session.id, seq=i)) for i in range(100))
    )
    assert len({r["id"] for r in replies}) == 100
    stored = await all_messages(shared, session.id)
    assert sorted(m.info["seq"] for m in stored) == list(range(100))
